"""Who may connect to the protocol servers, and as whom.

A token is a console API token (`stratagem console-token LABEL --user NAME`), checked against
the console's users file: the person it was made for is the person who decides. A server that
listens beyond loopback without tokens is refused before it starts: anyone who reaches it could
start runs and, over MCP, decide as the person running it.
"""

from __future__ import annotations

from pathlib import Path

from stratagem.common.errors import ConfigError
from stratagem.console.guard import loopback
from stratagem.console.users import Users


def refuse_open(host: str, *, authenticated: bool, server: str) -> None:
    """Refuse to listen on `host` beyond loopback without authentication. Raises ConfigError."""
    if not authenticated and not loopback(host):
        raise ConfigError(
            f"{server} would listen on {host} without authentication: anyone who reaches it could act; "
            "listen on 127.0.0.1, or require tokens (--users FILE, made with `stratagem console-token`)"
        )


class Tokens:
    """API tokens of the console's users file, read again on every check (a removed token stops
    working at once, as in the console)."""

    def __init__(self, path: Path):
        self.path = path

    def person(self, token: str | None) -> str | None:
        """The person `token` acts for, or None (no token, unknown, or removed)."""
        if not token:
            return None
        return Users.load(self.path).token_user(token)
