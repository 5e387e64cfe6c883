"""Who is deciding, as the console authenticated them: never a name the client typed.

Four ways in, chosen by the console's own configuration (never by a request):

- `local`: the operating-system user who started the console. Only on a loopback address: on any
  other, anyone who reaches the port would be that user.
- `users`: a users file with scrypt-hashed passwords. A login form sets a session cookie (signed
  with the console's secret, expiring); every form it serves carries a CSRF token bound to it.
- `header`: a name set by an authenticating reverse proxy (oauth2-proxy and the like), trusted
  only on requests whose peer is one of the configured proxy addresses.
- API tokens (any mode, REST only): `Authorization: Bearer <token>`; the users file keeps a
  SHA-256 of each token and the person it acts for.
"""

from __future__ import annotations

import base64
import getpass
import hashlib
import hmac
import ipaddress
import json
import secrets
import time
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import yaml

from ..errors import ConfigError

SESSION_COOKIE = "stratagem_session"
SESSION_SECONDS = 12 * 3600
# scrypt's cost: about 50 ms and 16 MiB a check, so guessing is slow and a login still quick.
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**14, 8, 1


class AuthMode(str, Enum):
    local = "local"
    users = "users"
    header = "header"


def hash_password(password: str) -> str:
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P)
    return f"scrypt${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${_b64(salt)}${_b64(digest)}"


def check_password(password: str, stored: str) -> bool:
    try:
        kind, n, r, p, salt, digest = stored.split("$")
        if kind != "scrypt":
            return False
        found = hashlib.scrypt(password.encode(), salt=_unb64(salt), n=int(n), r=int(r), p=int(p))
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(found, _unb64(digest))


def hash_token(token: str) -> str:
    return "sha256$" + hashlib.sha256(token.encode()).hexdigest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass
class Users:
    """The users file: people with password hashes, and API tokens (hashed) acting for a person."""

    path: Path | None = None
    passwords: dict[str, str] = field(default_factory=dict)
    tokens: dict[str, dict[str, str]] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> Users:
        if not path.exists():
            return cls(path=path)
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"users file '{path}' is not YAML: {exc}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"users file '{path}' must map 'users' and 'tokens'")
        users = data.get("users") or {}
        tokens = data.get("tokens") or {}
        if not isinstance(users, dict) or not isinstance(tokens, dict):
            raise ConfigError(f"users file '{path}': 'users' and 'tokens' must be mappings")
        passwords = {str(name): str((entry or {}).get("password", "")) for name, entry in users.items()}
        return cls(path=path, passwords=passwords, tokens={str(k): dict(v or {}) for k, v in tokens.items()})

    def save(self) -> None:
        assert self.path is not None
        data = {"users": {n: {"password": h} for n, h in sorted(self.passwords.items())}, "tokens": self.tokens}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(yaml.safe_dump(data, sort_keys=True), encoding="utf-8")
        self.path.chmod(0o600)

    def set_password(self, name: str, password: str) -> None:
        self.passwords[name] = hash_password(password)

    def new_token(self, label: str, user: str) -> str:
        """A fresh token for `user`; only its hash is kept, so it is shown once."""
        token = "stg_" + secrets.token_urlsafe(32)
        self.tokens[label] = {"user": user, "hash": hash_token(token)}
        return token

    def login(self, name: str, password: str) -> str | None:
        stored = self.passwords.get(name)
        if stored is None:
            check_password(password, hash_password("x"))  # as slow for an unknown name
            return None
        return name if check_password(password, stored) else None

    def token_user(self, token: str) -> str | None:
        wanted = hash_token(token)
        for entry in self.tokens.values():
            if hmac.compare_digest(entry.get("hash", ""), wanted):
                return entry.get("user") or None
        return None


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
        if self.mode is AuthMode.local and not _loopback(host):
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

    def session_cookie(self, user: str, now: float | None = None) -> str:
        body = _b64(
            json.dumps({"u": user, "exp": int((time.time() if now is None else now) + SESSION_SECONDS)}).encode()
        )
        return f"{body}.{self._sign(body)}"

    def session_user(self, cookie: str | None, now: float | None = None) -> str | None:
        if not cookie or "." not in cookie:
            return None
        body, signature = cookie.rsplit(".", 1)
        if not hmac.compare_digest(signature, self._sign(body)):
            return None
        try:
            data: dict[str, Any] = json.loads(_unb64(body))
        except (ValueError, TypeError):
            return None
        if data.get("exp", 0) < (time.time() if now is None else now):
            return None
        user = data.get("u")
        return user if isinstance(user, str) and user else None

    def csrf_token(self, user: str) -> str:
        """A token bound to the person: a form from another site cannot carry it."""
        return self._sign(f"csrf:{user}")

    def csrf_ok(self, user: str, token: str | None) -> bool:
        return bool(token) and hmac.compare_digest(str(token), self.csrf_token(user))

    def _sign(self, text: str) -> str:
        return _b64(hmac.new(self.secret, text.encode(), hashlib.sha256).digest())


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
