"""MCP servers as tool sources: their tools listed once when the registry is built, and called
over one session per event loop, opened when first needed and reused.

Listing happens where the registry is built, which is synchronous code (the command line checks
a plan against the tools before anything runs): it runs on a fresh event loop in a thread of its
own, bounded by the source's timeout, on a short-lived session. Calls happen in activities, on
the worker's loop, over a session that a task of its own opens and closes (anyio's task groups
must be left by the task that entered them); every call from that loop shares it. A session
found dead (the server exited, the connection dropped) is replaced, and the call sent once more
on the new one: with the same idempotency key, as a retried activity would send it.

What the server's tools and results become here is stratagem.tools.mcp_tools.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
from collections import deque
from typing import Any, TextIO, cast

from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError
from mcp.types import (
    CONNECTION_CLOSED,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    RequestParamsMeta,
    Tool,
)
from pydantic import ValidationError

from stratagem.common.errors import ToolError, ToolRegistrationError
from stratagem.tools.mcp_sources import McpSource
from stratagem.tools.mcp_tools import MAX_ERROR_CHARS, McpTool, clean, tool_output, tools_of

logger = logging.getLogger(__name__)

IDEMPOTENCY_META = "stratagem/idempotency_key"
"""The `_meta` key of every call: the step's (or the executor call's) idempotency key."""
MAX_PAGES = 100
_CLOSE_SECONDS = 10.0


class McpConnectionError(ConnectionError):
    """The server could not be reached or the connection broke. Not a `StratagemError`: the
    activity retries, and the next attempt opens a new session."""


class _SdkLog(logging.Handler):
    """The SDK logs what a broken server sends with a traceback, which would reach a person's
    terminal; the worker says what went wrong itself, in one line, and keeps the SDK's words for
    debug logging."""

    def emit(self, record: logging.LogRecord) -> None:
        logger.debug("mcp sdk: %s", record.getMessage())


def _route_sdk_logs() -> None:
    sdk = logging.getLogger("mcp")
    if not any(isinstance(h, _SdkLog) for h in sdk.handlers):
        sdk.addHandler(_SdkLog())
        sdk.propagate = False


class McpServer:
    """One configured server: its tools, and a session per event loop to call them."""

    def __init__(self, source: McpSource):
        _route_sdk_logs()
        self.source = source
        self._connections: dict[asyncio.AbstractEventLoop, _Connection] = {}
        self._locks: dict[asyncio.AbstractEventLoop, asyncio.Lock] = {}

    def list_tools(self) -> list[McpTool]:
        """The server's tools, asked on a short-lived session in a thread of its own, so that this
        works from synchronous code whether or not an event loop runs in this thread."""
        self.source.check_command()
        env = self.source.environment()
        outcome: list[Any] = []

        def run() -> None:
            try:
                outcome.append(asyncio.run(self._list(env)))
            except BaseException as exc:  # reported by the caller's thread
                outcome.append(exc)

        thread = threading.Thread(target=run, name=f"mcp list {self.source.label}", daemon=True)
        thread.start()
        # Stopping a stdio server that does not stop takes a few seconds more (stdin closed, then
        # SIGTERM, then SIGKILL): allow for it before giving up on the thread.
        thread.join(self.source.timeout + 15)
        if not outcome:
            raise ToolRegistrationError(
                f"MCP server '{self.source.label}' did not list its tools within {self.source.timeout:g} s"
            )
        if isinstance(outcome[0], BaseException):
            raise outcome[0]
        return list(outcome[0])

    async def _list(self, env: dict[str, str]) -> list[McpTool]:
        label = self.source.label
        stderr = _ServerStderr(label, echo=False) if self.source.transport == "stdio" else None
        listed: list[Tool] = []
        try:
            async with asyncio.timeout(self.source.timeout):
                async with Client(self._transport(env, stderr), cache=None) as client:
                    if stderr is not None:
                        stderr.spawned()
                    cursor: str | None = None
                    for _ in range(MAX_PAGES):
                        page = await client.list_tools(cursor=cursor)
                        listed.extend(page.tools)
                        cursor = page.next_cursor
                        if cursor is None:
                            break
        except TimeoutError:
            raise ToolRegistrationError(
                f"MCP server '{label}' did not list its tools within {self.source.timeout:g} s"
                + _said(stderr)
                + " (a slow server may need mcp[timeout=SECONDS]:...)"
            ) from None
        except Exception as exc:
            leaf = _leaf(exc)
            if isinstance(leaf, MCPError) and leaf.code == CONNECTION_CLOSED:
                message = f"MCP server '{label}' stopped before it listed its tools{_said(stderr)}"
            elif isinstance(leaf, MCPError):
                message = f"MCP server '{label}' refused to list its tools: {describe(leaf)}"
            else:
                verb = "start" if stderr is not None else "reach"
                message = f"cannot {verb} MCP server '{label}': {describe(leaf)}{_said(stderr)}"
            raise ToolRegistrationError(message) from None
        finally:
            if stderr is not None:
                stderr.spawned()
        return tools_of(self.source, listed)

    def _transport(self, env: dict[str, str], stderr: _ServerStderr | None) -> Any:
        if self.source.transport == "http":
            return self.source.url
        assert stderr is not None
        program, *args = self.source.command
        return stdio_client(StdioServerParameters(command=program, args=args, env=env or None), errlog=stderr.file)

    async def call(self, tool: str, arguments: dict[str, Any], key: str) -> Any:
        """Call `tool` with the step's idempotency key in the request's `_meta`. A tool's own
        failure (`isError`) and a refused call are `ToolError`s, which an executor's model reads;
        a connection that fails twice, on the session it had and on a new one, is
        `McpConnectionError`, which the activity retries."""
        failure: BaseException | None = None
        for _ in range(2):
            connection = await self._connection()
            try:
                result = await connection.client.call_tool(
                    tool, arguments, meta=cast(RequestParamsMeta, {IDEMPOTENCY_META: key})
                )
            except MCPError as exc:
                if exc.code != CONNECTION_CLOSED:
                    final = exc.code in (INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND)
                    raise ToolError(
                        f"the MCP server refused the call: {clean(exc.message, MAX_ERROR_CHARS)}", retryable=not final
                    ) from None
                failure = exc
            except ValidationError:
                raise ToolError(
                    "the MCP server answered with something that is not a tool result", retryable=False
                ) from None
            except Exception as exc:  # the transport: a broken pipe, a refused connection...
                failure = exc
            else:
                return tool_output(result)
            connection.dead = True
        raise McpConnectionError(f"lost the connection to MCP server '{self.source.label}': {describe(failure)}")

    async def _connection(self) -> _Connection:
        loop = asyncio.get_running_loop()
        for other in [lp for lp in self._connections if lp.is_closed()]:
            self._connections.pop(other, None)
            self._locks.pop(other, None)
        lock = self._locks.setdefault(loop, asyncio.Lock())
        async with lock:
            connection = self._connections.get(loop)
            if connection is not None and not connection.dead:
                return connection
            if connection is not None:
                await connection.close()
            connection = _Connection(self)
            await connection.open()
            self._connections[loop] = connection
            return connection

    async def aclose(self) -> None:
        """Close this loop's session (the worker is shutting down). A stdio server is stopped."""
        connection = self._connections.pop(asyncio.get_running_loop(), None)
        if connection is not None:
            await connection.close()


class _Connection:
    """A session on the current loop, entered and left by a task of its own."""

    def __init__(self, server: McpServer):
        self.server = server
        self.dead = False
        self._stop = asyncio.Event()
        self._ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        self._task: asyncio.Task[None] | None = None
        self._client: Client | None = None

    @property
    def client(self) -> Client:
        assert self._client is not None
        return self._client

    async def open(self) -> None:
        source = self.server.source
        self._task = asyncio.get_running_loop().create_task(self._own(), name=f"mcp session {source.label}")
        try:
            self._client = await asyncio.wait_for(asyncio.shield(self._ready), source.timeout)
        except TimeoutError:
            self._task.cancel()
            raise McpConnectionError(f"MCP server '{source.label}' did not start within {source.timeout:g} s") from None
        except asyncio.CancelledError:
            # The activity was cancelled while the session opened: nobody will use or close it.
            self._task.cancel()
            raise
        except Exception as exc:
            raise McpConnectionError(
                f"cannot open a session with MCP server '{source.label}': {describe(exc)}"
            ) from None

    async def _own(self) -> None:
        source = self.server.source
        stderr = _ServerStderr(source.short, echo=True) if source.transport == "stdio" else None
        try:
            env = source.environment() if source.transport == "stdio" else {}
            async with Client(self.server._transport(env, stderr), cache=None) as client:
                if stderr is not None:
                    stderr.spawned()
                self._ready.set_result(client)
                await self._stop.wait()
        except BaseException as exc:
            if not self._ready.done():
                if isinstance(exc, Exception):
                    self._ready.set_exception(exc)
                else:
                    self._ready.cancel()
            else:
                logger.debug("MCP session with %s ended: %s", source.label, describe(exc))
            if not isinstance(exc, Exception):
                raise
        finally:
            self.dead = True
            if stderr is not None:
                stderr.spawned()

    async def close(self) -> None:
        self.dead = True
        self._stop.set()
        if self._task is not None and not self._task.done():
            try:
                await asyncio.wait_for(asyncio.shield(self._task), _CLOSE_SECONDS)
            except (TimeoutError, asyncio.CancelledError):
                self._task.cancel()


def _leaf(exc: BaseException) -> BaseException:
    """The exception inside the exception groups anyio wraps it in."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = next((e for e in exc.exceptions if not isinstance(e, asyncio.CancelledError)), exc.exceptions[0])
    return exc


def describe(exc: BaseException | None) -> str:
    """One line for an exception, looking inside the exception groups anyio raises."""
    exc = _leaf(exc) if exc is not None else None
    if exc is None:
        return "unknown error"
    if isinstance(exc, MCPError):
        return clean(exc.message, 300)
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    text = clean(str(exc), 300)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _said(stderr: _ServerStderr | None) -> str:
    line = stderr.last_line() if stderr is not None else ""
    return f"; it said: {line}" if line else ""


class _ServerStderr:
    """A stdio server's stderr, read by a thread: the last lines kept for error messages, and
    for a worker's session copied to the worker's stderr, each line marked with the server."""

    def __init__(self, label: str, *, echo: bool):
        read, write = os.pipe()
        self.file = cast(TextIO, os.fdopen(write, "w"))
        self._label = label
        self._echo = echo
        self._lines: deque[str] = deque(maxlen=20)
        self._thread = threading.Thread(target=self._pump, args=(read,), name=f"mcp stderr {label}", daemon=True)
        self._thread.start()

    def _pump(self, fd: int) -> None:
        with os.fdopen(fd, "r", errors="replace") as pipe:
            for line in pipe:
                line = line.rstrip()
                if line:
                    self._lines.append(line)
                    if self._echo:
                        print(f"[mcp {self._label}] {line}", file=sys.stderr, flush=True)

    def spawned(self) -> None:
        """Close this process's end once the server has its own: its exit then ends the pump."""
        if not self.file.closed:
            self.file.close()

    def last_line(self) -> str:
        self.spawned()
        self._thread.join(0.5)
        return clean(self._lines[-1], 200) if self._lines else ""
