"""Telling people a run waits for them: a Slack-compatible incoming webhook and a generic JSON
webhook, each message with a signed, expiring link to the run's page in the review console.

Where messages go is the worker's own configuration, never a run's: a run cannot send its
details, or a link, to an address of its choosing.

    STRATAGEM_NOTIFY_SLACK_URL      a Slack (or compatible) incoming-webhook URL
    STRATAGEM_NOTIFY_WEBHOOK_URL    a URL that receives a JSON document per decision
    STRATAGEM_NOTIFY_SMTP_URL       a mail server, for e-mail (stratagem.io.email_notify)
    STRATAGEM_CONSOLE_URL           the console's address, for the links (e.g. https://review.example.com)
    STRATAGEM_CONSOLE_SECRET        the console's secret, which signs the links (as the console does)
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import time
from base64 import urlsafe_b64encode
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

from stratagem.domain.visible_text import visible

SLACK_ENV = "STRATAGEM_NOTIFY_SLACK_URL"
WEBHOOK_ENV = "STRATAGEM_NOTIFY_WEBHOOK_URL"
SMTP_ENV = "STRATAGEM_NOTIFY_SMTP_URL"
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
    smtp_url: str | None = None
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
            smtp_url=value(SMTP_ENV),
            console_url=(value(CONSOLE_URL_ENV) or "").rstrip("/") or None,
            secret=secret.encode() if secret else None,
        )

    @property
    def configured(self) -> bool:
        return bool(self.slack_url or self.webhook_url or self.smtp_url)

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


def message(
    goal: str,
    run_id: str,
    waiting: str,
    prompt: str,
    link: str | None,
    shows: list[str] | None = None,
    escalated_to: str | None = None,
    people: list[str] | None = None,
) -> dict[str, Any]:
    """The Slack message people read: what waits (`waiting`, worded by its kind:
    stratagem.domain.decisions.kinds.WAITS), on which run, and where to decide.

    All but the link comes from the run (its id, goal and questions: whoever started it or its
    planner wrote them), so each is `untrusted` text: it can neither mention anyone nor link
    anywhere, and the one link is the console's. Slack does not unfurl it either. What a gated
    step will run (`shows`) follows, every value, never cut: an approver decides on it. An
    escalation names its group and people: a channel cannot address them, so it says they may decide."""
    where = f"\n<{_slack_url(link)}|Decide in the console>" if link else f"\n(stratagem status {untrusted(run_id)})"
    text = f"Run {untrusted(run_id)} ({untrusted(goal, 200)}) waits for {untrusted(waiting)}"
    if escalated_to:
        who = ", ".join(untrusted(person) for person in people or [])
        text += f", escalated to {untrusted(escalated_to)} ({who}), who may now decide"
    text += f": {untrusted(prompt, 500)}"
    if shows:  # on the message's one line, as the rest: Slack folds it, nothing cuts it
        text += " · it will run: " + " ".join(untrusted(line) for line in shows)
    return {"text": text + where, "unfurl_links": False, "unfurl_media": False}


# What a chat service turns into a link or a mention in plain text: a scheme, a dot between
# the labels of a name (Slack links a bare "evil.example"), and an @ that starts a word
# (Slack-compatible services such as Mattermost mention on a bare @name or @channel).
_SCHEME = re.compile(r"://")
_NAME_DOT = re.compile(r"(?<=[A-Za-z0-9-])\.(?=[A-Za-z][A-Za-z0-9-])")
_MENTION = re.compile(r"(?<![A-Za-z0-9])@")


def untrusted(text: str, limit: int | None = None) -> str:
    """Text a run wrote, made safe for a Slack message: invisible characters dropped, on one line,
    cut to `limit`, Slack's control characters escaped (`&`, `<`, `>`: so no `<!channel>`,
    `<@U123>` or `<https://...|...>` survives), and URLs, names and @s defanged so nothing links
    or mentions: `https://evil.example` becomes `https[:]//evil[.]example`."""
    text = " ".join(visible(text).split())
    if limit is not None and len(text) > limit:
        text = text[: limit - 1] + "…"
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = text.replace("](", "] (")  # a Markdown link, for services that render Markdown
    text = _SCHEME.sub("[:]//", text)
    text = _NAME_DOT.sub("[.]", text)
    return _MENTION.sub("[at]", text)


def _slack_url(link: str) -> str:
    """The console's link, unable to end Slack's <url|label> early whatever the configured URL holds."""
    return link.replace("|", "%7C").replace("<", "%3C").replace(">", "%3E")
