"""A webhook endpoint for the tests: a local HTTP server that records every POST it receives."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Receiver:
    """A webhook endpoint: every POST's path, headers and JSON body, in order. `answer`: a JSON
    body to answer with (Slack's Web API wants `{"ok": true}`); default, an empty 200."""

    def __init__(self, answer: dict[str, Any] | None = None) -> None:
        self.received: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers["Content-Length"]))
                outer.received.append({"path": self.path, "headers": dict(self.headers), "body": json.loads(body)})
                reply = json.dumps(answer).encode() if answer is not None else b""
                self.send_response(200)
                if reply:
                    self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
