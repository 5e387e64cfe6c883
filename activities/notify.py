"""Telling people a run waits for them (stratagem.notify): one activity per pending decision.

Each channel's delivery is remembered in the output store under the decision's key before the
activity returns, so a retried attempt, or a worker that crashed after sending, does not send
it again; the generic webhook also carries the key as `Idempotency-Key`, for receivers that
deduplicate. (A crash between the send and the record can still repeat one message: webhooks
offer no way to ask whether one arrived.)
"""

from __future__ import annotations

import asyncio
import hashlib
import json

import httpx
from temporalio import activity

from stratagem.domain import activity_io
from stratagem.io.notify import NotifyConfig, message
from stratagem.io.slack_blocks import notification
from stratagem.io.store import OutputStore, StoreError, default_store

from .errors import as_application_error
from .notify_email import send_emails

TIMEOUT_SECONDS = 10


class NotifyActivities:
    def __init__(self, store: OutputStore | None = None):
        self._store = store or default_store()

    @activity.defn(name=activity_io.NOTIFY)
    async def notify(self, request: activity_io.NotifyInput) -> list[str]:
        """Send the notification to every configured channel not yet reached; returns the channels sent now."""
        config = NotifyConfig.from_env()
        link = config.link(request.run_id)
        text = message(
            request.goal,
            request.run_id,
            request.waiting,
            request.prompt,
            link,
            request.shows,
            request.escalated_to,
            request.people,
        )
        document = {**request.model_dump(mode="json"), "link": link, "text": text["text"]}
        # Slack gets Block Kit, with buttons where a decision can be taken there; `text` its fallback.
        slack = notification(
            text=text["text"],
            run_id=request.run_id,
            goal=request.goal,
            key=request.key,
            waiting=request.waiting,
            kind=request.kind,
            step_id=request.step_id,
            revision=request.revision,
            prompt=request.prompt,
            link=link,
            shows=request.shows,
            escalated_to=request.escalated_to,
            people=request.people,
        )
        sent = []
        try:
            async with httpx.AsyncClient(timeout=TIMEOUT_SECONDS, follow_redirects=False) as http:
                for channel, url, body, headers in (
                    ("slack", config.slack_url, slack, {}),
                    ("webhook", config.webhook_url, document, {"Idempotency-Key": request.key}),
                ):
                    if not url or await asyncio.to_thread(self._delivered, channel, request.key):
                        continue
                    response = await http.post(url, json=body, headers=headers)
                    response.raise_for_status()
                    await asyncio.to_thread(self._record, channel, request.key)
                    sent.append(channel)
            if await send_emails(request, config, self._delivered, self._record):
                sent.append("email")
        except Exception as exc:
            raise as_application_error(exc)
        return sent

    def _marker(self, channel: str, key: str) -> str:
        return f"notifications/{channel}/{hashlib.sha256(key.encode()).hexdigest()}"

    def _delivered(self, channel: str, key: str) -> bool:
        try:
            self._store.get(f"store:{self._marker(channel, key)}")
        except StoreError:
            return False
        return True

    def _record(self, channel: str, key: str) -> None:
        self._store.put(self._marker(channel, key), json.dumps({"key": key}).encode())
