"""The confirmation page an approval e-mail links to (the link: stratagem.io.email_links).

`GET /email/<token>` shows the decision the link is about (what waits, what a gated step will
run, every value) with Approve and Reject, and never decides: mail scanners and link previews
open every link in a message. `POST /email/<token>` decides, as

- the person the link names, when the console signs people in from its users file and that file
  still names them: the link, sent to their address alone, is their sign-in for this one decision;
- otherwise whoever the console's auth mode says is asking (signed in, the proxy's user, the
  local user); nobody signed in is sent to sign in first.

The post carries a CSRF token bound to the link and the person (and the Host and Origin rules of
stratagem.console.guard hold, as for every change). A link works once: its id is recorded in the
console's output store when its decision is taken, so a second use, in this console or another
sharing the store, after a restart too, answers that it was used and changes nothing; a decision
already taken by anyone answers so too. An expired or altered link shows a page saying so,
before anything is read. The decision goes to the run as the console's own forms send theirs:
as that person, signed with the console's issuer key, checked by the run's validators.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import time
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import HTMLResponse, Response
from itsdangerous import Signer as ItsSigner

from stratagem.console.access import person
from stratagem.console.decisions import decide
from stratagem.console.identity import AuthMode
from stratagem.console.state import Console, ConsoleState
from stratagem.domain.decisions import kinds, pending_key, waiting_for
from stratagem.domain.ledger import Ledger
from stratagem.domain.plan import Plan
from stratagem.domain.run_types import ApproveInput, DecisionInput, DecisionKind, PendingDecision, RejectInput
from stratagem.io.email_links import EmailLink, pending_key_base, read_link
from stratagem.io.store import StoreError, default_store

router = APIRouter()
log = logging.getLogger(__name__)

CSRF_SALT = "stratagem.console.email-link-csrf"
USED = "email-links/used/{}.json"
APPROVABLE = (DecisionKind.plan_approval, DecisionKind.step_approval, DecisionKind.tool_call_approval)
NO_STORE = {"Cache-Control": "no-store"}
DONE = {kinds.APPROVE.name: "Approved", kinds.REJECT.name: "Rejected"}


class Closed(Exception):
    """The link cannot decide anything (altered, expired, used, its decision gone): a page saying why."""

    def __init__(self, title: str, detail: str, status: int, run_id: str | None = None) -> None:
        super().__init__(title)
        self.title, self.detail, self.status, self.run_id = title, detail, status, run_id


def valid_link(console: ConsoleState, token: str, now: float | None = None) -> EmailLink:
    link = read_link(console.identity.secret, token)
    if link is None:
        raise Closed(
            "This link is not valid",
            "It was altered, or it is not a link from a Stratagem e-mail. Nothing was decided.",
            400,
        )
    if link.expired(now):
        until = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(link.expires))
        raise Closed("This link has expired", f"It worked until {until}. Nothing was decided.", 410, link.run_id)
    return link


async def deciding_person(request: Request, console: ConsoleState, link: EmailLink) -> tuple[str, bool]:
    """Who the page acts for, and whether the link said so (NotSignedIn when nobody is known)."""
    identity = console.identity
    if identity.mode is AuthMode.users and link.person and identity.users.session_key(link.person) is not None:
        return link.person, True
    return await person(request, console), False


def form_token(console: ConsoleState, link: EmailLink, who: str) -> str:
    """The page's CSRF token: bound to the link, the person and their current sessions."""
    identity = console.identity
    signer = ItsSigner(identity.secret, salt=CSRF_SALT, digest_method=hashlib.sha256, key_derivation="hmac")
    return signer.get_signature(f"{link.link_id}:{who}:{identity.csrf_token(who)}").decode()


async def used(console: ConsoleState, link: EmailLink) -> bool:
    store = console.store or default_store()
    try:
        await asyncio.to_thread(store.get, f"store:{USED.format(link.link_id)}")
    except StoreError:
        return False
    return True


async def waiting(console: ConsoleState, link: EmailLink) -> tuple[PendingDecision | None, Any, Ledger]:
    """The decision the link names, if the run still waits on it, with the run's status and ledger."""
    _, status, ledger = await console.read(link.run_id)
    found = next((p for p in status.pending if pending_key_base(pending_key(p)) == link.decision), None)
    return found, status, ledger


def gone(link: EmailLink, status: Any, ledger: Ledger) -> Closed:
    """What happened to a decision that no longer waits: the last decision on it, if the ledger has one."""
    step = link.decision.split("/")[1:2]
    step_id = None if not step or step[0] == "-" else step[0]
    last = next((d for d in reversed(ledger.decisions) if d.step_id == step_id), None)
    said = f" The last decision on it: {last.action.value} by {last.by}." if last is not None else ""
    return Closed(
        "This decision is no longer waiting",
        f"It was taken, or the run moved on (it is now {status.phase.value}).{said} This link changed nothing.",
        410,
        link.run_id,
    )


def plan_lines(plan: Plan | None) -> list[str]:
    if plan is None:
        return []
    return [
        f"{s.id}: {s.title} · "
        + (
            f"{s.tool}({', '.join(f'{k}={json.dumps(v, ensure_ascii=False)}' for k, v in s.args.items())})"
            if s.tool
            else s.kind.value
        )
        for s in plan.steps
    ]


def page(request: Request, console: ConsoleState, context: dict[str, Any], status_code: int = 200) -> Response:
    context = {"who": None, "csrf": "", **context}  # base.html's sign-out form: not on this page
    response = console.templates.TemplateResponse(request, "email.html", context, status_code=status_code)
    response.headers.update(NO_STORE)
    return response


async def show(
    request: Request,
    console: ConsoleState,
    token: str,
    link: EmailLink,
    who: str,
    by_link: bool,
    *,
    error: str = "",
    status_code: int = 200,
) -> Response:
    pending, status, ledger = await waiting(console, link)
    if pending is None:
        raise gone(link, status, ledger)
    plan = ledger.revisions[-1] if ledger.revisions else None
    context = {
        "token": token,
        "person": who,
        "by_link": by_link,
        "status": status,
        "p": pending,
        "what": waiting_for(pending),
        "preview": pending.preview.lines() if pending.preview is not None else [],
        "plan": plan_lines(plan) if pending.kind is DecisionKind.plan_approval else [],
        "approvable": pending.kind in APPROVABLE,
        "form_csrf": form_token(console, link, who),
        "error": error,
    }
    return page(request, console, context, status_code)


def closed_page(request: Request, console: ConsoleState, closed: Closed) -> Response:
    context = {"closed": closed.title, "detail": closed.detail, "run_id": closed.run_id}
    return page(request, console, context, closed.status)


@router.get("/email/{token}", response_class=HTMLResponse, include_in_schema=False)
async def confirmation(request: Request, console: Console, token: str) -> Response:
    try:
        link = valid_link(console, token)
        if await used(console, link):
            raise Closed("This link was already used", "It works once. Nothing was changed.", 410, link.run_id)
        who, by_link = await deciding_person(request, console, link)
        return await show(request, console, token, link, who, by_link)
    except Closed as closed:
        return closed_page(request, console, closed)


def decision_of(pending: PendingDecision, who: str, form: dict[str, Any]) -> tuple[kinds.Kind, DecisionInput]:
    call = pending.call.call_id if pending.call is not None else None
    comment = str(form.get("comment", ""))[:4000]
    if form.get("verdict") == "reject":
        reason = comment.strip() or "rejected from an e-mail link"
        rejection = RejectInput(by=who, reason=reason, revision=pending.revision, step_id=pending.step_id, call_id=call)
        return kinds.REJECT, rejection
    # The digest of what the page showed: the run refuses the approval if what waits differs by now.
    digest = str(form.get("digest") or "")[:64] or None
    approval = ApproveInput(
        by=who, revision=pending.revision, step_id=pending.step_id, call_id=call, digest=digest, comment=comment
    )
    return kinds.APPROVE, approval


@router.post("/email/{token}", include_in_schema=False)
async def confirm(request: Request, console: Console, token: str) -> Response:
    try:
        link = valid_link(console, token)
        claims: set[str] = request.app.state.__dict__.setdefault("email_claims", set())
        if link.link_id in claims or await used(console, link):
            raise Closed("This link was already used", "It works once. Nothing was changed.", 410, link.run_id)
        who, by_link = await deciding_person(request, console, link)
        form = dict(await request.form())
        if not hmac.compare_digest(str(form.get("csrf") or "").encode(), form_token(console, link, who).encode()):
            raise Closed(
                "This form was refused",
                "Its CSRF token is missing or wrong: open the link from the e-mail again. Nothing was decided.",
                403,
                link.run_id,
            )
        # One decision per link at a time in this console (no await since the check above);
        # the store keeps it used for good once its decision is taken.
        if link.link_id in claims:
            raise Closed("This link was already used", "It works once. Nothing was changed.", 410, link.run_id)
        claims.add(link.link_id)
        try:
            return await take(request, console, token, link, who, by_link, form)
        finally:
            claims.discard(link.link_id)
    except Closed as closed:
        return closed_page(request, console, closed)


async def take(
    request: Request, console: ConsoleState, token: str, link: EmailLink, who: str, by_link: bool, form: dict[str, Any]
) -> Response:
    pending, status, ledger = await waiting(console, link)
    if pending is None:
        raise gone(link, status, ledger)
    if pending.kind not in APPROVABLE:
        raise Closed(
            "Decide this on the run's page", f"{waiting_for(pending)} is not decided from an e-mail.", 400, link.run_id
        )
    kind, decision = decision_of(pending, who, form)
    try:
        outcome = await decide(console.run(link.run_id), kind, decision)
    except HTTPException as exc:  # refused by the run (409) or nobody serves it (503): the link still works
        return await show(
            request, console, token, link, who, by_link, error=str(exc.detail), status_code=exc.status_code
        )
    record = {"run_id": link.run_id, "decision": link.decision, "by": who, "verdict": kind.name, "at": time.time()}
    store = console.store or default_store()
    try:
        await asyncio.to_thread(store.put, USED.format(link.link_id), json.dumps(record).encode())
    except StoreError as exc:  # taken all the same: its decision no longer waits, which the link says from now on
        log.warning("e-mail link %s decided, but not recorded as used: %s", link.link_id, exc)
    said = f"{waiting_for(pending)} of run {link.run_id}: {outcome['message']}. The run's ledger records it as {who}'s."
    context = {"closed": f"{DONE[kind.name]} as {who}", "detail": said, "run_id": link.run_id}
    return page(request, console, context)


__all__ = ["router"]
