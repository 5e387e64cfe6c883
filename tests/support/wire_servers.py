"""Local servers that speak OpenAI's and Anthropic's wire formats, so the real SDK clients can be
tested without internet or API keys.

The providers under test build requests and read responses through the vendor SDKs; mocking the
SDKs would test nothing of that. These servers answer with the shapes the real APIs send (ids,
`choices[].message`, content blocks, usage, error bodies), scripted per test:

    with FakeOpenAI() as fake:
        fake.enqueue(Reply.text("hello", usage=(12, 3)), Reply.error(429, "slow down", {"retry-after": "7"}))
        model = load_model("openai:gpt-test@" + fake.base_url)
        ...
        assert fake.requests[0].body["model"] == "gpt-test"

Replies are consumed in order; when several requests arrive in parallel, set `fake.responder` to
a function of the request body instead. A request with nothing scripted gets an HTTP 400, so a
test fails loudly and the provider does not retry. Standard library only.
"""

from __future__ import annotations

import itertools
import json
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar, Self

NO_REPLY = "fake server: no reply scripted for this request"


@dataclass(frozen=True)
class Reply:
    """One scripted answer. Build it with the class methods; each server renders it in its format."""

    kind: str
    content: str = ""
    message: str = ""
    calls: tuple[tuple[str, Any], ...] = ()
    value: Any = None
    usage: tuple[int, int] | None = (0, 0)
    cache: tuple[int, int] = (0, 0)
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""
    content_type: str = "application/json"
    seconds: float = 0.0
    then: Reply | None = None

    @classmethod
    def text(cls, text: str, usage: tuple[int, int] | None = (0, 0), cache: tuple[int, int] = (0, 0)) -> Reply:
        """A text answer. `usage=None` leaves usage out (OpenAI only: Anthropic always sends it);
        `cache` = (cache creation, cache read) input tokens, sent by the Anthropic server."""
        return cls("text", content=text, usage=usage, cache=cache)

    @classmethod
    def tool_calls(
        cls, calls: list[tuple[str, dict[str, Any]]], text: str = "", usage: tuple[int, int] | None = (0, 0)
    ) -> Reply:
        """The model calls these tools, `[(name, arguments), ...]`, with generated call ids."""
        return cls("tool_calls", content=text, calls=tuple(calls), usage=usage)

    @classmethod
    def json(cls, value: Any, usage: tuple[int, int] | None = (0, 0)) -> Reply:
        """A structured answer: JSON text, or (Anthropic) a call of the tool the request forced."""
        return cls("json", value=value, usage=usage)

    @classmethod
    def bad_arguments(cls, tool: str, raw: str) -> Reply:
        """A tool call whose arguments are `raw`, which is not a JSON object."""
        return cls("bad_arguments", calls=((tool, raw),))

    @classmethod
    def error(cls, status: int, message: str, headers: Mapping[str, str] | None = None) -> Reply:
        """An HTTP error in the provider's own error body shape."""
        return cls("error", status=status, message=message, headers=dict(headers or {}))

    @classmethod
    def raw(cls, body: bytes, status: int = 200, content_type: str = "application/json") -> Reply:
        """These exact bytes, for bodies the SDK cannot parse."""
        return cls("raw", body=body, status=status, content_type=content_type)

    @classmethod
    def trickle(cls, text: str, every: float, usage: tuple[int, int] | None = (0, 0)) -> Reply:
        """`text` streamed a character every `every` seconds (to a request that streams; a forced
        schema tool's input, for Anthropic): a model still writing when its time limit comes."""
        return cls("text", content=text, usage=usage, seconds=every)

    @classmethod
    def delay(cls, seconds: float, reply: Reply) -> Reply:
        """`reply`, after `seconds` without a byte sent: for timeouts."""
        return cls("delay", seconds=seconds, then=reply)


@dataclass(frozen=True)
class RecordedRequest:
    """A request as the server got it: lower-cased headers, the JSON body (None if it was not JSON),
    the monotonic arrival time and the client's (host, port), which tells connections apart."""

    path: str
    headers: dict[str, str]
    body: Any
    at: float
    peer: tuple[str, int]


# A body is bytes, or (streamed) pieces of bytes each sent after a pause in seconds.
Response = tuple[int, dict[str, str], bytes | list[tuple[float, bytes]]]


class _FakeServer:
    """Serves one provider's endpoint on 127.0.0.1 from a daemon thread."""

    path = ""
    prefix = ""

    def __init__(self) -> None:
        self.responder: Callable[[Any], Reply] | None = None
        self._queue: deque[Reply] = deque()
        self._requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle --------------------------------------------------------------------------------

    def start(self) -> Self:
        self._stopping.clear()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is None:
            return
        self._stopping.set()
        self._httpd.shutdown()
        with self._lock:
            for connection in self._connections:  # idle keep-alive connections would linger
                _shutdown(connection)
        self._httpd.server_close()
        assert self._thread is not None
        self._thread.join()
        self._httpd = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._httpd is not None, "the fake server is not started"
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.prefix}"

    # --- scripting --------------------------------------------------------------------------------

    def enqueue(self, *replies: Reply) -> None:
        with self._lock:
            self._queue.extend(replies)

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    def _next(self, body: Any) -> Reply | None:
        with self._lock:
            if self._queue:
                return self._queue.popleft()
        return self.responder(body) if self.responder else None

    def _respond(self, path: str, body: Any) -> Response:
        if path != self.path:
            return self._json(404, self.error_body(404, f"fake server: no route for POST {path}"))
        reply = self._next(body)
        while reply is not None and reply.kind == "delay":
            self._stopping.wait(reply.seconds)
            reply = reply.then
        if reply is None:
            return self._json(400, self.error_body(400, NO_REPLY))
        if reply.kind == "raw":
            return reply.status, {"content-type": reply.content_type}, reply.body
        if reply.kind == "error":
            status, headers, payload = self._json(reply.status, self.error_body(reply.status, reply.message))
            return status, {**headers, **reply.headers}, payload
        body = body if isinstance(body, dict) else {}
        if body.get("stream"):
            return 200, {"content-type": "text/event-stream"}, self.events(reply, body)
        return self._json(200, self.answer(reply, body))

    @staticmethod
    def _json(status: int, payload: Any) -> Response:
        return status, {"content-type": "application/json"}, json.dumps(payload).encode()

    def _id(self, prefix: str) -> str:
        return f"{prefix}{next(self._ids):06d}"

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(request)

    # --- the provider's format --------------------------------------------------------------------

    def answer(self, reply: Reply, body: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        raise NotImplementedError

    def events(self, reply: Reply, body: dict[str, Any]) -> list[tuple[float, bytes]]:
        raise NotImplementedError(f"{type(self).__name__} does not stream")


class FakeOpenAI(_FakeServer):
    """POST /v1/chat/completions, as OpenAI (and vLLM, Ollama, LM Studio) answer it."""

    path = "/v1/chat/completions"
    prefix = "/v1"

    def answer(self, reply: Reply, body: dict[str, Any]) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": reply.content or None, "refusal": None}
        finish = "stop"
        forced = (body.get("tool_choice") or {}) if isinstance(body.get("tool_choice"), dict) else {}
        if reply.kind == "json" and forced.get("type") == "function":
            # The request forced a call of its schema tool: the answer is that call's arguments.
            name = forced["function"]["name"]
            function = {"name": name, "arguments": json.dumps(reply.value)}
            message["tool_calls"] = [{"id": self._id("call_"), "type": "function", "function": function}]
            finish = "tool_calls"
        elif reply.kind == "json":
            message["content"] = json.dumps(reply.value)
        elif reply.kind in ("tool_calls", "bad_arguments"):
            raw = reply.kind == "bad_arguments"
            message["tool_calls"] = [
                {
                    "id": self._id("call_"),
                    "type": "function",
                    "function": {"name": name, "arguments": args if raw else json.dumps(args)},
                }
                for name, args in reply.calls
            ]
            finish = "tool_calls"
        completion: dict[str, Any] = {
            "id": self._id("chatcmpl-"),
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", ""),
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
        }
        if reply.usage is not None:
            prompt, completion_tokens = reply.usage
            completion["usage"] = {
                "prompt_tokens": prompt,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt + completion_tokens,
            }
        return completion

    def events(self, reply: Reply, body: dict[str, Any]) -> list[tuple[float, bytes]]:
        """The answer as chat.completion.chunk events: the text (or each tool call's arguments) in
        pieces, the finish reason, then the usage when `stream_options.include_usage` asks for it."""
        whole = self.answer(reply, body)
        message, finish = whole["choices"][0]["message"], whole["choices"][0]["finish_reason"]
        base = {
            "id": whole["id"],
            "object": "chat.completion.chunk",
            "created": whole["created"],
            "model": whole["model"],
        }

        def chunk(delta: dict[str, Any], finish_reason: str | None = None, pause: float = 0.0) -> tuple[float, bytes]:
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            return pause, b"data: " + json.dumps({**base, "choices": [choice]}).encode() + b"\n\n"

        events = [chunk({"role": "assistant", "content": ""})]
        text = message.get("content") or ""
        size = 1 if reply.seconds else max(1, len(text) // 4)
        events += [chunk({"content": text[i : i + size]}, pause=reply.seconds) for i in range(0, len(text), size)]
        for index, call in enumerate(message.get("tool_calls") or []):
            head = {"index": index, "id": call["id"], "type": "function"}
            events.append(
                chunk({"tool_calls": [{**head, "function": {"name": call["function"]["name"], "arguments": ""}}]})
            )
            arguments = call["function"]["arguments"]
            half = len(arguments) // 2
            for piece in (arguments[:half], arguments[half:]):
                events.append(chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}))
        events.append(chunk({}, finish))
        if (body.get("stream_options") or {}).get("include_usage") and "usage" in whole:
            events.append(
                (0.0, b"data: " + json.dumps({**base, "choices": [], "usage": whole["usage"]}).encode() + b"\n\n")
            )
        return [*events, (0.0, b"data: [DONE]\n\n")]

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        kind = "server_error" if status >= 500 else "requests" if status == 429 else "invalid_request_error"
        code = {401: "invalid_api_key", 404: "model_not_found", 429: "rate_limit_exceeded"}.get(status)
        return {"error": {"message": message, "type": kind, "param": None, "code": code}}


class FakeAnthropic(_FakeServer):
    """POST /v1/messages, as Anthropic's Messages API answers it."""

    path = "/v1/messages"

    ERROR_TYPES: ClassVar[dict[int, str]] = {
        400: "invalid_request_error",
        401: "authentication_error",
        403: "permission_error",
        404: "not_found_error",
        413: "request_too_large",
        429: "rate_limit_error",
        500: "api_error",
        529: "overloaded_error",
    }

    def answer(self, reply: Reply, body: dict[str, Any]) -> dict[str, Any]:
        content: list[dict[str, Any]] = [{"type": "text", "text": reply.content}] if reply.content else []
        stop = "end_turn"
        forced = body.get("tool_choice") or {}
        if reply.kind == "json" and forced.get("type") == "tool":
            content = [self._tool_use(forced["name"], reply.value)]
            stop = "tool_use"
        elif reply.kind == "json":
            content = [{"type": "text", "text": json.dumps(reply.value)}]
        elif reply.kind in ("tool_calls", "bad_arguments"):
            content += [self._tool_use(name, args) for name, args in reply.calls]
            stop = "tool_use"
        input_tokens, output_tokens = reply.usage or (0, 0)
        return {
            "id": self._id("msg_"),
            "type": "message",
            "role": "assistant",
            "model": body.get("model", ""),
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {
                "input_tokens": input_tokens,
                "output_tokens": output_tokens,
                "cache_creation_input_tokens": reply.cache[0],
                "cache_read_input_tokens": reply.cache[1],
            },
        }

    def _tool_use(self, name: str, value: Any) -> dict[str, Any]:
        return {"type": "tool_use", "id": self._id("toolu_"), "name": name, "input": value}

    def events(self, reply: Reply, body: dict[str, Any]) -> list[tuple[float, bytes]]:
        """The message as Messages API stream events: message_start (with the input usage), each
        block started, its text or its input's JSON in pieces, stopped, then message_delta (the
        stop reason, the output usage) and message_stop."""
        whole = self.answer(reply, body)

        def event(kind: str, data: dict[str, Any], pause: float = 0.0) -> tuple[float, bytes]:
            return pause, f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()

        usage = whole["usage"]
        start = {**whole, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 0}}
        events = [event("message_start", {"message": start})]
        for index, block in enumerate(whole["content"]):
            if block["type"] == "text":
                text = block["text"]
                events.append(
                    event("content_block_start", {"index": index, "content_block": {"type": "text", "text": ""}})
                )
                size = 1 if reply.seconds else max(1, len(text) // 4)
                events += [
                    event(
                        "content_block_delta",
                        {"index": index, "delta": {"type": "text_delta", "text": text[i : i + size]}},
                        reply.seconds,
                    )
                    for i in range(0, len(text), size)
                ]
            else:
                opened = {**block, "input": {}}
                events.append(event("content_block_start", {"index": index, "content_block": opened}))
                raw = json.dumps(block["input"])
                size = 1 if reply.seconds else max(1, len(raw) // 2)
                events += [
                    event(
                        "content_block_delta",
                        {"index": index, "delta": {"type": "input_json_delta", "partial_json": raw[i : i + size]}},
                        reply.seconds,
                    )
                    for i in range(0, len(raw), size)
                ]
            events.append(event("content_block_stop", {"index": index}))
        delta = {"stop_reason": whole["stop_reason"], "stop_sequence": None}
        events.append(event("message_delta", {"delta": delta, "usage": {"output_tokens": usage["output_tokens"]}}))
        return [*events, event("message_stop", {})]

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        kind = self.ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
        return {"type": "error", "error": {"type": kind, "message": message}}


def _handler_for(fake: _FakeServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the real APIs: clients reuse connections

        def setup(self) -> None:
            super().setup()
            with fake._lock:
                fake._connections.add(self.connection)

        def finish(self) -> None:
            with fake._lock:
                fake._connections.discard(self.connection)
            super().finish()

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("content-length") or 0))
            try:
                body = json.loads(raw)
            except ValueError:
                body = None
            headers = {name.lower(): value for name, value in self.headers.items()}
            fake._record(RecordedRequest(self.path, headers, body, time.monotonic(), self.client_address[:2]))
            try:
                status, response_headers, payload = fake._respond(self.path, body)
            except Exception as exc:  # a bug in a responder or here: fail the test loudly, not retryably
                failure = fake.error_body(400, f"fake server failed: {exc!r}")
                status, response_headers, payload = fake._json(400, failure)
            try:
                self.send_response(status)
                if isinstance(payload, list):  # streamed: no length, the connection's end is the body's
                    self.close_connection = True
                    response_headers = {**response_headers, "connection": "close"}
                else:
                    response_headers = {**response_headers, "content-length": str(len(payload))}
                for name, value in response_headers.items():
                    self.send_header(name, value)
                self.end_headers()
                for pause, piece in payload if isinstance(payload, list) else [(0.0, payload)]:
                    if pause and fake._stopping.wait(pause):
                        break
                    self.wfile.write(piece)
                    self.wfile.flush()
            except OSError:
                self.close_connection = True  # the client gave up (a timeout) or the server stops

        def log_message(self, format: str, *args: Any) -> None:
            pass  # quiet: the tests assert on `requests`

    return Handler


def _shutdown(connection: socket.socket) -> None:
    try:
        connection.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
