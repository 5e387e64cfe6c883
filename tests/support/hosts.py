"""HTTP servers standing in for the hosts a step may call, each keeping a log of every request it
received (method, path, headers): the effect counter of the attacks on the worker's secrets.

    with serving("127.0.0.1") as crm, serving("127.0.0.2") as other:   # two loopback hosts
        ...
        assert not other.saw(TOKEN)

Paths: `/redirect?to=URL` answers 302 to URL; `/echo-401` answers 401 with the request's own
headers (all but the standard ones) in its body, as a careless upstream's error page does, and
`/echo` the same with 200; anything else answers 200 with {"ok": true}.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

# Left out of the echo, so the headers a request chose fit in an error's excerpt (300 characters).
_STANDARD = frozenset({"host", "accept", "accept-encoding", "connection", "user-agent", "content-length"})


@dataclass
class Host:
    address: str
    port: int = 0
    log: list[dict[str, Any]] = field(default_factory=list)

    def url(self, path: str) -> str:
        return f"http://{self.address}:{self.port}{path}"

    @property
    def entry(self) -> str:
        """How the allowlist and a secret's bound hosts name this host."""
        return f"{self.address}:{self.port}"

    def saw(self, text: str) -> bool:
        """Whether any request this host received carried `text` anywhere (path or headers)."""
        return any(text in json.dumps(request) for request in self.log)


@contextmanager
def serving(address: str = "127.0.0.1") -> Iterator[Host]:
    host = Host(address)

    class Handler(BaseHTTPRequestHandler):
        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            host.log.append({"method": self.command, "path": self.path, "headers": dict(self.headers.items())})
            parts = urlsplit(self.path)
            if parts.path == "/redirect":
                self.send_response(302)
                self.send_header("Location", parse_qs(parts.query)["to"][0])
                self.send_header("Content-Length", "0")
                self.end_headers()
            elif parts.path in ("/echo", "/echo-401"):
                own = [(n, v) for n, v in self.headers.items() if n.lower() not in _STANDARD]
                echoed = "".join(f"{name}: {value}\n" for name, value in own)
                status = 401 if parts.path == "/echo-401" else 200
                self._reply(status, "text/plain", f"invalid credentials; you sent:\n{echoed}")
            else:
                self._reply(200, "application/json", json.dumps({"ok": True}))

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

    httpd = ThreadingHTTPServer((address, 0), Handler)
    httpd.daemon_threads = True
    host.port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield host
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()
