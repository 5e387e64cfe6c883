"""The link an approval e-mail carries: which decision of which run it is about, for whom, until
when, signed with the console's secret, so the console's confirmation page
(stratagem.console.email_links) can trust all of it and nothing else.

The whole link is one token in the URL's path (`/email/<token>`): signed by itsdangerous with a
salt of its own, so no other value the secret signs (a session cookie, a CSRF token, a run-page
link) passes for one, and changing any character of it (another run, another decision, another
person, a later expiry) makes it worthless. Its id is worked out from the decision and the
address it went to, so a retried send carries the same link and using one uses both.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

from itsdangerous import BadData, URLSafeSerializer
from pydantic import BaseModel, ValidationError

LINK_SALT = "stratagem.email-link"
TOKEN_LIMIT = 2000  # a signed link is a few hundred characters; anything longer is not one
# As the console's sessions: HMAC-SHA256 over a key derived by HMAC, not itsdangerous's SHA-1 default.
_SIGNING: dict[str, Any] = {"digest_method": hashlib.sha256, "key_derivation": "hmac"}


class EmailLink(BaseModel):
    run_id: str
    decision: str
    """The pending decision, as `decision_key` words it: its kind, step, call, revision and since."""
    person: str | None = None
    """The console person the address belongs to (STRATAGEM_NOTIFY_EMAIL_PEOPLE); None: a group's address."""
    link_id: str
    expires: int
    """Seconds since the epoch."""

    def expired(self, now: float | None = None) -> bool:
        return self.expires < (time.time() if now is None else now)


def decision_key(notify_key: str, run_id: str) -> str:
    """The decision a notification key (`run/execution/pending key`) names, as the console finds it
    among a run's pending decisions: without the execution (a continue-as-new keeps the decision)
    and without an escalation (the same decision, still waiting, announced to one more group)."""
    rest = notify_key.removeprefix(f"{run_id}/")
    rest = rest.split("/", 1)[1] if "/" in rest else rest
    return pending_key_base(rest)


def pending_key_base(key: str) -> str:
    """A pending decision's key (stratagem.domain.decisions.pending_key) without its escalation."""
    return key.split("/escalated:", 1)[0]


def link_id(notify_key: str, address: str) -> str:
    return hashlib.sha256(f"{notify_key}\n{address.lower()}".encode()).hexdigest()[:32]


def sign_link(secret: bytes, link: EmailLink) -> str:
    data = {"r": link.run_id, "d": link.decision, "p": link.person, "i": link.link_id, "e": link.expires}
    return str(_serializer(secret).dumps(data))


def read_link(secret: bytes, token: str) -> EmailLink | None:
    """The link a token carries, or None when it is not one this secret signed (altered, forged,
    another kind of signed value). Expiry is the caller's to check: an expired link is still
    worth naming its run."""
    if not token or len(token) > TOKEN_LIMIT:
        return None
    try:
        data = _serializer(secret).loads(token)
        return EmailLink(run_id=data["r"], decision=data["d"], person=data["p"], link_id=data["i"], expires=data["e"])
    except (BadData, ValidationError, KeyError, TypeError):
        return None


def _serializer(secret: bytes) -> URLSafeSerializer:
    return URLSafeSerializer(secret, salt=LINK_SALT, signer_kwargs=_SIGNING)


__all__ = ["EmailLink", "decision_key", "link_id", "pending_key_base", "read_link", "sign_link"]
