"""The console's users file: people with password hashes, and API tokens (hashed) acting for a person.

    users:
      dana: {password: "scrypt$...", sessions: 2, slack: U0123ABCD}
      erin: {slack: U0456EFGH}        # decides from Slack only: no password, cannot sign in
    tokens:
      slack-bot: {user: dana, hash: "sha256$..."}

The file is the one place a person's access lives, so a running console re-reads it when it
changes on disk (a stat per sign-in check, about a microsecond): `stratagem console-user NAME
--remove` or a new password ends that person's sessions and tokens at once, with no restart.
`slack` is the person's Slack user id: a Slack button they click decides as them
(stratagem.console.slack); one Slack id names one person. `sessions` counts how many times the
person ended all their sessions (each logout adds one); a session cookie is bound to it and to
the password hash (stratagem.console.identity), so a logout, a password change or a removal
leaves every earlier cookie of that person worthless.

Writes go to a temporary file renamed over the old one (a reader never sees half a file), under a
lock file beside it, so the console's logout and a `console-user` run at the same moment cannot
lose each other's change (a removal undone by a logout that read the file just before it).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import os
import re
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from stratagem.common.errors import ConfigError

try:
    import fcntl
except ImportError:  # Windows: the rename still keeps readers safe; two writers at once may race
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

# scrypt's cost: about 50 ms and 16 MiB a check, so guessing is slow and a login still quick.
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**14, 8, 1
# Slack's user ids: U... in a workspace, W... in an Enterprise Grid org.
SLACK_ID = re.compile(r"[UW][A-Z0-9]{2,30}")
Stamp = tuple[int, int, int]  # inode, mtime (ns), size: a rename changes the inode, whatever the clock


def hash_password(password: str) -> str:
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P)
    return f"scrypt${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${b64url(salt)}${b64url(digest)}"


def check_password(password: str, stored: str) -> bool:
    try:
        kind, n, r, p, salt, digest = stored.split("$")
        if kind != "scrypt":
            return False
        found = hashlib.scrypt(password.encode(), salt=unb64url(salt), n=int(n), r=int(r), p=int(p))
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(found, unb64url(digest))


def hash_token(token: str) -> str:
    return "sha256$" + hashlib.sha256(token.encode()).hexdigest()


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass
class Users:
    """The users file as last read. `path=None` keeps it in memory only (tests, embedding)."""

    path: Path | None = None
    passwords: dict[str, str] = field(default_factory=dict)
    sessions: dict[str, int] = field(default_factory=dict)
    tokens: dict[str, dict[str, str]] = field(default_factory=dict)
    slack: dict[str, str] = field(default_factory=dict)  # person -> Slack user id
    seen: Stamp | None = field(default=None, repr=False, compare=False)

    @classmethod
    def load(cls, path: Path) -> Users:
        seen = _stamp(path)
        if seen is None:
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
        entries: dict[str, dict[str, Any]] = {str(n): e if isinstance(e, dict) else {} for n, e in users.items()}
        sessions = {name: e.get("sessions", 0) for name, e in entries.items()}
        if not all(isinstance(n, int) and n >= 0 for n in sessions.values()):
            raise ConfigError(f"users file '{path}': 'sessions' must be a whole number")
        return cls(
            path=path,
            passwords={name: str(e.get("password", "")) for name, e in entries.items()},
            sessions={name: n for name, n in sessions.items() if n},
            tokens={str(k): dict(v or {}) for k, v in tokens.items()},
            slack={name: str(e["slack"]) for name, e in entries.items() if e.get("slack")},
            seen=seen,
        )

    @classmethod
    @contextmanager
    def editing(cls, path: Path) -> Iterator[Users]:
        """The file read and written back under its lock (what `stratagem console-user` changes)."""
        with _locked(path):
            users = cls.load(path)
            yield users
            users.save()

    def save(self) -> None:
        assert self.path is not None
        people = {
            n: {
                **({"password": self.passwords[n]} if self.passwords.get(n) else {}),
                **({"sessions": self.sessions[n]} if self.sessions.get(n) else {}),
                **({"slack": self.slack[n]} if self.slack.get(n) else {}),
            }
            for n in sorted({*self.passwords, *self.slack})
        }
        text = yaml.safe_dump({"users": people, "tokens": self.tokens}, sort_keys=True)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        # Created owner-only: the hashes are never readable by others, not even for a moment.
        with os.fdopen(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(partial, self.path)
        self.seen = _stamp(self.path)

    def refresh(self) -> None:
        """Take the file's current content if it changed on disk since it was read. A file that no
        longer parses lets nobody in (and says so in the log) rather than keep a removed person."""
        if self.path is None:
            return
        stamp = _stamp(self.path)
        if stamp == self.seen:
            return
        try:
            fresh = Users.load(self.path)
        except (ConfigError, OSError) as exc:
            log.warning("%s; nobody can sign in or use a token until it is fixed", exc)
            fresh = Users(path=self.path, seen=stamp)
        self.passwords, self.sessions, self.tokens, self.slack, self.seen = (
            fresh.passwords,
            fresh.sessions,
            fresh.tokens,
            fresh.slack,
            fresh.seen,
        )

    def set_password(self, name: str, password: str) -> None:
        """A new password, which also ends every session the person had (their cookies name the old hash)."""
        self.passwords[name] = hash_password(password)

    def remove(self, name: str) -> int | None:
        """Remove a person and every API token acting for them: how many tokens went, or None
        when the file names them nowhere."""
        labels = [label for label, entry in self.tokens.items() if entry.get("user") == name]
        if name not in self.passwords and name not in self.slack and not labels:
            return None
        self.passwords.pop(name, None)
        self.sessions.pop(name, None)
        self.slack.pop(name, None)
        for label in labels:
            del self.tokens[label]
        return len(labels)

    def set_slack(self, name: str, slack_id: str | None) -> None:
        """Map `name` to a Slack user id (None: unmap them). An id is one person's: naming it for
        another is refused, so a Slack click can never be taken as two people's."""
        if slack_id is None:
            self.slack.pop(name, None)
            return
        if not SLACK_ID.fullmatch(slack_id):
            raise ConfigError(f"'{slack_id[:40]}' is not a Slack user id (like U0123ABCD: the member ID in a profile)")
        owner = self.slack_user(slack_id)
        if owner is not None and owner != name:
            raise ConfigError(
                f"Slack user {slack_id} is {owner}'s; unmap it first: stratagem console-user {owner} --no-slack"
            )
        self.slack[name] = slack_id

    def slack_user(self, slack_id: str) -> str | None:
        """The person a Slack user id is mapped to; None for an id the file does not name."""
        self.refresh()
        for name, known in self.slack.items():
            if hmac.compare_digest(known.encode(), slack_id.encode()):
                return name
        return None

    def end_sessions(self, name: str) -> None:
        """End every session of `name`, in this console and any other reading the same file."""
        if self.path is None:
            self.sessions[name] = self.sessions.get(name, 0) + 1
            return
        with _locked(self.path):
            self.refresh()
            if name in self.passwords:
                self.sessions[name] = self.sessions.get(name, 0) + 1
                self.save()

    def session_key(self, name: str) -> str | None:
        """What a session of `name` is bound to: their password hash and session count; None
        for a person the file does not name (removed, or never there)."""
        self.refresh()
        stored = self.passwords.get(name)
        return f"{stored}:{self.sessions.get(name, 0)}" if stored else None

    def new_token(self, label: str, user: str) -> str:
        """A fresh token for `user`; only its hash is kept, so it is shown once."""
        token = "stg_" + secrets.token_urlsafe(32)
        self.tokens[label] = {"user": user, "hash": hash_token(token)}
        return token

    def login(self, name: str, password: str) -> str | None:
        self.refresh()
        stored = self.passwords.get(name)
        if stored is None:
            check_password(password, hash_password("x"))  # as slow for an unknown name
            return None
        return name if check_password(password, stored) else None

    def token_user(self, token: str) -> str | None:
        self.refresh()
        wanted = hash_token(token)
        for entry in self.tokens.values():
            if hmac.compare_digest(entry.get("hash", ""), wanted):
                return entry.get("user") or None
        return None


def _stamp(path: Path) -> Stamp | None:
    try:
        found = path.stat()
    except FileNotFoundError:
        return None
    return (found.st_ino, found.st_mtime_ns, found.st_size)


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(f".{path.name}.lock"), "a") as lock:
        if fcntl is not None:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)  # released when the file closes
        yield
