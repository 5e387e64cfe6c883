"""Who is deciding, as the console authenticated them: never a name the client typed.

Four ways in, chosen by the console's own configuration (never by a request):

- `local`: the operating-system user who started the console. Only on a loopback address: on any
  other, anyone who reaches the port would be that user.
- `users`: a users file with scrypt-hashed passwords (stratagem.console.users). A login form sets
  a session cookie (signed with the console's secret, expiring, and bound to the person's entry in
  the file: a logout, a new password or a removal ends every session they have); every form it
  serves carries a CSRF token bound to the person.
- `header`: a name set by an authenticating reverse proxy (oauth2-proxy and the like), trusted
  only on requests whose peer is one of the configured proxy addresses.
- API tokens (any mode, REST only): `Authorization: Bearer <token>`; the users file keeps a
  SHA-256 of each token and the person it acts for.

Which requests reach any of this at all (the Host they name, the Origin of a change) is
stratagem.console.guard's job.
"""

from __future__ import annotations

import getpass
import hashlib
import hmac
import ipaddress
import json
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from ..errors import ConfigError
from .guard import loopback
from .users import Users, b64url, check_password, hash_password, unb64url

SESSION_COOKIE = "stratagem_session"
SESSION_SECONDS = 12 * 3600


class AuthMode(str, Enum):
    local = "local"
    users = "users"
    header = "header"


@dataclass
class IdentityConfig:
    mode: AuthMode
    secret: bytes
    users: Users = field(default_factory=Users)
    header: str = "X-Forwarded-User"
    proxies: list[str] = field(default_factory=list)
    local_user: str = field(default_factory=getpass.getuser)

    def check(self, host: str) -> None:
        """Refuse a configuration that would let strangers in."""
        if self.mode is AuthMode.local and not loopback(host):
            raise ConfigError(
                f"--auth local trusts whoever reaches the console as {self.local_user}: it listens only on a "
                f"loopback address, not {host}; use --auth users or --auth header"
            )
        if self.mode is AuthMode.header and not self.proxies:
            raise ConfigError("--auth header needs --trusted-proxy ADDRESS: the proxy whose header is believed")

    def from_proxy(self, peer: str | None) -> bool:
        if peer is None:
            return False
        try:
            address = ipaddress.ip_address(peer)
        except ValueError:
            return False
        for proxy in self.proxies:
            try:
                if address in ipaddress.ip_network(proxy, strict=False):
                    return True
            except ValueError:
                continue
        return False

    # ------------------------------------------------------------------ sessions and CSRF

    def token_user(self, token: str) -> str | None:
        """The person an API token acts for. With `--auth users` that person must still be in the
        users file: a token outlives neither its person's removal nor a hand-deleted entry."""
        user = self.users.token_user(token)
        if user is not None and self.mode is AuthMode.users and self.users.session_key(user) is None:
            return None
        return user

    def session_cookie(self, user: str, now: float | None = None) -> str:
        expires = int((time.time() if now is None else now) + SESSION_SECONDS)
        body = b64url(json.dumps({"u": user, "exp": expires, "g": self._generation(user) or ""}).encode())
        return f"{body}.{self._sign(body)}"

    def session_user(self, cookie: str | None, now: float | None = None) -> str | None:
        if not cookie or "." not in cookie:
            return None
        body, signature = cookie.rsplit(".", 1)
        if not hmac.compare_digest(signature, self._sign(body)):
            return None
        try:
            data: dict[str, Any] = json.loads(unb64url(body))
        except (ValueError, TypeError):
            return None
        if not isinstance(data, dict) or data.get("exp", 0) < (time.time() if now is None else now):
            return None
        user, generation = data.get("u"), data.get("g")
        if not (isinstance(user, str) and user and isinstance(generation, str)):
            return None
        current = self._generation(user)  # None once the person is gone from the users file
        return user if current is not None and hmac.compare_digest(generation, current) else None

    def end_sessions(self, user: str) -> None:
        """Log `user` out everywhere: every cookie issued to them so far stops working."""
        if self.mode is not AuthMode.users:
            return
        try:
            self.users.end_sessions(user)
        except OSError as exc:
            raise ConfigError(
                f"could not end {user}'s sessions: the users file cannot be written ({exc.strerror})"
            ) from None

    def _generation(self, user: str) -> str | None:
        """Which of a person's sessions are current: a MAC over their password hash and session
        count from the users file, so the cookie says nothing about either."""
        key = self.users.session_key(user)
        return None if key is None else self._sign(f"session:{user}:{key}")

    def csrf_token(self, user: str) -> str:
        """A token bound to the person and their current sessions: a form from another site cannot
        carry it, and one copied from a page stops working when the person logs out."""
        return self._sign(f"csrf:{user}:{self._generation(user) or ''}")

    def csrf_ok(self, user: str, token: str | None) -> bool:
        return bool(token) and hmac.compare_digest(str(token), self.csrf_token(user))

    def _sign(self, text: str) -> str:
        return b64url(hmac.new(self.secret, text.encode(), hashlib.sha256).digest())


__all__ = ["SESSION_COOKIE", "AuthMode", "IdentityConfig", "Users", "check_password", "hash_password"]
