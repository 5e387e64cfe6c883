"""Who is deciding, as the console authenticated them: never a name the client typed.

Four ways in, chosen by the console's own configuration (never by a request):

- `local`: the operating-system user who started the console. Only on a loopback address: on any
  other, anyone who reaches the port would be that user.
- `users`: a users file with scrypt-hashed passwords (stratagem.console.users). A login form sets
  a session cookie (signed with the console's secret by itsdangerous, expiring, and bound to the
  person's entry in the file: a logout, a new password or a removal ends every session they
  have); every form it serves carries a CSRF token bound to the person.
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
from dataclasses import dataclass, field
from enum import Enum
from functools import lru_cache
from typing import Any

from itsdangerous import BadData, TimestampSigner, URLSafeTimedSerializer
from itsdangerous import Signer as ItsSigner

from stratagem.common.errors import ConfigError
from stratagem.console.guard import loopback
from stratagem.console.users import Users, check_password, hash_password

SESSION_COOKIE = "stratagem_session"
SESSION_SECONDS = 12 * 3600
# One salt per purpose: a value signed for one (a session) is never accepted as another (a CSRF token).
SESSION_SALT = "stratagem.console.session"
GENERATION_SALT = "stratagem.console.session-generation"
CSRF_SALT = "stratagem.console.csrf"
# itsdangerous defaults to HMAC-SHA1 over a key derived by concatenation; these keep SHA-256, as
# the hand-written signing it replaces used.
SIGNING: dict[str, Any] = {"digest_method": hashlib.sha256, "key_derivation": "hmac"}


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
        """What the login sets: the person and their current sessions, signed and timestamped
        (itsdangerous), so `session_user` refuses it once SESSION_SECONDS have passed."""
        return self._sessions(now).dumps({"u": user, "g": self._generation(user) or ""})

    def session_user(self, cookie: str | None, now: float | None = None) -> str | None:
        if not cookie:
            return None
        try:
            # BadData covers a forged or altered signature, an expired timestamp and a bad payload.
            data: Any = self._sessions(now).loads(cookie, max_age=SESSION_SECONDS)
        except BadData:
            return None
        if not isinstance(data, dict):
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
        return None if key is None else self._mac(GENERATION_SALT, f"{user}:{key}")

    def csrf_token(self, user: str) -> str:
        """A token bound to the person and their current sessions: a form from another site cannot
        carry it, and one copied from a page stops working when the person logs out. It has no
        timestamp: a page left open keeps working for as long as the person's sessions do."""
        return self._mac(CSRF_SALT, f"{user}:{self._generation(user) or ''}")

    def csrf_ok(self, user: str, token: str | None) -> bool:
        # The token exactly as issued (itsdangerous's own check would also take it with characters
        # base64 skips added), compared as bytes: a token that is not ASCII is wrong, not an error.
        return bool(token) and hmac.compare_digest(str(token).encode(), self.csrf_token(user).encode())

    def _mac(self, salt: str, text: str) -> str:
        return _signer(self.secret, salt).get_signature(text).decode()

    def _sessions(self, now: float | None) -> URLSafeTimedSerializer:
        if now is None:
            return _session_serializer(self.secret)
        return URLSafeTimedSerializer(self.secret, salt=SESSION_SALT, signer=_clock(now), signer_kwargs=SIGNING)


# Kept per secret: building them for each request made checking a cookie and a token 35 µs, not 28.
@lru_cache(maxsize=16)
def _signer(secret: bytes, salt: str) -> ItsSigner:
    return ItsSigner(secret, salt=salt, **SIGNING)


@lru_cache(maxsize=16)
def _session_serializer(secret: bytes) -> URLSafeTimedSerializer:
    return URLSafeTimedSerializer(secret, salt=SESSION_SALT, signer_kwargs=SIGNING)


def _clock(now: float) -> type[TimestampSigner]:
    """A signer whose time is `now` (a cookie minted or checked as of then), for tests."""

    class Clocked(TimestampSigner):
        def get_timestamp(self) -> int:
            return int(now)

    return Clocked


__all__ = ["SESSION_COOKIE", "AuthMode", "IdentityConfig", "Users", "check_password", "hash_password"]
