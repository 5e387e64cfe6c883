"""Local ports for the servers the tests start (the embedded Temporal server and its UI)."""

from __future__ import annotations

import socket
import time


def free_port_pair() -> int:
    """A port p with p and p + 1000 (the UI) both free."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port + 1000 < 65535:
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port + 1000))
                    return port
                except OSError:
                    continue
    raise RuntimeError("no free port pair")


def wait_listening(port: int, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise AssertionError(f"nothing listens on {port}")
