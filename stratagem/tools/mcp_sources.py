"""`--tools mcp:...`: what an MCP server tool source says, read from its one string.

    mcp:stdio:COMMAND [ARGS]            the worker starts COMMAND and speaks MCP on its stdin/stdout
    mcp:http:URL                        a server that is already running (Streamable HTTP)
    mcp[OPTIONS]:stdio:... / mcp[OPTIONS]:http:...

`--tools` takes one string, so the command line of a stdio server is split as a shell would
(`shlex`), and options sit in brackets after `mcp`, comma-separated:

    prefix=NAME        register the server's tools as NAME_<tool>: two servers, or a server and
                       this worker's own tools, may then offer the same name
    only=A+B           register only these of the server's tools
    approval           every call of every tool waits for a person; approval=A+B: these tools only
    risk=LEVEL         the least risk (low, medium, high) of a step using any of the server's tools
    env=VAR+VAR        pass these variables of the worker's environment to a stdio server, which
                       otherwise gets only HOME, PATH, SHELL, TERM, USER and LOGNAME
    timeout=SECONDS    how long starting the server and listing its tools may take (30)

The source is the worker's own configuration, as a tool module is: a run can never name one.
Every problem is a `ToolRegistrationError` of one line that says what to write instead.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from stratagem.common.errors import ToolRegistrationError
from stratagem.domain.plan import Risk

FORMS = "mcp:stdio:COMMAND [ARGS] or mcp:http:URL"
DEFAULT_TIMEOUT = 30.0
MAX_TIMEOUT = 600.0
_OPTIONS = ("prefix", "only", "approval", "risk", "env", "timeout")
_PREFIX = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,31}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def is_mcp_source(source: str) -> bool:
    """Whether a `--tools` value names an MCP server rather than a module."""
    text = source.strip()
    return text.startswith("mcp:") or text.startswith("mcp[")


@dataclass(frozen=True)
class McpSource:
    """One MCP server, as `--tools` names it."""

    spec: str
    transport: Literal["stdio", "http"]
    command: tuple[str, ...] = ()
    url: str = ""
    prefix: str = ""
    only: frozenset[str] | None = None
    approval: bool | frozenset[str] = False
    risk: Risk | None = None
    env: tuple[str, ...] = ()
    timeout: float = DEFAULT_TIMEOUT

    @property
    def label(self) -> str:
        """How messages name the server: the source as written, cut if long."""
        text = " ".join(self.spec.split())
        return text if len(text) <= 120 else text[:117] + "..."

    @property
    def short(self) -> str:
        """A few words for the lines of a server's stderr in the worker's log."""
        if self.transport == "http":
            parts = urlsplit(self.url)
            text = parts.netloc + parts.path
        else:
            text = " ".join([Path(self.command[0]).name, *self.command[1:]])
        return text if len(text) <= 48 else text[:45] + "..."

    def needs_approval(self, tool: str) -> bool:
        return self.approval if isinstance(self.approval, bool) else tool in self.approval

    def environment(self) -> dict[str, str]:
        """The variables `env=` passes on; each must be set in the worker's environment."""
        missing = [name for name in self.env if name not in os.environ]
        if missing:
            raise ToolRegistrationError(
                f"MCP server '{self.label}': env= names {', '.join(missing)}, which this environment does not set"
            )
        return {name: os.environ[name] for name in self.env}

    def check_command(self) -> None:
        """Refuse a stdio command that cannot start, before trying to start it."""
        if self.transport != "stdio":
            return
        program = self.command[0]
        if os.sep in program or (os.altsep and os.altsep in program):
            path = Path(program)
            if not path.is_file():
                raise ToolRegistrationError(f"MCP server '{self.label}': no such file: {program}")
            if not os.access(path, os.X_OK):
                raise ToolRegistrationError(f"MCP server '{self.label}': {program} is not executable")
        elif shutil.which(program) is None:
            raise ToolRegistrationError(f"MCP server '{self.label}': command '{program}' was not found on PATH")


def parse_source(spec: str) -> McpSource:
    """Read `mcp[OPTIONS]:TRANSPORT:TARGET`. `mcp:http://...` and `mcp:https://...` are taken
    as `mcp:http:URL`, which is what anyone writing them means."""
    text = spec.strip()
    if not is_mcp_source(text):
        raise ToolRegistrationError(f"'{spec}' is not an MCP tool source; write {FORMS}")
    rest = text[3:]
    options = ""
    if rest.startswith("["):
        end = rest.find("]")
        if end < 0:
            raise ToolRegistrationError(f"'{spec}': the options after 'mcp[' have no closing ']'")
        options, rest = rest[1:end], rest[end + 1 :]
    if not rest.startswith(":"):
        raise ToolRegistrationError(f"'{spec}' is not an MCP tool source; write {FORMS}")
    rest = rest[1:]
    if rest.startswith(("http://", "https://")):
        transport, target = "http", rest
    else:
        transport, sep, target = rest.partition(":")
        if not sep:
            raise ToolRegistrationError(f"'{spec}' names no transport; write {FORMS}")
        transport = transport.strip().lower()
    fields = _options(spec, options)
    if transport == "stdio":
        try:
            command = tuple(shlex.split(target))
        except ValueError as exc:
            raise ToolRegistrationError(f"'{spec}': cannot split the command ({exc})") from None
        if not command:
            raise ToolRegistrationError(f"'{spec}' names no command; write mcp:stdio:COMMAND [ARGS]")
        return McpSource(spec=text, transport="stdio", command=command, **fields)  # type: ignore[arg-type]
    if transport == "http":
        url = target.strip()
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ToolRegistrationError(
                f"'{spec}': '{url}' is not an http:// or https:// URL; write mcp:http:http://HOST:PORT/mcp"
            )
        if fields.get("env"):
            raise ToolRegistrationError(f"'{spec}': env= is for stdio servers, which the worker starts")
        return McpSource(spec=text, transport="http", url=url, **fields)  # type: ignore[arg-type]
    raise ToolRegistrationError(f"'{spec}': unknown MCP transport '{transport}'; write {FORMS}")


def _options(spec: str, text: str) -> dict[str, object]:
    fields: dict[str, object] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        key, sep, value = (s.strip() for s in item.partition("="))
        if key not in _OPTIONS:
            raise ToolRegistrationError(f"'{spec}': unknown option '{key}' (the options: {', '.join(_OPTIONS)})")
        if key in fields:
            raise ToolRegistrationError(f"'{spec}': option '{key}' is given twice")
        if key == "approval" and not sep:
            fields[key] = True
            continue
        if not value:
            raise ToolRegistrationError(f"'{spec}': option '{key}' needs a value ({key}=...)")
        if key == "prefix":
            if not _PREFIX.match(value):
                raise ToolRegistrationError(
                    f"'{spec}': prefix '{value}' must start with a letter and hold only letters, digits, '_' and '-'"
                )
            fields[key] = value
        elif key in ("only", "approval"):
            fields[key] = frozenset(n.strip() for n in value.split("+") if n.strip())
        elif key == "risk":
            try:
                fields[key] = Risk(value)
            except ValueError:
                raise ToolRegistrationError(f"'{spec}': risk must be low, medium or high, not '{value}'") from None
        elif key == "env":
            names = tuple(n.strip() for n in value.split("+") if n.strip())
            bad = [n for n in names if not _ENV_NAME.match(n)]
            if bad:
                raise ToolRegistrationError(f"'{spec}': '{bad[0]}' is not an environment variable name")
            fields[key] = names
        else:  # timeout
            try:
                seconds = float(value)
            except ValueError:
                seconds = -1.0
            if not 0 < seconds <= MAX_TIMEOUT:
                raise ToolRegistrationError(
                    f"'{spec}': timeout must be a number of seconds above 0 and at most {MAX_TIMEOUT:g}"
                )
            fields[key] = seconds
    return fields


def canonical_source(spec: str) -> str:
    """The source with the paths of a stdio command made absolute, so that a worker started in
    another folder (the background worker, restarted by a run from elsewhere) starts the same
    server: the program when written as a path, and arguments that name existing files."""
    source = parse_source(spec)
    if source.transport != "stdio":
        return source.spec
    words = list(source.command)
    program = words[0]
    if (os.sep in program or (os.altsep and os.altsep in program)) and Path(program).exists():
        # absolute(), not resolve(): a virtual environment's python is a link that must stay one.
        words[0] = str(Path(program).absolute())
    for i, word in enumerate(words[1:], start=1):
        if not word.startswith("-") and (os.sep in word or word.endswith(".py")) and Path(word).is_file():
            words[i] = str(Path(word).absolute())
    start = source.spec.find("]") + 1 if source.spec.startswith("mcp[") else 0
    head = source.spec[: source.spec.lower().index(":stdio:", start) + len(":stdio:")]
    return head + shlex.join(words)
