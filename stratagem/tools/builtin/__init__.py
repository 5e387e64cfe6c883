"""The tools every worker offers: HTTP calls to allowed hosts, files in the run's workspace,
CSV rows, and text templates.

Each tool's docstring is the description a planner model reads, so it says what the tool does,
what its arguments mean and what it returns.
"""

import contextlib
import csv
import hashlib
import io
import ipaddress
import json
import os
import re
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from string import Template
from typing import Any, Literal

import httpcore
import httpx
import httpcore._backends.sync  # noqa: F401 - SyncStream, wrapped with a deadline

from ...config import Settings
from ...errors import ToolError
from ...models.base import without_secrets
from ..registry import ToolContext, tool

try:
    import fcntl
except ImportError:  # Windows: the in-process lock below is all there is
    fcntl = None  # type: ignore[assignment]

HTTP_ALLOWLIST_ENV = "STRATAGEM_HTTP_ALLOWLIST"
# More addresses no step may call (host:port, comma-separated), beside the worker's Temporal ones.
HTTP_DENY_ENV = "STRATAGEM_HTTP_DENY"
MAX_RESPONSE_TEXT_CHARS = 100_000
# Reading stops here so a huge response cannot exhaust the worker's memory.
MAX_RESPONSE_BYTES = 10 * 1024 * 1024
MAX_READ_FILE_BYTES = 1024 * 1024
MAX_NAME_BYTES = 255  # what Linux and macOS file systems allow in one name
RESERVED_DIR = ".stratagem"

_ERROR_EXCERPT_CHARS = 300
_KEPT_RESPONSE_HEADERS = ("content-type",)


# --- HTTP ---------------------------------------------------------------------------------------


@tool
def http_request(
    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE"],
    url: str,
    headers: dict[str, str] = {},  # noqa: B006 - read only, never mutated
    json_body: Any = None,
    body: str | None = None,
    timeout_seconds: float = 30,
    *,
    ctx: ToolContext,
) -> dict[str, Any]:
    """Send an HTTP request to an allowed host and return the response.

    Only http and https URLs on hosts the operator allowed may be called. Pass `json_body` to send
    JSON, or `body` to send raw text (not both). Requests other than GET carry an
    `Idempotency-Key` header unique to this step, so a retried request can be recognised by the
    server. Redirects are followed only to allowed hosts. A header value may name a credential the
    worker holds as `${secret:NAME}` (for example "Authorization": "Bearer ${secret:CRM_TOKEN}");
    plans never contain the credential itself.

    Returns {"status": HTTP status code, "headers": {"content-type": ...}, "json": the parsed body
    when the response is JSON (else null), "text": the body as text (at most 100000 characters)}.
    Fails on 4xx and 5xx responses.
    """
    if json_body is not None and body is not None:
        raise ToolError("http_request: pass either 'json_body' or 'body', not both", retryable=False)
    if timeout_seconds <= 0:
        raise ToolError("http_request: 'timeout_seconds' must be greater than 0", retryable=False)
    try:
        target = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise ToolError(f"http_request: invalid URL '{url}': {exc}", retryable=False) from None
    allowlist = _http_allowlist()
    _check_allowed(target, allowlist)

    request_headers, secrets = _with_secrets(headers)
    if method != "GET" and not any(name.lower() == "idempotency-key" for name in request_headers):
        request_headers["Idempotency-Key"] = ctx.idempotency_key

    def check_each_request(request: httpx.Request) -> None:
        # Runs for the first request and for every redirect, so a redirect cannot leave the allowlist.
        _check_allowed(request.url, allowlist)

    deadline = time.monotonic() + timeout_seconds
    transport = _GuardedTransport(_GuardedBackend(allowlist, _protected_addresses(), deadline))
    try:
        # trust_env=False: a proxy from the environment would connect on our behalf, past the
        # address checks the transport makes at connect time.
        with httpx.Client(
            timeout=timeout_seconds,
            follow_redirects=True,
            event_hooks={"request": [check_each_request]},
            transport=transport,
            trust_env=False,
        ) as client:
            with client.stream(
                method,
                target,
                headers=request_headers,
                json=json_body,
                content=body.encode() if body is not None else None,
            ) as response:
                raw = _read_capped(response)
    except httpx.TimeoutException:
        raise ToolError(f"http_request: {method} {url} timed out after {timeout_seconds:g}s", retryable=True) from None
    except httpx.TooManyRedirects:
        raise ToolError(f"http_request: {method} {url} redirected too many times", retryable=False) from None
    except (httpx.InvalidURL, httpx.UnsupportedProtocol) as exc:
        raise ToolError(f"http_request: {method} {url}: {exc}", retryable=False) from None
    except httpx.TransportError as exc:
        reason = str(exc) or type(exc).__name__
        raise ToolError(f"http_request: {method} {url} failed: {reason}", retryable=True) from None
    except httpx.DecodingError as exc:
        raise ToolError(f"http_request: {method} {url}: cannot decode the response: {exc}", retryable=False) from None

    text = raw.decode(response.encoding or "utf-8", errors="replace")
    if secrets:  # a server that echoes the request must not put a secret into the step's output
        text = without_secrets(text, secrets)
        raw = text.encode()
    status = response.status_code
    if status == 429 or status >= 500:
        raise ToolError(f"http_request: {method} {url} returned {status}: {_excerpt(text)}", retryable=True)
    if status >= 400:
        raise ToolError(f"http_request: {method} {url} returned {status}: {_excerpt(text)}", retryable=False)

    content_type = response.headers.get("content-type", "")
    return {
        "status": status,
        "headers": {name: response.headers[name] for name in _KEPT_RESPONSE_HEADERS if name in response.headers},
        "json": _parse_json(raw) if _is_json(content_type) else None,
        "text": text[:MAX_RESPONSE_TEXT_CHARS],
    }


_SECRET_REFERENCE = re.compile(r"\$\{secret:([A-Za-z_][A-Za-z0-9_]*)\}")
SECRET_ENV_PREFIX = "STRATAGEM_SECRET_"


def _with_secrets(headers: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """Headers with `${secret:NAME}` replaced by the worker's STRATAGEM_SECRET_NAME, and the values used.

    A plan names a credential; the worker supplies it when the request is sent. The value never
    enters the plan, the history or the step's output.
    """
    used: list[str] = []

    def value(match: re.Match[str]) -> str:
        name = match.group(1).upper()
        secret = os.environ.get(SECRET_ENV_PREFIX + name)
        if not secret:
            raise ToolError(
                f"http_request: secret '{match.group(1)}' is not set on the worker ({SECRET_ENV_PREFIX}{name})",
                retryable=False,
            )
        used.append(secret)
        return secret

    return {name: _SECRET_REFERENCE.sub(value, str(text)) for name, text in headers.items()}, used


def _http_allowlist() -> list[tuple[str, int | None]]:
    """The allowed (host pattern, port or None for the scheme's default port), read now so changes apply."""
    entries = []
    for entry in os.environ.get(HTTP_ALLOWLIST_ENV, "").split(","):
        entry = entry.strip().lower()
        if not entry:
            continue
        entries.append(_host_and_port(entry))
    return entries


def _host_and_port(entry: str) -> tuple[str, int | None]:
    """`host`, `host:port`, `[v6]` or `[v6]:port` -> (host, port or None)."""
    host, port = entry, None
    if entry.startswith("["):  # [ipv6] or [ipv6]:port
        host, _, rest = entry[1:].partition("]")
        if rest.startswith(":") and rest[1:].isdigit():
            port = int(rest[1:])
    elif entry.count(":") == 1:
        name, _, maybe_port = entry.partition(":")
        if maybe_port.isdigit():
            host, port = name, int(maybe_port)
    return host.rstrip("."), port


def _check_allowed(url: httpx.URL, allowlist: list[tuple[str, int | None]]) -> None:
    """The URL's scheme, host and port against the allowlist, before anything is sent.

    An entry without a port allows the scheme's default port only (80, 443): "127.0.0.1" must not
    open every local service. Where the name leads is checked again when connecting.
    """
    if url.scheme not in ("http", "https"):
        raise ToolError(
            f"http_request: only http and https URLs are allowed, not '{url.scheme or 'no scheme'}' ({url})",
            retryable=False,
        )
    host = url.host.lower().rstrip(".")
    if not host:
        raise ToolError(f"http_request: URL '{url}' has no host", retryable=False)
    port = url.port or _default_port(url.scheme)
    for pattern, allowed_port in allowlist:
        if (allowed_port or _default_port(url.scheme)) != port:
            continue
        if host == pattern or (pattern.startswith("*.") and host.endswith(pattern[1:]) and not _is_ip(host)):
            return
    where = f"{host}:{port}" if url.port else host
    raise ToolError(
        f"http_request: host '{where}' is not allowed; add it to {HTTP_ALLOWLIST_ENV} "
        "(comma-separated hosts; a host without ':port' allows ports 80 and 443 only)",
        retryable=False,
    )


def _default_port(scheme: str) -> int:
    return 443 if scheme == "https" else 80


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def _ip(text: str) -> IpAddress:
    address = ipaddress.ip_address(text.split("%", 1)[0])  # drop an IPv6 zone
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


_worker_addresses: set[str] = set()


def protect_address(address: str) -> None:
    """Add a Temporal frontend this process's workers connect to (and its UI) to what steps may not call."""
    _worker_addresses.add(address)


def _protected_addresses() -> set[tuple[IpAddress, int]]:
    """Where the worker's Temporal lives: the frontend, the Web UI beside it, and what the operator adds.

    Never reachable from a step, whatever the allowlist says: a step that reaches the frontend or
    the UI's HTTP API could signal or update runs, its own included.
    """
    entries = []
    # The worker's own connection, from its environment.
    for frontend in {Settings.from_env().address, *_worker_addresses}:
        host, port = _host_and_port(frontend.lower())
        entries.append(frontend.lower())
        if port is not None:
            entries.append(f"[{host}]:{port + 1000}" if ":" in host else f"{host}:{port + 1000}")
    entries += [e for e in os.environ.get(HTTP_DENY_ENV, "").lower().split(",") if e.strip()]
    protected = set()
    for entry in entries:
        host, port = _host_and_port(entry.strip())
        for ip in _resolve(host, port or 80, quiet=True):
            protected.add((ip, port or 80))
    return protected


def _resolve(host: str, port: int, quiet: bool = False) -> list[IpAddress]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        if quiet:
            return []
        raise
    return list(dict.fromkeys(_ip(str(info[4][0])) for info in infos))


def _is_public(ip: IpAddress) -> bool:
    return ip.is_global and not (ip.is_multicast or ip.is_reserved or ip.is_unspecified)


class _GuardedBackend(httpcore.SyncBackend):
    """Connects only to addresses a step may reach, and holds every read to one deadline.

    The name is resolved here, once, and the socket connects to the address that was checked, so
    a name cannot pass the check and then resolve elsewhere. Loopback, private and link-local
    addresses are refused unless the allowlist names that address itself; the worker's Temporal
    addresses are refused always.
    """

    def __init__(
        self, allowlist: list[tuple[str, int | None]], protected: set[tuple[IpAddress, int]], deadline: float
    ) -> None:
        self.allowlist = allowlist
        self.protected = protected
        self.deadline = deadline

    def remaining(self, timeout: float | None) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise httpcore.ReadTimeout("the request's total time ran out")
        return left if timeout is None else min(timeout, left)

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> httpcore.NetworkStream:
        try:
            addresses = _resolve(host, port)
        except OSError as exc:
            raise httpcore.ConnectError(f"cannot resolve {host}: {exc}") from None
        for ip in addresses:
            self.check(host, ip, port)
        try:
            sock = socket.create_connection((str(addresses[0]), port), self.remaining(timeout))
        except TimeoutError:
            raise httpcore.ConnectTimeout(f"connecting to {host}:{port} timed out") from None
        except OSError as exc:
            raise httpcore.ConnectError(str(exc) or type(exc).__name__) from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return _DeadlineStream(sock, self)

    def check(self, host: str, ip: IpAddress, port: int) -> None:
        where = f"'{host}:{port}'" + (f" ({ip})" if host != str(ip) else "")
        if (ip, port) in self.protected:
            raise ToolError(
                f"http_request: {where} is the worker's Temporal service, which steps may never call",
                retryable=False,
            )
        if _is_public(ip):
            return
        for pattern, allowed_port in self.allowlist:
            if _is_ip(pattern) and _ip(pattern) == ip and (allowed_port == port or (allowed_port is None and port in (80, 443))):
                return
        raise ToolError(
            f"http_request: {where} is a loopback, private or link-local address; "
            f"list the address itself in {HTTP_ALLOWLIST_ENV} to allow it",
            retryable=False,
        )


class _DeadlineStream(httpcore._backends.sync.SyncStream):
    def __init__(self, sock: socket.socket, backend: _GuardedBackend) -> None:
        super().__init__(sock)
        self.backend = backend

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return super().read(max_bytes, self.backend.remaining(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        super().write(buffer, self.backend.remaining(timeout))

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None) -> Any:
        # The TLS stream replaces this one; it must keep the deadline (https is the usual case).
        stream = super().start_tls(ssl_context, server_hostname, self.backend.remaining(timeout))
        if type(stream) is httpcore._backends.sync.SyncStream:
            return _DeadlineStream(stream._sock, self.backend)
        return stream


class _GuardedTransport(httpx.HTTPTransport):
    def __init__(self, backend: _GuardedBackend) -> None:
        super().__init__()
        self._pool = httpcore.ConnectionPool(ssl_context=httpx.create_ssl_context(), network_backend=backend)


def _read_capped(response: httpx.Response) -> bytes:
    chunks, size = [], 0
    for chunk in response.iter_bytes():
        chunks.append(chunk)
        size += len(chunk)
        if size >= MAX_RESPONSE_BYTES:
            break
    return b"".join(chunks)[:MAX_RESPONSE_BYTES]


def _is_json(content_type: str) -> bool:
    media_type = content_type.split(";", 1)[0].strip().lower()
    return media_type == "application/json" or media_type.endswith("+json")


def _parse_json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:  # a body cut at MAX_RESPONSE_BYTES, or a server that mislabels its content
        return None


def _excerpt(text: str) -> str:
    flat = " ".join(text.split())
    if not flat:
        return "(empty body)"
    return flat if len(flat) <= _ERROR_EXCERPT_CHARS else flat[:_ERROR_EXCERPT_CHARS] + "..."


# --- Files in the workspace ---------------------------------------------------------------------


@tool(side_effects=False)
def read_file(path: str, *, ctx: ToolContext) -> str:
    """Read a UTF-8 text file from the run's workspace and return its content.

    `path` is relative to the workspace (for example "reports/summary.md"). Files larger than
    1 MB are refused.
    """
    target = _workspace_path(ctx, path)
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
    target = _workspace_path(ctx, path, writing=True)
    if target.is_dir():
        raise ToolError(f"write_file: '{path}' is a folder, not a file", retryable=False)
    data = content.encode("utf-8")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        _atomic_write(target, data)
    except OSError as exc:
        raise ToolError(f"write_file: cannot write '{path}': {exc.strerror}", retryable=False) from None
    return {"path": _relative(ctx, target), "bytes": len(data)}


@tool(side_effects=False)
def list_files(pattern: str = "**/*", *, ctx: ToolContext) -> list[str]:
    """List the files in the run's workspace whose relative path matches a glob pattern.

    The default "**/*" lists every file; "*.csv" lists CSV files at the top level; "reports/**/*"
    lists everything under reports. Returns relative paths, sorted.
    """
    if not pattern or _is_absolute(pattern) or ".." in PurePosixPath(pattern.replace("\\", "/")).parts:
        raise ToolError(
            f"list_files: pattern '{pattern}' must be a relative glob inside the workspace (no '..')",
            retryable=False,
        )
    root = _workspace(ctx)
    found = []
    for candidate in root.glob(pattern):
        relative = candidate.relative_to(root)
        if relative.parts[:1] == (RESERVED_DIR,) or not candidate.is_file():
            continue
        if not candidate.resolve().is_relative_to(root):  # a symlink to somewhere else
            continue
        found.append(relative.as_posix())
    return sorted(found)


@tool
def append_csv_row(path: str, row: dict[str, str | int | float | bool | None], *, ctx: ToolContext) -> dict[str, Any]:
    """Append one row to a CSV file in the run's workspace.

    `row` maps column names to values. A new file gets a header made of the row's keys, in order.
    For an existing file the columns follow its header: a column missing from `row` is left empty
    and a key that is not in the header is refused. A retried step does not append its row twice.
    Returns {"path": the relative path, "rows": the number of data rows now in the file,
    "repeated": true when this step had already appended its row}.
    """
    if not row:
        raise ToolError("append_csv_row: 'row' has no columns", retryable=False)
    target = _workspace_path(ctx, path, writing=True)
    if target.is_dir():
        raise ToolError(f"append_csv_row: '{path}' is a folder, not a file", retryable=False)
    target.parent.mkdir(parents=True, exist_ok=True)
    record_path = _idempotency_record_path(ctx)

    with _locked_for_append(target) as handle:
        handle.seek(0)
        existing = handle.read()
        record = _read_record(record_path)
        if record is not None and record["state"] == "done":
            return {**record["result"], "repeated": True}
        if record is not None and _pending_append_landed(record, existing):
            # The worker died after appending but before recording it; the row is already there.
            result = {"path": _relative(ctx, target), "rows": _count_data_rows(existing), "repeated": False}
            _write_record(record_path, {"state": "done", "result": result})
            return {**result, "repeated": True}

        text = existing.decode("utf-8-sig")
        header = next(csv.reader(io.StringIO(text)), None)
        if header is None:
            header = [_inert(name) for name in row]
            row = dict(zip(header, row.values()))
            addition = _csv_line(header) + _csv_line([_csv_cell(row[name]) for name in header])
        else:
            unknown = [name for name in row if name not in header]
            if unknown:
                raise ToolError(
                    f"append_csv_row: {', '.join(repr(n) for n in unknown)} not in the header of '{path}' "
                    f"(columns: {', '.join(header)})",
                    retryable=False,
                )
            addition = _csv_line([_csv_cell(row.get(name)) for name in header])
            if not text.endswith(("\n", "\r")):
                addition = "\n" + addition
        appended = addition.encode("utf-8")

        # Record the intent first, so a crash between the append and the final record can be
        # told apart from a crash before the append.
        _write_record(record_path, {"state": "pending", "offset": len(existing), "appended": addition})
        handle.write(appended)
        handle.flush()
        os.fsync(handle.fileno())
        result = {"path": _relative(ctx, target), "rows": _count_data_rows(existing + appended)}
        _write_record(record_path, {"state": "done", "result": result})
    return {**result, "repeated": False}


def _workspace(ctx: ToolContext) -> Path:
    ctx.workspace.mkdir(parents=True, exist_ok=True)
    return ctx.workspace.resolve()


def _is_absolute(path: str) -> bool:
    native = Path(path)
    return native.is_absolute() or bool(native.drive) or path.startswith(("/", "\\"))


def _workspace_path(ctx: ToolContext, path: str, *, writing: bool = False) -> Path:
    """Resolve a workspace-relative path, refusing anything that ends up outside the workspace."""
    if not path or "\x00" in path:
        raise ToolError("file path must be a non-empty path relative to the workspace", retryable=False)
    if _is_absolute(path):
        raise ToolError(f"path '{path}' is absolute; give a path relative to the workspace", retryable=False)
    if any(len(part.encode("utf-8")) > MAX_NAME_BYTES for part in PurePosixPath(path.replace("\\", "/")).parts):
        raise ToolError(f"path '{path[:80]}...' has a name longer than {MAX_NAME_BYTES} bytes", retryable=False)
    root = _workspace(ctx)
    # resolve() follows symlinks, so a link that points outside is caught as well as '..'.
    target = (root / path).resolve()
    if not target.is_relative_to(root):
        raise ToolError(f"path '{path}' is outside the workspace", retryable=False)
    # A hard link cannot be told from the file it shares: if one was planted here, reading or
    # writing through it would reach a file outside the workspace.
    with contextlib.suppress(OSError):
        if target.is_file() and target.stat().st_nlink > 1:
            raise ToolError(f"path '{path}' is a file with other hard links, which may lead outside the workspace", retryable=False)
    if target == root:
        raise ToolError(f"path '{path}' is the workspace folder itself; name a file in it", retryable=False)
    if writing and target.relative_to(root).parts[0] == RESERVED_DIR:
        raise ToolError(f"path '{path}' is inside '{RESERVED_DIR}', which Stratagem reserves", retryable=False)
    return target


def _relative(ctx: ToolContext, target: Path) -> str:
    return target.relative_to(_workspace(ctx)).as_posix()


def _atomic_write(target: Path, data: bytes) -> None:
    fd, temp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as temp:
            temp.write(data)
            temp.flush()
            os.fsync(temp.fileno())
        os.chmod(temp_name, 0o644)  # mkstemp makes it 0600
        os.replace(temp_name, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp_name)
        raise


_append_locks: dict[Path, threading.Lock] = {}
_append_locks_guard = threading.Lock()


@contextlib.contextmanager
def _locked_for_append(target: Path) -> Iterator[io.BufferedRandom]:
    """Open a file for appending, holding it exclusively against other threads and processes."""
    with _append_locks_guard:
        lock = _append_locks.setdefault(target, threading.Lock())
    with lock, open(target, "a+b") as handle:
        if fcntl is not None:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        yield handle  # closing the file releases the flock


def _idempotency_record_path(ctx: ToolContext) -> Path:
    # A hash, not an escaped key: every key maps to a distinct, filesystem-safe name.
    digest = hashlib.sha256(ctx.idempotency_key.encode("utf-8")).hexdigest()
    return _workspace(ctx) / RESERVED_DIR / "idempotency" / f"{digest}.json"


def _read_record(record_path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(record_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None


def _write_record(record_path: Path, record: dict[str, Any]) -> None:
    record_path.parent.mkdir(parents=True, exist_ok=True)
    _atomic_write(record_path, json.dumps(record).encode("utf-8"))


def _pending_append_landed(record: dict[str, Any], existing: bytes) -> bool:
    appended = record["appended"].encode("utf-8")
    offset = record["offset"]
    return existing[offset : offset + len(appended)] == appended


# A cell starting with one of these is a formula to Excel, LibreOffice and Sheets, which would
# run "=HYPERLINK(...)" or "=cmd|..." written by a model or taken from a web page.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _csv_cell(value: str | int | float | bool | None) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)  # a negative number is a number, not a formula
    return _inert(str(value))


def _inert(text: str) -> str:
    """Text a spreadsheet shows instead of evaluating: a leading quote, as OWASP advises."""
    return "'" + text if text.startswith(_FORMULA_START) else text


def _csv_line(cells: list[str]) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerow(cells)
    return out.getvalue()


def _count_data_rows(data: bytes) -> int:
    rows = [r for r in csv.reader(io.StringIO(data.decode("utf-8-sig"))) if r]
    return max(len(rows) - 1, 0)


# --- Text ---------------------------------------------------------------------------------------


@tool(side_effects=False)
def render_template(template: str, values: dict[str, Any]) -> str:
    """Fill a text template and return the result.

    Placeholders are written `$name` or `${name}`; write `$$` for a literal dollar sign. Every
    placeholder needs a value in `values`. Strings and numbers are inserted as they are; other
    values (true/false, null, lists, objects) are inserted as JSON.
    """
    rendered = {key: value if _inserted_as_is(value) else json.dumps(value) for key, value in values.items()}
    try:
        return Template(template).substitute(rendered)
    except KeyError as exc:
        given = ", ".join(sorted(values)) or "none"
        raise ToolError(
            f"render_template: no value for placeholder '{exc.args[0]}' (values given: {given})", retryable=False
        ) from None
    except ValueError as exc:
        raise ToolError(
            f"render_template: invalid template: {exc}; write '$$' for a literal '$'", retryable=False
        ) from None


def _inserted_as_is(value: Any) -> bool:
    return isinstance(value, (str, int, float)) and not isinstance(value, bool)
