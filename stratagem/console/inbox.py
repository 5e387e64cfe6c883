"""The inbox: every run waiting for a person, a page at a time, as a page and over the API; and
approving many of them at once, each with its own decision.

The runs come from visibility alone (stratagem.inbox, which `stratagem list --status
awaiting-approval` reads too): a page costs the same with ten runs waiting or ten thousand.
"""

from __future__ import annotations

import asyncio
import json
import time
from datetime import timedelta
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, Response

from stratagem import inbox
from stratagem.client import REGISTER_STATUS_HINT, has_status_attribute
from stratagem.console.access import CheckedForm, Person, person
from stratagem.console.decisions import decide
from stratagem.console.state import Console
from stratagem.domain.decisions import kinds
from stratagem.domain.decisions.listed import APPROVABLE
from stratagem.domain.run_types import STATUS_SEARCH_ATTRIBUTE, ApproveInput, DecisionKind

BULK_MAX = 200  # approvals one post may carry: each is a decision sent to its run
BULK_AT_ONCE = 8  # sent at once, so a large selection neither waits in line nor floods the server
BULK_COMMENT = "approved from the inbox"
# A run approved a moment ago keeps its memo until its next workflow task (once its first steps
# end): the page leaves out for this long the waits this console approved, without asking the run.
RECENT_SECONDS = 600.0

router = APIRouter()


async def _filter(who: str, kind: list[str] | None, can_decide: bool, older_than: float | None) -> inbox.Filter:
    try:
        return inbox.Filter.of(
            kind or (), who if can_decide else None, timedelta(seconds=older_than) if older_than else None
        )
    except inbox.InboxError as exc:
        raise HTTPException(400, str(exc)) from None


async def _page(console: Console, who: str, chosen: inbox.Filter, cursor: str | None, limit: int) -> inbox.Page:
    """A page of the inbox: 400 for a cursor it did not give, 503 where visibility cannot answer."""
    if not await has_status_attribute(console.client):
        namespace = console.client.namespace
        raise HTTPException(
            503,
            f"the inbox needs the {STATUS_SEARCH_ATTRIBUTE} search attribute in namespace {namespace}; register it "
            f"with `{REGISTER_STATUS_HINT} --namespace {namespace}` (runs started afterwards appear)",
        )
    try:
        return await inbox.page(console.client, chosen=chosen, cursor=cursor, limit=limit, who=who)
    except inbox.InboxError as exc:
        raise HTTPException(400, str(exc)) from None


Kinds = Annotated[list[str] | None, Query(description="only runs waiting for one of these kinds (repeatable)")]
Limit = Annotated[int, Query(ge=1, le=inbox.MAX_LIMIT, description="runs on a page")]
Cursor = Annotated[str | None, Query(max_length=20000, description="the `next` of the page before")]
CanDecide = Annotated[bool, Query(description="only runs the signed-in person may decide")]
OlderThan = Annotated[float | None, Query(ge=0, description="only runs waiting longer than this, in seconds")]


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
async def inbox_page(
    request: Request,
    who: Person,
    console: Console,
    cursor: Cursor = None,
    limit: Limit = inbox.DEFAULT_LIMIT,
    kind: Kinds = None,
    can_decide: CanDecide = False,
    older_than_minutes: Annotated[str, Query(max_length=40)] = "",
) -> Response:
    # The page's own form sends an empty box as "": that is no age.
    return await render_inbox(request, console, who, cursor, limit, kind, can_decide, _minutes(older_than_minutes))


def _minutes(text: str) -> float | None:
    """A form's "waiting longer than (minutes)", in seconds; None for an empty box or not a number."""
    try:
        minutes = float(text)
    except ValueError:
        return None
    return minutes * 60 if minutes > 0 and minutes < 1e9 else None


async def render_inbox(
    request: Request,
    console: Console,
    who: str,
    cursor: str | None,
    limit: int,
    kind: list[str] | None,
    can_decide: bool,
    older_than: float | None,
    outcomes: list[dict[str, Any]] | None = None,
    status_code: int = 200,
) -> Response:
    problem, found = "", inbox.Page([], None, 0)
    try:
        found = await _page(console, who, await _filter(who, kind, can_decide, older_than), cursor, limit)
    except HTTPException as exc:
        problem, status_code = str(exc.detail), exc.status_code
    # The filters as the page's links repeat them (the cursor goes on only with its own filter).
    kept: dict[str, Any] = {"limit": limit, "kind": kind or [], "can_decide": "true" if can_decide else ""}
    if older_than:
        kept["older_than_minutes"] = f"{older_than / 60:g}"
    recent = _recent(request)
    rows = [row for row in found.runs if not _approved_here(recent, row)]
    context = {
        "who": who,
        "csrf": console.identity.csrf_token(who),
        "rows": [_shown(row) for row in rows],
        "hidden": len(found.runs) - len(rows),
        "total": found.total,
        "next": found.next,
        "first": cursor is not None,
        "kept": kept,
        "query": urlencode({k: v for k, v in kept.items() if v}, doseq=True),
        "kinds": _KINDS,
        "problem": problem,
        "outcomes": outcomes,
    }
    return console.templates.TemplateResponse(request, "inbox.html", context, status_code=status_code)


def _recent(request: Request) -> dict[tuple[Any, ...], float]:
    """The waits this console approved lately (key: run, step, revision), with when."""
    state = request.app.state
    if not hasattr(state, "inbox_approved"):
        state.inbox_approved = {}
    recent: dict[tuple[Any, ...], float] = state.inbox_approved
    now = time.monotonic()
    for key in [k for k, at in recent.items() if now - at > RECENT_SECONDS]:
        del recent[key]
    return recent


def _approved_here(recent: dict[tuple[Any, ...], float], row: dict[str, Any]) -> bool:
    waits = row["waiting"]
    return bool(waits) and all((row["run_id"], w.get("step_id"), w.get("revision")) in recent for w in waits)


_KINDS = tuple(kind.value for kind in DecisionKind)  # every wait, an in-doubt step's among them


def _shown(row: dict[str, Any]) -> dict[str, Any]:
    """A row as the page shows it: each wait with its words, and, where it may be approved from
    here, the checkbox's value: exactly what the approval is bound to."""
    waits = []
    may = row.get("may_decide") or [True] * len(row["waiting"])
    for i, wait in enumerate(row["waiting"]):
        pick = None
        if wait.get("kind") in APPROVABLE and may[i]:
            bound = {"run_id": row["run_id"], "step_id": wait.get("step_id"), "revision": wait.get("revision")}
            if wait.get("digest"):
                bound["digest"] = wait["digest"]
            pick = json.dumps(bound, separators=(",", ":"))
        waits.append({"words": row["waiting_for"][i], "pick": pick, "digest": wait.get("digest")})
    return {**row, "waits": waits}


@router.get("/api/inbox", tags=["runs"])
async def api_inbox(
    console: Console,
    who: Annotated[str, Depends(person)],
    cursor: Cursor = None,
    limit: Limit = inbox.DEFAULT_LIMIT,
    kind: Kinds = None,
    can_decide: CanDecide = False,
    older_than: OlderThan = None,
) -> dict[str, Any]:
    """Runs waiting for a person, a page at a time: `{"runs": [...], "next": cursor or null, "total": N}`.
    Pass `next` back as `cursor`, with the same filters, for the page after. `total` counts every
    run waiting (started before `older_than`, if given); `kind` and `can_decide` narrow each page,
    which may then hold fewer than `limit` runs while `next` goes on."""
    found = await _page(console, who, await _filter(who, kind, can_decide, older_than), cursor, limit)
    return found.as_json()


# ------------------------------------------------------------------ approving many at once


def _picked(value: str) -> tuple[str, ApproveInput] | None:
    """A checkbox's value: the run and what its approval is bound to (None: not one the page gave)."""
    try:
        bound = json.loads(value)
        run_id = bound["run_id"]
        step_id, revision, digest = bound.get("step_id"), bound.get("revision"), bound.get("digest")
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    if not isinstance(run_id, str) or not run_id or not isinstance(revision, int) or isinstance(revision, bool):
        return None
    if step_id is not None and not isinstance(step_id, str) or digest is not None and not isinstance(digest, str):
        return None
    if digest is not None and len(digest) > 64:
        return None
    # `by` is a placeholder: each approval is made out to the signed-in person below.
    return run_id, ApproveInput(by="-", revision=revision, step_id=step_id, digest=digest, comment=BULK_COMMENT)


async def approve_many(console: Console, who: str, picks: list[str], comment: str) -> list[dict[str, Any]]:
    """Each picked wait approved as `who`, with its own decision (signed as the console signs),
    bound to the revision and digest the page showed: one outcome per pick, approved or refused
    with the run's one-line reason. A refusal is that run's alone."""
    gate = asyncio.Semaphore(BULK_AT_ONCE)

    async def one(value: str) -> dict[str, Any]:
        picked = _picked(value)
        if picked is None:
            return {"run_id": "?", "what": "", "outcome": "refused", "message": "not a selection the inbox gave"}
        run_id, approval = picked
        approval = approval.model_copy(update={"by": who, "comment": comment or BULK_COMMENT})
        what = f"step {approval.step_id}" if approval.step_id else f"revision {approval.revision}"
        async with gate:
            try:
                taken = await decide(console.run(run_id), kinds.APPROVE, approval)
            except HTTPException as exc:
                return {"run_id": run_id, "what": what, "outcome": "refused", "message": str(exc.detail)}
            except Exception as exc:  # a run id that is not one, a server that went away: that run's problem
                return {"run_id": run_id, "what": what, "outcome": "refused", "message": str(exc).splitlines()[0]}
        bound = {"step_id": approval.step_id, "revision": approval.revision}
        return {"run_id": run_id, "what": what, "outcome": "approved", "message": taken["message"], **bound}

    return list(await asyncio.gather(*(one(value) for value in picks)))


@router.post("/inbox/approve", response_class=HTMLResponse, include_in_schema=False)
async def approve_form(request: Request, post: CheckedForm, console: Console) -> Response:
    """The inbox's "Approve selected": the page again (its first page, same filters), with each outcome."""
    form = await request.form()  # read once already (CheckedForm); the checkboxes are a list
    picks = [str(value) for value in form.getlist("pick")]
    if len(picks) > BULK_MAX:
        raise HTTPException(400, f"select at most {BULK_MAX} runs at once")
    outcomes = await approve_many(console, post.who, picks, str(post.form.get("comment") or ""))
    recent = _recent(request)
    for outcome in outcomes:
        if outcome["outcome"] == "approved":
            recent[(outcome["run_id"], outcome["step_id"], outcome["revision"])] = time.monotonic()
    kind = [str(k) for k in form.getlist("kind")] or None
    can_decide = post.form.get("can_decide") == "true"
    older_than = _minutes(str(post.form.get("older_than_minutes") or ""))
    limit = int(str(post.form.get("limit"))) if str(post.form.get("limit") or "").isdigit() else inbox.DEFAULT_LIMIT
    limit = max(1, min(limit, inbox.MAX_LIMIT))
    return await render_inbox(request, console, post.who, None, limit, kind, can_decide, older_than, outcomes)


__all__ = ["approve_many", "router"]
