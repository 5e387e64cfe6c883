"""Deciding from Slack: `POST /slack/interactions`, the request URL of the Slack app's interactivity.

A request is believed only with Slack's v0 signature, made with the app's signing secret at most
five minutes ago (`SlackApp.signed`); the console's Origin rule does not apply to it (guard.py):
Slack's servers send no Origin, and no cookie or token of a person is read here. Who decides is
the console person the clicking Slack user is mapped to (`stratagem console-user NAME --slack
UXXXX`, stratagem.console.users); an unmapped user is told so and nothing changes. The decision
goes to the run exactly as a console form's does (stratagem.console.decisions.decide: as that
person, signed with the console's issuer key), so the run's own checks apply: its approver list,
quorum and four eyes, the revision, and a gated step's digest.

Slack wants an answer within three seconds, so a click is acknowledged at once and taken after the
response (a background task), which then answers through the message's `response_url`: the
message replaced by who decided and the outcome, or an ephemeral reply to the clicker alone (not
mapped, already decided, changed since the message, refused by the run). A button is taken only
for the wait it was made for, still waiting (same kind, step, revision and start: its `key`) and,
for a gated step, showing the same lines now (`Button.shown`); the approval then carries the run's
preview digest, which the run checks again. Reject opens a reason dialog (views.open, needing the
bot token; without one it rejects with the reason "rejected in Slack"); its submission, signed as
every request, carries the button and the response_url back in the view's private_metadata.
"""

from __future__ import annotations

import json
import logging
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
from fastapi import APIRouter, BackgroundTasks, HTTPException, Request
from fastapi.responses import JSONResponse, Response
from temporalio.service import RPCError

from stratagem.common.errors import StratagemError
from stratagem.console.decisions import decide
from stratagem.console.slack_app import SIGNING_SECRET_ENV
from stratagem.console.state import Console, ConsoleState
from stratagem.domain.decisions import kinds, pending_key, waiting_for
from stratagem.domain.run_state import PendingDecision
from stratagem.domain.run_types import ApproveInput, DecisionKind, RejectInput
from stratagem.io.notify import NotifyConfig
from stratagem.io.slack_blocks import (
    APPROVE_ACTION,
    BUTTON_KINDS,
    REASON_ACTION,
    REASON_BLOCK,
    REJECT_ACTION,
    REJECT_VIEW,
    Button,
    decided,
    ephemeral,
    reason_dialog,
    shown_digest,
)

log = logging.getLogger(__name__)
router = APIRouter()

INTERACTIONS = "/slack/interactions"
RESPONSE_TIMEOUT = 10  # seconds, for a post to a message's response_url
APPROVED_COMMENT = "approved in Slack"
REJECTED_REASON = "rejected in Slack"


@router.post(INTERACTIONS, include_in_schema=False)
async def interactions(request: Request, console: Console, later: BackgroundTasks) -> Response:
    slack = console.slack
    if slack is None:
        return JSONResponse({"detail": f"Slack is not set up on this console: set {SIGNING_SECRET_ENV}"}, 404)
    body = await request.body()
    if not slack.signed(body, request.headers):
        detail = "refused: not signed by this Slack app (X-Slack-Signature), or signed more than five minutes ago"
        return JSONResponse({"detail": detail}, 401)
    payload = _payload(body)
    if payload is None:
        return JSONResponse({"detail": "the request carries no interaction payload"}, 400)
    if payload.get("type") == "block_actions":
        actions = [a for a in payload.get("actions") or [] if isinstance(a, dict)]
        # A click on the console link button comes here too: acknowledged, nothing to do.
        for action in actions:
            if action.get("action_id") in (APPROVE_ACTION, REJECT_ACTION):
                later.add_task(Click(console, payload).take, action)
                break
        return Response(status_code=200)
    view = payload.get("view")
    if payload.get("type") == "view_submission" and isinstance(view, dict) and view.get("callback_id") == REJECT_VIEW:
        return await submitted(console, payload, view, later)
    return Response(status_code=200)


def _payload(body: bytes) -> dict[str, Any] | None:
    try:
        found = parse_qs(body.decode(), max_num_fields=20).get("payload")
        payload = json.loads(found[0]) if found else None
    except (UnicodeDecodeError, ValueError):
        return None
    return payload if isinstance(payload, dict) else None


def _slack_user(payload: dict[str, Any]) -> str:
    user = payload.get("user")
    return str(user.get("id") or "") if isinstance(user, dict) else ""


def _person(console: ConsoleState, payload: dict[str, Any]) -> str | None:
    user = _slack_user(payload)
    return console.identity.users.slack_user(user) if user else None


def _unmapped(payload: dict[str, Any]) -> str:
    user = _slack_user(payload)[:40] or "this user"
    return (
        f"Your Slack user ({user}) is not a person of this console, so nothing was decided; an operator "
        f"maps you with: stratagem console-user NAME --slack {user}"
    )


async def submitted(
    console: ConsoleState, payload: dict[str, Any], view: dict[str, Any], later: BackgroundTasks
) -> Response:
    """The reason dialog's submission: errors shown in the dialog, or closed and the rejection taken after."""
    who = _person(console, payload)
    if who is None:
        return JSONResponse({"response_action": "errors", "errors": {REASON_BLOCK: _unmapped(payload)}})
    try:
        private = json.loads(str(view.get("private_metadata") or ""))
        button = Button.decode(str(private["button"]))
        response_url = str(private["response_url"])
        reason = str(view["state"]["values"][REASON_BLOCK][REASON_ACTION]["value"] or "").strip()
    except (ValueError, KeyError, TypeError):
        return JSONResponse({"detail": "the dialog's submission is not one this console opened"}, 400)
    if button is None:
        return JSONResponse({"detail": "the dialog's submission is not one this console opened"}, 400)
    if not reason:
        return JSONResponse({"response_action": "errors", "errors": {REASON_BLOCK: "Say why: the run is told."}})
    later.add_task(Click(console, payload, response_url).reject, who, button, reason)
    return Response(status_code=200)


class Click:
    """One interaction, taken after Slack had its answer: it replies through `response_url`."""

    def __init__(self, console: ConsoleState, payload: dict[str, Any], response_url: str | None = None) -> None:
        self.console = console
        self.payload = payload
        self.response_url = response_url or str(payload.get("response_url") or "")

    async def take(self, action: dict[str, Any]) -> None:
        try:
            await self._take(action)
        except Exception:  # a background task's error reaches no one: log it, tell the clicker
            log.exception("a Slack interaction failed")
            await self.reply(ephemeral("The console could not take this decision; decide in the console."))

    async def _take(self, action: dict[str, Any]) -> None:
        who = _person(self.console, self.payload)
        if who is None:
            await self.reply(ephemeral(_unmapped(self.payload)))
            return
        button = Button.decode(str(action.get("value") or ""))
        if button is None:
            await self.reply(ephemeral("This button is not one of this console's; nothing was decided."))
            return
        pending = await self.waiting(button)
        if isinstance(pending, str):
            await self.reply(ephemeral(pending))
            return
        if action.get("action_id") == APPROVE_ACTION:
            await self.approve(who, button, pending)
            return
        trigger = str(self.payload.get("trigger_id") or "")
        view = reason_dialog(button, waiting_for(pending), self.response_url)
        slack = self.console.slack
        if slack is None or slack.bot_token is None:
            await self.reject(who, button, REJECTED_REASON)  # no dialog to ask the reason in
            return
        if view is None or not trigger:
            await self.reply(ephemeral("The reason dialog cannot be opened for this; reject in the console."))
            return
        problem = await slack.open_view(trigger, view.to_dict())
        if problem is not None:
            await self.reply(ephemeral(f"The reason dialog did not open ({problem}); nothing was decided."))

    async def waiting(self, button: Button) -> PendingDecision | str:
        """The decision `button` was made for, if the run still waits on it as the message showed
        it; else what to tell the clicker."""
        if button.kind not in BUTTON_KINDS:  # made by no notification: their waits need the console's forms
            return "This is decided in the console, not from Slack; nothing was decided."
        run = self.console.run(button.run)
        try:
            status = await run.status()
        except StratagemError as exc:
            return f"Nothing was decided: {exc}"
        except RPCError as exc:
            return f"Nothing was decided: run {button.run[:200]} could not be read ({exc.message[:200]})."
        for pending in status.pending:
            if (pending.kind.value, pending.step_id, pending.revision) != (button.kind, button.step, button.rev):
                continue
            if not _same_wait(button, pending):
                continue
            if button.shown is not None:
                lines = pending.preview.lines() if pending.preview is not None else []
                if shown_digest(lines) != button.shown:
                    return (
                        "What this step will run changed since this message was sent, so nothing was decided: "
                        "read it again in the console."
                    )
            return pending
        return "This was already decided, or no longer waits (see the run in the console); nothing was decided."

    async def approve(self, who: str, button: Button, pending: PendingDecision) -> None:
        if pending.kind is DecisionKind.plan_approval:
            decision = ApproveInput(by=who, revision=button.rev, comment=APPROVED_COMMENT)
        else:
            digest = pending.preview.digest if pending.preview is not None else None
            decision = ApproveInput(by=who, step_id=button.step, digest=digest, comment=APPROVED_COMMENT)
        await self._decide(who, button, pending, "Approved", kinds.APPROVE, decision)

    async def reject(self, who: str, button: Button, reason: str) -> None:
        try:
            pending = await self.waiting(button)
            if isinstance(pending, str):
                await self.reply(ephemeral(pending))
                return
            plan = pending.kind is DecisionKind.plan_approval
            rejection = RejectInput(
                by=who, reason=reason, revision=button.rev if plan else None, step_id=None if plan else button.step
            )
            await self._decide(who, button, pending, "Rejected", kinds.REJECT, rejection, reason)
        except Exception:
            log.exception("a Slack rejection failed")
            await self.reply(ephemeral("The console could not take this rejection; decide in the console."))

    async def _decide(
        self,
        who: str,
        button: Button,
        pending: PendingDecision,
        verdict: str,
        kind: kinds.Kind,
        decision: ApproveInput | RejectInput,
        reason: str = "",
    ) -> None:
        try:
            outcome = await decide(self.console.run(button.run), kind, decision)
        except HTTPException as exc:
            await self.reply(ephemeral(f"The run refused it, so nothing was decided: {exc.detail}"))
            return
        waiting = waiting_for(pending)
        link = NotifyConfig.from_env().link(button.run)
        message = decided(
            verdict=verdict,
            who=who,
            waiting=waiting,
            run_id=button.run,
            outcome=str(outcome.get("message") or ""),
            link=link,
            reason=reason,
        )
        if verdict == "Approved" and isinstance(await self.waiting(button), PendingDecision):
            # Short of its quorum: the buttons stay for the next approver; the channel is told.
            message = {**message, "replace_original": False, "response_type": "in_channel"}
        await self.reply(message)

    async def reply(self, body: dict[str, Any]) -> None:
        """Post to the message's response_url (given by Slack in the signed payload): a failure is
        logged, the decision (if any) stands."""
        url = self.response_url
        if urlsplit(url).scheme not in ("https", "http"):
            log.warning("a Slack interaction came without a response_url; its answer is not sent")
            return
        try:
            async with httpx.AsyncClient(timeout=RESPONSE_TIMEOUT, follow_redirects=False) as http:
                response = await http.post(url, json=body)
                response.raise_for_status()
        except httpx.HTTPError as exc:
            log.warning("could not answer Slack at its response_url: %s", exc)


def _same_wait(button: Button, pending: PendingDecision) -> bool:
    """Whether the notification key the button carries is this pending decision's: the same run
    and the same wait from the same start (an escalation of it still is)."""
    base = pending_key(pending.model_copy(update={"escalated_to": None}))
    key = button.key
    return key.startswith(f"{button.run}/") and (key.endswith(f"/{base}") or f"/{base}/escalated:" in key)


__all__ = ["INTERACTIONS", "router"]
