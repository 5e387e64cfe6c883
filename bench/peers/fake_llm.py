"""One local OpenAI-compatible model server that answers every framework the same way.

`POST /v1/chat/completions`, streamed when asked (planning calls are). The job comes from the request's model name
(bench/peers/jobs.py), the answer from the conversation so far: how many tool results it holds.
So the replies are deterministic, and a framework that resumes a conversation after a crash gets
the same next answer it would have got. Usage is reported at 4 characters a token. Standard
library only, one thread per connection.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .jobs import TOOL, Job

PLAN_SCHEMA = "plan"


@dataclass
class Seen:
    """What the server was asked: per request, the model and the request body's size."""

    requests: list[tuple[str, int]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, model: str, size: int) -> None:
        with self.lock:
            self.requests.append((model, size))

    def of(self, model: str) -> list[int]:
        with self.lock:
            return [size for m, size in self.requests if m == model]


def reply(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """The status and JSON answer to one chat.completions request body."""
    model = str(body.get("model", ""))
    job = Job.of_model(model)
    if job is None:
        return 404, {"error": {"message": f"model {model!r} is not a peers job", "type": "invalid_request_error"}}
    messages = body.get("messages") or []
    results = sum(1 for m in messages if m.get("role") == "tool")
    offered = [t.get("function", {}).get("name", "") for t in body.get("tools") or []]
    response_format = body.get("response_format") or {}
    message: dict[str, Any]
    if response_format.get("json_schema", {}).get("name") == PLAN_SCHEMA:
        message = {"role": "assistant", "content": json.dumps(job.plan())}
        finish = "stop"
    elif PLAN_SCHEMA in offered:  # structured output through a forced tool call
        message = _calls([(PLAN_SCHEMA, job.plan())], 0)
        finish = "tool_calls"
    elif TOOL in offered and (calls := job.next_calls(results)):
        message = _calls([(TOOL, args) for args in calls], results)
        finish = "tool_calls"
    else:
        message = {"role": "assistant", "content": job.answer(results)}
        finish = "stop"
    answer = json.dumps(message)
    return 200, {
        "id": f"chatcmpl-{results}",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": len(json.dumps(messages)) // 4,
            "completion_tokens": len(answer) // 4,
            "total_tokens": (len(json.dumps(messages)) + len(answer)) // 4,
        },
    }


def stream_events(completion: dict[str, Any]) -> list[bytes]:
    """The completion as chat.completion.chunk events: the message whole in one delta (its tool
    calls indexed), the finish reason, then the usage."""
    choice = completion["choices"][0]
    message = dict(choice["message"])
    if "tool_calls" in message:
        message["tool_calls"] = [{"index": i, **call} for i, call in enumerate(message["tool_calls"])]
    head = {k: completion[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    chunks = [
        {**head, "choices": [{"index": 0, "delta": message, "finish_reason": None}]},
        {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}]},
        {**head, "choices": [], "usage": completion["usage"]},
    ]
    return [json.dumps(chunk).encode() for chunk in chunks]


def _calls(calls: list[tuple[str, Any]], first: int) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": f"call_{first + i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
            for i, (name, args) in enumerate(calls)
        ],
    }


class FakeLLM:
    """The server, on a free port of 127.0.0.1: `with FakeLLM() as llm: llm.base_url`."""

    def __init__(self) -> None:
        self.seen = Seen()
        seen = self.seen

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                size = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(size)
                if not self.path.endswith("/chat/completions"):
                    status, answer = 404, {"error": {"message": f"no route {self.path}", "type": "not_found"}}
                else:
                    try:
                        body = json.loads(raw or b"{}")
                    except ValueError:
                        body = {}
                    seen.add(str(body.get("model", "")), size)
                    status, answer = reply(body)
                if status == 200 and body.get("stream"):  # Stratagem's planning calls stream
                    self.send_response(status)
                    self.send_header("content-type", "text/event-stream")
                    self.send_header("connection", "close")
                    self.end_headers()
                    self.close_connection = True
                    for event in stream_events(answer):
                        self.wfile.write(b"data: " + event + b"\n\n")
                    self.wfile.write(b"data: [DONE]\n\n")
                    return
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="peers-llm", daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> FakeLLM:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
