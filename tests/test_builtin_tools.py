"""The built-in tools, called the way the worker calls them: through `ToolRegistry.invoke`."""

import asyncio
import base64
import csv
import io
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from support.hosts import serving

from stratagem.common.errors import ToolArgumentsError, ToolError
from stratagem.tools.builtin import csv_rows, guard
from stratagem.tools.builtin.allowlist import check_allowed, http_allowlist
from stratagem.tools.definition import ToolContext
from stratagem.tools.registry import ToolRegistry

pytestmark = pytest.mark.unit

ALLOWLIST = "STRATAGEM_HTTP_ALLOWLIST"


@pytest.fixture(scope="module")
def registry() -> ToolRegistry:
    return ToolRegistry.from_modules([])


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    return ToolContext(
        run_id="run-1", step_id="step-a", revision=0, attempt=1, workspace=tmp_path / "ws", execution_id="e1"
    )


@pytest.fixture(autouse=True)
def no_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    # A proxy from the environment would send requests for 127.0.0.1 elsewhere.
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)


# --- a local HTTP server that records what reaches it -------------------------------------------


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, list[str]]
    body: bytes


@dataclass
class LocalServer:
    port: int
    received: list[Received] = field(default_factory=list)

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"


@pytest.fixture
def server() -> Iterator[LocalServer]:
    state = LocalServer(port=0)

    class Handler(BaseHTTPRequestHandler):
        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            headers: dict[str, list[str]] = {}
            for name, value in self.headers.items():
                headers.setdefault(name.lower(), []).append(value)
            body = self.rfile.read(length)
            state.received.append(Received(self.command, self.path, headers, body))
            if self.path == "/json":
                self._reply(200, "application/json", json.dumps({"ok": True, "items": [1, 2]}))
            elif self.path == "/echo":
                self._reply(201, "application/json; charset=utf-8", json.dumps({"got": json.loads(body or "null")}))
            elif self.path == "/text":
                self._reply(200, "text/plain", "x" * 150_000)
            elif self.path == "/fail":
                self._reply(500, "text/plain", "database on fire")
            elif self.path == "/busy":
                self._reply(429, "text/plain", "slow down")
            elif self.path == "/missing":
                self._reply(404, "text/plain", "no such invoice")
            elif self.path == "/slow":
                time.sleep(1.0)
                self._reply(200, "text/plain", "late")
            elif self.path == "/echo-headers":
                self._reply(200, "application/json", json.dumps({"authorization": self.headers.get("Authorization")}))
            elif self.path == "/drip":  # headers at once, then a byte a second for 30 s
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", "30")
                self.end_headers()
                for _ in range(30):
                    self.wfile.write(b"x")
                    self.wfile.flush()
                    time.sleep(1.0)
            elif self.path == "/to-localhost":
                self.send_response(302)
                self.send_header("Location", state.url("/json", host="localhost"))
                self.send_header("Content-Length", "0")
                self.end_headers()
            else:
                self._reply(404, "text/plain", "unknown path")

        def _reply(self, status: int, content_type: str, text: str) -> None:
            data = text.encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    state.port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


async def _refused(registry: ToolRegistry, name: str, args: dict[str, Any], ctx: ToolContext) -> ToolError:
    with pytest.raises(ToolError) as info:
        await registry.invoke(name, args, ctx)
    return info.value


# --- http_request -------------------------------------------------------------------------------


async def test_get_returns_parsed_json(registry, ctx, server, monkeypatch):
    monkeypatch.setenv(ALLOWLIST, f"127.0.0.1:{server.port}")
    result = await registry.invoke("http_request", {"method": "GET", "url": server.url("/json")}, ctx)
    assert result == {
        "status": 200,
        "headers": {"content-type": "application/json"},
        "json": {"ok": True, "items": [1, 2]},
        "text": '{"ok": true, "items": [1, 2]}',
    }
    [request] = server.received
    assert request.method == "GET"
    assert "idempotency-key" not in request.headers


async def test_post_sends_the_steps_idempotency_key_and_json_body(registry, ctx, server, monkeypatch):
    monkeypatch.setenv(ALLOWLIST, f"127.0.0.1:{server.port}")
    args = {"method": "POST", "url": server.url("/echo"), "json_body": {"amount": 12}}
    result = await registry.invoke("http_request", args, ctx)
    assert result["status"] == 201
    assert result["json"] == {"got": {"amount": 12}}
    [request] = server.received
    assert request.headers["idempotency-key"] == [ctx.idempotency_key] == ["run-1/e1/step-a/r0"]
    assert json.loads(request.body) == {"amount": 12}


async def test_a_plan_cannot_choose_the_idempotency_key(registry, ctx, server, monkeypatch):
    """The attack: a plan (or a model writing an executor's call) sends another run's key, or one
    key for every revision, or a new one at every attempt. The server sees the step's key, once."""
    monkeypatch.setenv(ALLOWLIST, f"127.0.0.1:{server.port}")
    other_run = "run-0/e0/step-a/r1"
    headers = {"Idempotency-Key": other_run, "IDEMPOTENCY-KEY": "pay-once", " idempotency-key": "x", "X-Trace": "t"}
    for method in ("PUT", "POST", "DELETE"):
        await registry.invoke("http_request", {"method": method, "url": server.url("/echo"), "headers": headers}, ctx)
    for request in server.received:
        assert request.headers["idempotency-key"] == [ctx.idempotency_key]
        assert request.headers["x-trace"] == ["t"]
    # A GET carries no key, and none a plan wrote either.
    await registry.invoke("http_request", {"method": "GET", "url": server.url("/json"), "headers": headers}, ctx)
    assert "idempotency-key" not in server.received[-1].headers


async def test_a_run_id_that_is_not_ascii_still_makes_one_key_per_step(registry, tmp_path, server, monkeypatch):
    """A header is ASCII; `--id` takes any name. Once the request failed at sending (a traceback,
    retried to no end); now the key goes percent-encoded, '%' too, so no two run ids share one."""
    monkeypatch.setenv(ALLOWLIST, f"127.0.0.1:{server.port}")
    for run_id in ("rechnung-müller", "rechnung-m%C3%BCller"):
        ctx = ToolContext(run_id=run_id, step_id="pay", revision=1, attempt=1, workspace=tmp_path, execution_id="e1")
        await registry.invoke("http_request", {"method": "POST", "url": server.url("/echo")}, ctx)
    sent = [r.headers["idempotency-key"] for r in server.received]
    assert sent == [["rechnung-m%C3%BCller/e1/pay/r1"], ["rechnung-m%25C3%25BCller/e1/pay/r1"]]


async def test_long_text_is_truncated_and_non_json_has_no_json(registry, ctx, server, monkeypatch):
    monkeypatch.setenv(ALLOWLIST, f"127.0.0.1:{server.port}")
    result = await registry.invoke("http_request", {"method": "GET", "url": server.url("/text")}, ctx)
    assert result["json"] is None
    assert len(result["text"]) == 100_000


@pytest.mark.parametrize("allowlist", ["example.com", "localhost", "*.0.0.1", "127.0.0.1:1"])
async def test_host_not_in_allowlist_is_refused_before_any_request(registry, ctx, server, monkeypatch, allowlist):
    monkeypatch.setenv(ALLOWLIST, allowlist)
    error = await _refused(registry, "http_request", {"method": "GET", "url": server.url("/json")}, ctx)
    assert error.retryable is False
    assert "'127.0.0.1" in str(error) and ALLOWLIST in str(error)
    assert server.received == []


@pytest.mark.parametrize("value", [None, "", " , "])
async def test_unset_or_empty_allowlist_refuses_every_host(registry, ctx, server, monkeypatch, value):
    if value is None:
        monkeypatch.delenv(ALLOWLIST, raising=False)
    else:
        monkeypatch.setenv(ALLOWLIST, value)
    error = await _refused(registry, "http_request", {"method": "POST", "url": server.url("/echo")}, ctx)
    assert error.retryable is False and ALLOWLIST in str(error)
    assert server.received == []


@pytest.mark.parametrize(
    ("allowlist", "url", "allowed"),
    [
        ("*.example.com", "https://api.example.com/x", True),
        ("*.example.com", "https://a.b.example.com/x", True),
        ("*.example.com", "https://example.com/x", False),
        ("*.example.com", "https://evilexample.com/x", False),
        ("other.org, Example.com", "https://example.com/x", True),
        ("example.com:8443", "https://example.com:8443/x", True),
        ("example.com:8443", "https://example.com/x", False),
        ("example.com:443", "https://example.com/x", True),
        ("example.com", "https://example.com.evil.net/x", False),
        ("example.com", "https://example.com@evil.net/x", False),
    ],
)
def test_allowlist_matching(monkeypatch, allowlist, url, allowed):
    monkeypatch.setenv(ALLOWLIST, allowlist)
    check = lambda: check_allowed(httpx.URL(url), http_allowlist())  # noqa: E731
    if allowed:
        check()
    else:
        with pytest.raises(ToolError):
            check()


@pytest.mark.parametrize("url", ["ftp://127.0.0.1/file", "file:///etc/passwd", "127.0.0.1/json"])
async def test_only_http_and_https_schemes(registry, ctx, monkeypatch, url):
    monkeypatch.setenv(ALLOWLIST, "127.0.0.1")  # the default ports: what these URLs would use
    error = await _refused(registry, "http_request", {"method": "GET", "url": url}, ctx)
    assert error.retryable is False
    assert "only http and https" in str(error)


# --- attacks: what an executor told to reach the worker's own services tries --------------------


async def test_an_entry_without_a_port_does_not_open_every_port(registry, ctx, server, monkeypatch):
    # The README's format, "127.0.0.1", once allowed the Temporal UI on 8233 and anything else local.
    monkeypatch.setenv(ALLOWLIST, "127.0.0.1")
    error = await _refused(registry, "http_request", {"method": "POST", "url": server.url("/echo")}, ctx)
    assert error.retryable is False and "ports 80 and 443 only" in str(error)
    assert server.received == []


@pytest.mark.parametrize("name", ["localhost", "127.1", "2130706433", "0x7f.1"])
async def test_a_listed_name_that_leads_to_loopback_is_refused(registry, ctx, server, monkeypatch, name):
    # The operator listed a name (or the attacker found a spelling of 127.0.0.1); where it leads decides.
    monkeypatch.setenv(ALLOWLIST, f"{name}:{server.port}")
    args = {"method": "POST", "url": f"http://{name}:{server.port}/echo"}
    error = await _refused(registry, "http_request", args, ctx)
    assert error.retryable is False and "loopback, private or link-local" in str(error)
    assert server.received == []


@pytest.mark.parametrize("offset", [0, 1000])  # the frontend, and the Web UI 1000 above it
async def test_the_workers_temporal_service_is_never_reachable(registry, ctx, server, monkeypatch, offset):
    # Even listed explicitly: a step that reaches the frontend or the UI's HTTP API could approve itself.
    monkeypatch.setenv("TEMPORAL_ADDRESS", f"localhost:{server.port - offset}")
    monkeypatch.setenv(ALLOWLIST, f"127.0.0.1:{server.port}")
    error = await _refused(registry, "http_request", {"method": "POST", "url": server.url("/echo")}, ctx)
    assert error.retryable is False and "the worker's Temporal service" in str(error)
    assert server.received == []


async def test_the_operator_can_deny_more_addresses(registry, ctx, server, monkeypatch):
    monkeypatch.setenv(ALLOWLIST, f"127.0.0.1:{server.port}")
    monkeypatch.setenv("STRATAGEM_HTTP_DENY", f"localhost:{server.port}")
    error = await _refused(registry, "http_request", {"method": "GET", "url": server.url("/json")}, ctx)
    assert "the worker's Temporal service" in str(error) and server.received == []


def test_non_public_addresses_need_the_address_listed(monkeypatch):
    backend = guard._GuardedBackend([("10.0.0.5", 8080), ("api.internal", 8080)], set(), time.monotonic() + 5)
    backend.check("api.internal", guard._ip("10.0.0.5"), 8080)  # the address itself is listed
    for ip in ["10.0.0.6", "169.254.169.254", "::1", "::ffff:127.0.0.1", "0.0.0.0", "fe80::1"]:
        with pytest.raises(ToolError, match="loopback, private or link-local"):
            backend.check("api.internal", guard._ip(ip), 8080)
    backend.check("api.example.com", guard._ip("93.184.215.14"), 8080)  # public: the name check decided


async def test_a_response_dripping_a_byte_a_second_stops_at_the_total_timeout(registry, ctx, server, monkeypatch):
    monkeypatch.setenv(ALLOWLIST, f"127.0.0.1:{server.port}")
    started = time.monotonic()
    args = {"method": "GET", "url": server.url("/drip"), "timeout_seconds": 2}
    error = await _refused(registry, "http_request", args, ctx)
    elapsed = time.monotonic() - started
    assert "timed out after 2s" in str(error) and error.retryable is True
    assert elapsed < 3.0, f"a 2 s timeout took {elapsed:.1f} s"


async def test_redirect_to_a_host_outside_the_allowlist_is_refused(registry, ctx, server, monkeypatch):
    monkeypatch.setenv(ALLOWLIST, f"127.0.0.1:{server.port}")
    error = await _refused(registry, "http_request", {"method": "GET", "url": server.url("/to-localhost")}, ctx)
    assert error.retryable is False and "'localhost" in str(error)
    assert [r.path for r in server.received] == ["/to-localhost"]


async def test_redirect_within_the_allowlist_is_followed(registry, ctx, server, monkeypatch):
    monkeypatch.setenv(ALLOWLIST, f"127.0.0.1:{server.port},localhost:{server.port}")
    result = await registry.invoke("http_request", {"method": "GET", "url": server.url("/to-localhost")}, ctx)
    assert result["json"] == {"ok": True, "items": [1, 2]}


@pytest.mark.parametrize(("path", "status"), [("/fail", 500), ("/busy", 429)])
async def test_server_errors_and_429_are_retryable(registry, ctx, server, monkeypatch, path, status):
    monkeypatch.setenv(ALLOWLIST, f"127.0.0.1:{server.port}")
    error = await _refused(registry, "http_request", {"method": "POST", "url": server.url(path)}, ctx)
    assert error.retryable is True
    assert str(status) in str(error)


async def test_client_errors_are_not_retryable_and_show_the_body(registry, ctx, server, monkeypatch):
    monkeypatch.setenv(ALLOWLIST, f"127.0.0.1:{server.port}")
    error = await _refused(registry, "http_request", {"method": "GET", "url": server.url("/missing")}, ctx)
    assert error.retryable is False
    assert "404" in str(error) and "no such invoice" in str(error)


async def test_connection_refused_is_retryable(registry, ctx, monkeypatch):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv(ALLOWLIST, f"127.0.0.1:{port}")
    error = await _refused(registry, "http_request", {"method": "GET", "url": f"http://127.0.0.1:{port}/"}, ctx)
    assert error.retryable is True


async def test_timeout_is_retryable(registry, ctx, server, monkeypatch):
    monkeypatch.setenv(ALLOWLIST, f"127.0.0.1:{server.port}")
    args = {"method": "GET", "url": server.url("/slow"), "timeout_seconds": 0.2}
    error = await _refused(registry, "http_request", args, ctx)
    assert error.retryable is True and "timed out" in str(error)


async def test_unknown_method_is_rejected_by_the_schema(registry, ctx):
    with pytest.raises(ToolArgumentsError):
        await registry.invoke("http_request", {"method": "TRACE", "url": "http://127.0.0.1/"}, ctx)


# --- files --------------------------------------------------------------------------------------


async def test_write_then_read(registry, ctx):
    result = await registry.invoke("write_file", {"path": "notes/a.txt", "content": "héllo\n"}, ctx)
    assert result == {"path": "notes/a.txt", "bytes": len("héllo\n".encode())}
    assert (ctx.workspace / "notes" / "a.txt").read_text(encoding="utf-8") == "héllo\n"
    assert await registry.invoke("read_file", {"path": "notes/a.txt"}, ctx) == "héllo\n"

    await registry.invoke("write_file", {"path": "notes/a.txt", "content": "second"}, ctx)
    assert await registry.invoke("read_file", {"path": "notes/a.txt"}, ctx) == "second"
    assert sorted(p.name for p in (ctx.workspace / "notes").iterdir()) == ["a.txt"]  # no temp files left


async def test_read_missing_file(registry, ctx):
    error = await _refused(registry, "read_file", {"path": "nope.txt"}, ctx)
    assert error.retryable is False
    assert "no file 'nope.txt' in the workspace" in str(error)


async def test_read_refuses_files_over_1_mb(registry, ctx):
    ctx.workspace.mkdir()
    (ctx.workspace / "big.txt").write_bytes(b"x" * (1024 * 1024 + 1))
    error = await _refused(registry, "read_file", {"path": "big.txt"}, ctx)
    assert error.retryable is False and "1 MB" in str(error)


@pytest.mark.parametrize("path", ["../x", "/etc/passwd", "a/../../x", ".."])
@pytest.mark.parametrize(
    ("tool", "extra"), [("read_file", {}), ("write_file", {"content": "x"}), ("append_csv_row", {"row": {"a": 1}})]
)
async def test_paths_outside_the_workspace_are_refused(registry, ctx, tmp_path, path, tool, extra):
    error = await _refused(registry, tool, {"path": path, **extra}, ctx)
    assert error.retryable is False
    assert "outside the workspace" in str(error) or "absolute" in str(error)
    assert not (tmp_path / "x").exists()


async def test_symlinks_pointing_outside_are_refused(registry, ctx, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret")
    ctx.workspace.mkdir()
    (ctx.workspace / "link").symlink_to(outside, target_is_directory=True)
    (ctx.workspace / "secret-link.txt").symlink_to(outside / "secret.txt")

    for args in ({"path": "link/secret.txt"}, {"path": "secret-link.txt"}):
        error = await _refused(registry, "read_file", args, ctx)
        assert error.retryable is False and "outside the workspace" in str(error)
    error = await _refused(registry, "write_file", {"path": "link/new.txt", "content": "x"}, ctx)
    assert error.retryable is False
    error = await _refused(registry, "write_file", {"path": "secret-link.txt", "content": "overwritten"}, ctx)
    assert error.retryable is False
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "secret"
    assert await registry.invoke("list_files", {}, ctx) == []


async def test_stratagem_folder_is_reserved_for_writes(registry, ctx):
    error = await _refused(registry, "write_file", {"path": ".stratagem/idempotency/x.json", "content": "{}"}, ctx)
    assert error.retryable is False and "reserve" in str(error)


async def test_list_files(registry, ctx):
    for name in ("b.txt", "a.txt", "sub/c.csv", "sub/deeper/d.csv", ".stratagem/idempotency/k.json"):
        await asyncio.to_thread(_write, ctx.workspace / name)
    (ctx.workspace / "empty-folder").mkdir()

    assert await registry.invoke("list_files", {}, ctx) == ["a.txt", "b.txt", "sub/c.csv", "sub/deeper/d.csv"]
    assert await registry.invoke("list_files", {"pattern": "*.txt"}, ctx) == ["a.txt", "b.txt"]
    assert await registry.invoke("list_files", {"pattern": "**/*.csv"}, ctx) == ["sub/c.csv", "sub/deeper/d.csv"]
    for pattern in ("../*", "/etc/*"):
        error = await _refused(registry, "list_files", {"pattern": pattern}, ctx)
        assert error.retryable is False


def _write(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("x")


# --- append_csv_row -----------------------------------------------------------------------------


def _csv_text(ctx: ToolContext, path: str = "out.csv") -> str:
    return (ctx.workspace / path).read_text(encoding="utf-8")


async def test_append_csv_row_is_idempotent_per_step_revision(registry, ctx):
    args = {"path": "out.csv", "row": {"name": "Ada", "amount": 12.5, "paid": True, "note": None}}
    first = await registry.invoke("append_csv_row", args, ctx)
    assert first == {"path": "out.csv", "rows": 1, "repeated": False}
    second = await registry.invoke("append_csv_row", args, ctx)
    assert second == {"path": "out.csv", "rows": 1, "repeated": True}
    assert _csv_text(ctx) == "name,amount,paid,note\nAda,12.5,true,\n"

    revised = ToolContext(
        run_id="run-1", step_id="step-a", revision=1, attempt=1, workspace=ctx.workspace, execution_id="e1"
    )
    third = await registry.invoke("append_csv_row", args, revised)
    assert third == {"path": "out.csv", "rows": 2, "repeated": False}
    assert _csv_text(ctx) == "name,amount,paid,note\nAda,12.5,true,\nAda,12.5,true,\n"


async def test_append_follows_the_existing_header(registry, ctx):
    ctx.workspace.mkdir()
    (ctx.workspace / "out.csv").write_text("id,name,city\n1,Ada,London")  # no final newline
    result = await registry.invoke("append_csv_row", {"path": "out.csv", "row": {"name": "Bo, Jr.", "id": 2}}, ctx)
    assert result["rows"] == 2
    assert _csv_text(ctx) == 'id,name,city\n1,Ada,London\n2,"Bo, Jr.",\n'


async def test_append_refuses_an_unknown_column(registry, ctx):
    ctx.workspace.mkdir()
    (ctx.workspace / "out.csv").write_text("id,name\n")
    error = await _refused(registry, "append_csv_row", {"path": "out.csv", "row": {"id": 1, "email": "x"}}, ctx)
    assert error.retryable is False and "'email'" in str(error)
    assert _csv_text(ctx) == "id,name\n"
    # The refusal is not recorded as applied: a corrected retry of the same step appends.
    assert (await registry.invoke("append_csv_row", {"path": "out.csv", "row": {"id": 1}}, ctx))["repeated"] is False


async def test_parallel_appends_do_not_interleave(registry, ctx):
    contexts = [ToolContext("run-1", f"step-{i}", 0, 1, ctx.workspace, "e1") for i in range(20)]
    await asyncio.gather(
        *(registry.invoke("append_csv_row", {"path": "out.csv", "row": {"n": i}}, c) for i, c in enumerate(contexts))
    )
    lines = _csv_text(ctx).splitlines()
    assert lines[0] == "n"
    assert sorted(int(x) for x in lines[1:]) == list(range(20))


async def test_crash_after_append_before_record_does_not_append_again(registry, ctx, monkeypatch):
    real_write_record = csv_rows._write_record

    def crash_on_done(path: Path, record: dict[str, Any]) -> None:
        if record["state"] == "done":
            raise OSError("worker died")
        real_write_record(path, record)

    monkeypatch.setattr(csv_rows, "_write_record", crash_on_done)
    with pytest.raises(OSError):
        await registry.invoke("append_csv_row", {"path": "out.csv", "row": {"n": 1}}, ctx)
    monkeypatch.setattr(csv_rows, "_write_record", real_write_record)

    result = await registry.invoke("append_csv_row", {"path": "out.csv", "row": {"n": 1}}, ctx)
    assert result == {"path": "out.csv", "rows": 1, "repeated": True}
    assert _csv_text(ctx) == "n\n1\n"


async def test_crash_before_append_appends_on_retry(registry, ctx, monkeypatch):
    real_write_record = csv_rows._write_record

    def crash_after_pending(path: Path, record: dict[str, Any]) -> None:
        real_write_record(path, record)
        raise OSError("worker died")

    monkeypatch.setattr(csv_rows, "_write_record", crash_after_pending)
    with pytest.raises(OSError):
        await registry.invoke("append_csv_row", {"path": "out.csv", "row": {"n": 1}}, ctx)
    monkeypatch.setattr(csv_rows, "_write_record", real_write_record)
    assert _csv_text(ctx) == ""

    result = await registry.invoke("append_csv_row", {"path": "out.csv", "row": {"n": 1}}, ctx)
    assert result == {"path": "out.csv", "rows": 1, "repeated": False}
    assert _csv_text(ctx) == "n\n1\n"


# --- render_template ----------------------------------------------------------------------------


async def test_render_template(registry, ctx):
    args = {
        "template": "Dear $name, you owe ${amount} $$ (late: $late)",
        "values": {"name": "Ada", "amount": 12.5, "late": True},
    }
    assert await registry.invoke("render_template", args, ctx) == "Dear Ada, you owe 12.5 $ (late: true)"


async def test_render_template_names_the_missing_value(registry, ctx):
    args = {"template": "Dear $name, you owe $amount", "values": {"name": "Ada"}}
    error = await _refused(registry, "render_template", args, ctx)
    assert error.retryable is False
    assert "'amount'" in str(error)


# --- schemas ------------------------------------------------------------------------------------


def test_catalog_describes_the_builtin_tools(registry):
    catalog = registry.catalog()
    expected = {"http_request", "read_file", "write_file", "list_files", "append_csv_row", "render_template"}
    assert expected <= set(catalog.names)
    for name in expected:
        assert catalog.get(name).description, name
        assert "ctx" not in json.dumps(catalog.get(name).parameters), name

    http = catalog.get("http_request").parameters
    assert http["properties"]["method"]["enum"] == ["GET", "POST", "PUT", "PATCH", "DELETE"]
    assert set(http["required"]) == {"method", "url"}
    assert "ctx" not in http["properties"]

    read_only = {name for name in expected if not catalog.get(name).side_effects}
    assert read_only == {"read_file", "list_files", "render_template"}


# --- attacks through files -------------------------------------------------------------------------


async def test_csv_cells_that_a_spreadsheet_would_run_are_made_inert(registry, ctx):
    row = {
        "=name": '=HYPERLINK("http://evil.example","click")',
        "amount": -5,
        "note": "+1+1",
        "who": "@SUM(A1)",
        "tab": "\tx",
    }
    await registry.invoke("append_csv_row", {"path": "out.csv", "row": row}, ctx)
    rows = list(csv.reader(io.StringIO((ctx.workspace / "out.csv").read_text())))
    assert rows[0][0] == "'=name"
    assert rows[1] == ['\'=HYPERLINK("http://evil.example","click")', "-5", "'+1+1", "'@SUM(A1)", "'\tx"]


async def test_a_planted_hard_link_does_not_lead_out_of_the_workspace(registry, ctx, tmp_path):
    secret = tmp_path / "outside.txt"
    secret.write_text("the worker's secret")
    ctx.workspace.mkdir(parents=True, exist_ok=True)
    os.link(secret, ctx.workspace / "innocent.txt")
    error = await _refused(registry, "read_file", {"path": "innocent.txt"}, ctx)
    assert "hard links" in str(error) and "secret" not in str(error)
    error = await _refused(registry, "write_file", {"path": "innocent.txt", "content": "overwritten"}, ctx)
    assert secret.read_text() == "the worker's secret"


async def test_an_overlong_file_name_is_one_clear_refusal_without_the_workers_paths(registry, ctx):
    error = await _refused(registry, "write_file", {"path": "a" * 300 + ".txt", "content": "x"}, ctx)
    assert error.retryable is False and "longer than 255 bytes" in str(error)
    assert str(ctx.workspace) not in str(error)


async def test_a_plan_names_a_secret_and_the_worker_fills_it_in(registry, ctx, server, monkeypatch):
    monkeypatch.setenv(ALLOWLIST, f"127.0.0.1:{server.port}")
    monkeypatch.setenv("STRATAGEM_SECRET_CRM_TOKEN", "tok-0123456789")
    monkeypatch.setenv("STRATAGEM_SECRET_CRM_TOKEN_HOSTS", f"http://127.0.0.1:{server.port}")
    args = {
        "method": "GET",
        "url": server.url("/echo-headers"),
        "headers": {"Authorization": "Bearer ${secret:crm_token}"},
    }
    result = await registry.invoke("http_request", args, ctx)
    assert server.received[0].headers["authorization"] == ["Bearer tok-0123456789"]  # sent
    assert "tok-0123456789" not in json.dumps(result) and result["json"] == {"authorization": "[redacted]"}
    monkeypatch.delenv("STRATAGEM_SECRET_CRM_TOKEN")
    error = await _refused(registry, "http_request", args, ctx)
    assert "STRATAGEM_SECRET_CRM_TOKEN" in str(error) and len(server.received) == 1


# --- secrets go only where they are bound (#35) ---------------------------------------------------

TOKEN = "crm-token-5f3a9c1e7b"


def bind_crm(monkeypatch: pytest.MonkeyPatch, hosts: str, headers: str | None = None) -> None:
    monkeypatch.setenv("STRATAGEM_SECRET_CRM", TOKEN)
    # The loopback servers here speak plain http, which a binding must allow by name.
    monkeypatch.setenv("STRATAGEM_SECRET_CRM_HOSTS", ",".join(f"http://{h}" for h in hosts.split(",")))
    if headers is not None:
        monkeypatch.setenv("STRATAGEM_SECRET_CRM_HEADERS", headers)


async def test_a_secret_bound_to_no_host_is_refused_saying_how_to_bind_it(registry, ctx, monkeypatch):
    with serving() as crm:
        monkeypatch.setenv(ALLOWLIST, crm.entry)
        monkeypatch.setenv("STRATAGEM_SECRET_CRM", TOKEN)
        args = {"method": "GET", "url": crm.url("/"), "headers": {"X-Api-Key": "${secret:crm}"}}
        error = await _refused(registry, "http_request", args, ctx)
    assert crm.log == []
    assert "bound to no host" in str(error) and "set STRATAGEM_SECRET_CRM_HOSTS" in str(error)
    assert "\n" not in str(error) and error.retryable is False


async def test_a_secret_goes_only_to_its_hosts_and_in_its_headers(registry, ctx, monkeypatch):
    with serving("127.0.0.1") as crm, serving("127.0.0.2") as other:
        monkeypatch.setenv(ALLOWLIST, f"{crm.entry},{other.entry}")
        bind_crm(monkeypatch, crm.entry, headers="Authorization")
        args = {"method": "GET", "url": crm.url("/"), "headers": {"Authorization": "Bearer ${secret:crm}"}}
        await registry.invoke("http_request", args, ctx)
        elsewhere = await _refused(registry, "http_request", {**args, "url": other.url("/")}, ctx)
        in_another_header = await _refused(
            registry, "http_request", {**args, "headers": {"X-Debug": "${secret:crm}"}}, ctx
        )
    assert len(crm.log) == 1 and crm.saw(TOKEN)  # the bound host got it, once
    assert other.log == []
    assert f"may be sent only to http://{crm.entry}, not to '{other.entry}'" in str(elsewhere)
    assert "STRATAGEM_SECRET_CRM_HOSTS" in str(elsewhere)
    assert "only in Authorization, not in 'X-Debug'" in str(in_another_header)


async def test_a_redirect_cannot_carry_a_secret_to_a_host_it_is_not_bound_to(registry, ctx, monkeypatch):
    """httpx drops Authorization on a redirect to another origin, and keeps every other header."""
    with serving("127.0.0.1") as crm, serving("127.0.0.2") as other:
        monkeypatch.setenv(ALLOWLIST, f"{crm.entry},{other.entry}")
        bind_crm(monkeypatch, crm.entry)
        away = crm.url("/redirect?to=" + quote(other.url("/collect"), safe=""))
        args = {"method": "GET", "url": away, "headers": {"X-Api-Key": "${secret:crm}"}}
        error = await _refused(registry, "http_request", args, ctx)
        assert crm.saw(TOKEN) and other.log == []
        assert f"not to '{other.entry}'" in str(error)
        # Authorization is dropped at that hop, so the redirect is followed, without it.
        await registry.invoke("http_request", {**args, "headers": {"Authorization": "Bearer ${secret:crm}"}}, ctx)
        assert len(other.log) == 1 and not other.saw(TOKEN)


async def test_credentials_an_upstream_echoes_in_an_error_never_reach_the_step(registry, ctx, monkeypatch):
    """An executor model writes its calls' headers itself, so a literal credential can reach the
    tool; the upstream's 401 page echoes every header it got."""
    literal, session = "lit-0a9b8c7d6e5f", "sess-77e1c2d3f4"
    basic = base64.b64encode(b"ops:pa55-w0rd-x9").decode()
    headers = {
        "Authorization": f"Bearer {literal}",
        "Cookie": f"lang=en; session={session}",
        "Proxy-Authorization": f"Basic {basic}",
        "X-Api-Key": "${secret:crm}",
        "X-Note": "shown-as-is",
    }
    with serving() as upstream:
        monkeypatch.setenv(ALLOWLIST, upstream.entry)
        bind_crm(monkeypatch, upstream.entry)
        args = {"method": "GET", "url": upstream.url("/echo-401"), "headers": headers}
        error = await _refused(registry, "http_request", args, ctx)
        output = await registry.invoke("http_request", {**args, "url": upstream.url("/echo")}, ctx)
    assert upstream.saw(literal) and upstream.saw(TOKEN)  # sent as written
    message = str(error)
    assert "returned 401" in message and "x-note: shown-as-is" in message.lower()  # the echo is in the excerpt
    for secret in (literal, session, basic, "pa55-w0rd-x9", TOKEN):
        assert secret not in message
    assert message.count("[redacted]") >= 4 and error.retryable is False
    assert "shown-as-is" in output["text"] and "[redacted]" in output["text"]
    assert not any(secret in json.dumps(output) for secret in (literal, session, basic, TOKEN))


def test_the_deadline_survives_the_switch_to_tls(tmp_path):
    """https is the usual case: the stream TLS puts in place must keep the request's deadline."""
    import datetime
    import ssl

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    (tmp_path / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "key.pem").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()

    def accept() -> None:
        conn, _ = listener.accept()
        with server_context.wrap_socket(conn, server_side=True) as tls:
            time.sleep(3)  # a TLS server that never answers
            tls.close()

    threading.Thread(target=accept, daemon=True).start()
    backend = guard._GuardedBackend([("127.0.0.1", listener.getsockname()[1])], set(), time.monotonic() + 1.0)
    stream = backend.connect_tcp("127.0.0.1", listener.getsockname()[1], timeout=10)
    client_context = ssl.create_default_context()
    client_context.check_hostname = False
    client_context.verify_mode = ssl.CERT_NONE
    tls = stream.start_tls(client_context, "localhost", timeout=10)
    assert isinstance(tls, guard._DeadlineStream)
    started = time.monotonic()
    import httpcore

    with pytest.raises((httpcore.ReadTimeout, httpcore.ReadError)):
        tls.read(1024, timeout=30)  # the per-read timeout is long; the deadline is not
    assert time.monotonic() - started < 2.0
    listener.close()


async def test_a_secret_goes_over_https_only_unless_its_binding_says_http(registry, ctx, monkeypatch):
    """A binding of `crm.example.com` once filled the token into http://crm.example.com, in the clear."""
    with serving("127.0.0.1") as crm:
        monkeypatch.setenv(ALLOWLIST, crm.entry)
        monkeypatch.setenv("STRATAGEM_SECRET_CRM", TOKEN)
        monkeypatch.setenv("STRATAGEM_SECRET_CRM_HOSTS", crm.entry)  # no scheme: https only
        args = {"method": "GET", "url": crm.url("/"), "headers": {"X-Api-Key": "${secret:crm}"}}
        refused = await _refused(registry, "http_request", args, ctx)
        assert crm.log == [] and "may be sent only to" in str(refused)
        monkeypatch.setenv("STRATAGEM_SECRET_CRM_HOSTS", f"http://{crm.entry}")  # plain http, by name
        await registry.invoke("http_request", args, ctx)
    assert len(crm.log) == 1 and crm.saw(TOKEN)
