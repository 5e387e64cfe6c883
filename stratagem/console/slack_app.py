"""The console's Slack app, as its environment configures it: the signing secret that proves a
request came from Slack, and the bot token that opens the reason dialog of a Reject.

    STRATAGEM_SLACK_SIGNING_SECRET  the app's signing secret (Basic Information); without it the
                                    console serves no /slack/interactions
    STRATAGEM_SLACK_BOT_TOKEN       a bot token (xoxb-...), for views.open: without it a Reject
                                    from Slack rejects with the reason "rejected in Slack"
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.signature import SignatureVerifier

SIGNING_SECRET_ENV = "STRATAGEM_SLACK_SIGNING_SECRET"
BOT_TOKEN_ENV = "STRATAGEM_SLACK_BOT_TOKEN"
API_TIMEOUT = 5  # seconds: a trigger_id is good for three, so a slower views.open is lost anyway


@dataclass(frozen=True)
class SlackApp:
    signing_secret: str
    bot_token: str | None = None
    api_url: str = WebClient.BASE_URL  # Slack's Web API; a test points it at a local server

    @classmethod
    def from_env(cls) -> SlackApp | None:
        secret = os.environ.get(SIGNING_SECRET_ENV, "").strip()
        if not secret:
            return None
        return cls(signing_secret=secret, bot_token=os.environ.get(BOT_TOKEN_ENV, "").strip() or None)

    def signed(self, body: bytes, headers: Mapping[str, str]) -> bool:
        """Whether Slack signed this request (v0: HMAC-SHA256 of `v0:{timestamp}:{body}` with the
        signing secret) within the last five minutes: slack_sdk's verifier, which refuses a
        timestamp more than 300 seconds from now either way, so a captured request cannot be replayed
        later."""
        try:
            return SignatureVerifier(self.signing_secret).is_valid_request(body, dict(headers))
        except ValueError:  # a timestamp that is not a number
            return False

    async def open_view(self, trigger_id: str, view: dict[str, Any]) -> str | None:
        """Open a modal for the person who clicked (views.open); None when it opened, else why not."""
        if self.bot_token is None:
            return "the console has no Slack bot token"
        client = WebClient(token=self.bot_token, base_url=self.api_url, timeout=API_TIMEOUT)
        try:
            # slack_sdk's WebClient is synchronous (its async client needs aiohttp): off the loop.
            await asyncio.to_thread(client.views_open, trigger_id=trigger_id, view=view)
        except SlackApiError as exc:
            return f"Slack said {exc.response.get('error', 'no')}"
        except (SlackClientError, OSError) as exc:
            return f"Slack's API could not be reached ({type(exc).__name__})"
        return None


__all__ = ["BOT_TOKEN_ENV", "SIGNING_SECRET_ENV", "SlackApp"]
