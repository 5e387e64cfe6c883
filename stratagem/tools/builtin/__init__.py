"""The tools every worker offers: HTTP calls to allowed hosts, files in the run's workspace,
CSV rows, and text templates.

Each tool's docstring is the description a planner model reads, so it says what the tool does,
what its arguments mean and what it returns.

`ToolRegistry.load_module("stratagem.tools.builtin")` registers the `@tool` functions this
module holds, so every tool is imported here; in the order the single module defined them,
which is the order `load_module` reports them in.
"""

from stratagem.domain.secret_bindings import SECRET_ENV_PREFIX
from stratagem.tools.builtin.allowlist import HTTP_ALLOWLIST_ENV
from stratagem.tools.builtin.csv_rows import append_csv_row
from stratagem.tools.builtin.files import MAX_READ_FILE_BYTES, list_files, read_file, write_file
from stratagem.tools.builtin.guard import HTTP_DENY_ENV, protect_address
from stratagem.tools.builtin.http import MAX_RESPONSE_BYTES, MAX_RESPONSE_TEXT_CHARS, http_request
from stratagem.tools.builtin.text import render_template
from stratagem.tools.builtin.workspace import MAX_NAME_BYTES, RESERVED_DIR

__all__ = [
    "HTTP_ALLOWLIST_ENV",
    "HTTP_DENY_ENV",
    "MAX_NAME_BYTES",
    "MAX_READ_FILE_BYTES",
    "MAX_RESPONSE_BYTES",
    "MAX_RESPONSE_TEXT_CHARS",
    "RESERVED_DIR",
    "SECRET_ENV_PREFIX",
    "append_csv_row",
    "http_request",
    "list_files",
    "protect_address",
    "read_file",
    "render_template",
    "write_file",
]
