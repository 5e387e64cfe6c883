"""The file tools: read, write and list the files in the run's workspace."""

from pathlib import PurePosixPath
from typing import Any

from stratagem.common.errors import ToolError
from stratagem.tools.builtin.workspace import (
    RESERVED_DIR,
    atomic_write,
    is_absolute,
    relative,
    workspace_path,
    workspace_root,
)
from stratagem.tools.definition import ToolContext, tool

MAX_READ_FILE_BYTES = 1024 * 1024


@tool(side_effects=False)
def read_file(path: str, *, ctx: ToolContext) -> str:
    """Read a UTF-8 text file from the run's workspace and return its content.

    `path` is relative to the workspace (for example "reports/summary.md"). Files larger than
    1 MB are refused.
    """
    target = workspace_path(ctx, path)
    if not target.exists():
        raise ToolError(f"read_file: no file '{path}' in the workspace", retryable=False)
    if not target.is_file():
        raise ToolError(f"read_file: '{path}' is a folder, not a file", retryable=False)
    size = target.stat().st_size
    if size > MAX_READ_FILE_BYTES:
        raise ToolError(
            f"read_file: '{path}' is {size} bytes; files over {MAX_READ_FILE_BYTES} bytes (1 MB) cannot be read",
            retryable=False,
        )
    try:
        return target.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise ToolError(f"read_file: '{path}' is not UTF-8 text", retryable=False) from None
    except OSError as exc:  # said with the relative path: the worker's own folders are not the run's business
        raise ToolError(f"read_file: cannot read '{path}': {exc.strerror}", retryable=False) from None


@tool
def write_file(path: str, content: str, *, ctx: ToolContext) -> dict[str, Any]:
    """Write text to a file in the run's workspace, replacing the file if it exists.

    `path` is relative to the workspace; missing folders are created. The file is replaced in one
    step, so readers never see it half-written. Returns {"path": the relative path, "bytes": the
    number of bytes written}.
    """
    target = workspace_path(ctx, path, writing=True)
    if target.is_dir():
        raise ToolError(f"write_file: '{path}' is a folder, not a file", retryable=False)
    data = content.encode("utf-8")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(target, data)
    except OSError as exc:
        raise ToolError(f"write_file: cannot write '{path}': {exc.strerror}", retryable=False) from None
    return {"path": relative(ctx, target), "bytes": len(data)}


@tool(side_effects=False)
def list_files(pattern: str = "**/*", *, ctx: ToolContext) -> list[str]:
    """List the files in the run's workspace whose relative path matches a glob pattern.

    The default "**/*" lists every file; "*.csv" lists CSV files at the top level; "reports/**/*"
    lists everything under reports. Returns relative paths, sorted.
    """
    if not pattern or is_absolute(pattern) or ".." in PurePosixPath(pattern.replace("\\", "/")).parts:
        raise ToolError(
            f"list_files: pattern '{pattern}' must be a relative glob inside the workspace (no '..')",
            retryable=False,
        )
    root = workspace_root(ctx)
    found = []
    for candidate in root.glob(pattern):
        relative = candidate.relative_to(root)
        if relative.parts[:1] == (RESERVED_DIR,) or not candidate.is_file():
            continue
        if not candidate.resolve().is_relative_to(root):  # a symlink to somewhere else
            continue
        found.append(relative.as_posix())
    return sorted(found)
