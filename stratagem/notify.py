"""Telling people a run waits for them: a Slack-compatible incoming webhook and a generic JSON
webhook, each message with a signed, expiring link to the run's page in the review console.

Where messages go is the worker's own configuration, never a run's: a run cannot send its
details, or a link, to an address of its choosing.

    STRATAGEM_NOTIFY_SLACK_URL      a Slack (or compatible) incoming-webhook URL
    STRATAGEM_NOTIFY_WEBHOOK_URL    a URL that receives a JSON document per decision
    STRATAGEM_CONSOLE_URL           the console's address, for the links (e.g. https://review.example.com)
    STRATAGEM_CONSOLE_SECRET        the console's secret, which signs the links (as the console does)
"""

from __future__ import annotations

import hashlib
import hmac
import os
import time
from base64 import urlsafe_b64encode
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

SLACK_ENV = "STRATAGEM_NOTIFY_SLACK_URL"
WEBHOOK_ENV = "STRATAGEM_NOTIFY_WEBHOOK_URL"
CONSOLE_URL_ENV = "STRATAGEM_CONSOLE_URL"
CONSOLE_SECRET_ENV = "STRATAGEM_CONSOLE_SECRET"
LINK_SECONDS = 7 * 24 * 3600


def link_signature(secret: bytes, path: str, expires: int) -> str:
    """The signature a console link carries: the console checks it with the same secret."""
    digest = hmac.new(secret, f"link:{path}:{expires}".encode(), hashlib.sha256).digest()
    return urlsafe_b64encode(digest).decode().rstrip("=")


def link_valid(secret: bytes, path: str, expires: str, signature: str, now: float | None = None) -> bool:
    """Whether a link's `exp` and `sig` are the ones `NotifyConfig.link` signed, and still current."""
    if not expires.isdigit() or int(expires) < (time.time() if now is None else now):
        return False
    return hmac.compare_digest(signature, link_signature(secret, path, int(expires)))


@dataclass(frozen=True)
class NotifyConfig:
    slack_url: str | None = None
    webhook_url: str | None = None
    console_url: str | None = None
    secret: bytes | None = None

    @classmethod
    def from_env(cls) -> NotifyConfig:
        def value(name: str) -> str | None:
            return os.environ.get(name, "").strip() or None

        secret = value(CONSOLE_SECRET_ENV)
        return cls(
            slack_url=value(SLACK_ENV),
            webhook_url=value(WEBHOOK_ENV),
            console_url=(value(CONSOLE_URL_ENV) or "").rstrip("/") or None,
            secret=secret.encode() if secret else None,
        )

    @property
    def configured(self) -> bool:
        return bool(self.slack_url or self.webhook_url)

    def link(self, run_id: str, now: float | None = None) -> str | None:
        """A link to the run's page, signed and expiring in a week (None without a console URL)."""
        if not self.console_url:
            return None
        path = f"/runs/{quote(run_id, safe='')}"
        if self.secret is None:
            return self.console_url + path
        expires = int((time.time() if now is None else now) + LINK_SECONDS)
        query = urlencode({"exp": expires, "sig": link_signature(self.secret, path, expires)})
        return f"{self.console_url}{path}?{query}"


def message(goal: str, run_id: str, waiting: str, prompt: str, link: str | None) -> dict[str, Any]:
    """The text people read: what waits, on which run, and where to decide."""
    where = f"\n<{link}|Decide in the console>" if link else f"\n(stratagem status {run_id})"
    return {"text": f"Run {run_id} ({goal[:200]}) waits for {waiting}: {prompt[:500]}{where}"}
