"""What a run lists of each wait in its memo (`waiting`), for the approval inbox: enough to show
it, filter it and approve it from a listing, with no query to the run.

An entry has always held `kind`, `step_id`, `revision` and `since`, and the run rewrites the memo
when those change (`IDENTITY`: the same moments as ever, so histories replay as they were). It
now also holds, as of that write: `call_id` and `digest` (what an approval is bound to), and who
may decide it: `deciders` (None: anyone), `barred` (four eyes) and `escalates` (the group a
deadline hands it to, and when). What changes between writes (an approval counted towards a
quorum) is not in it: the run itself refuses a decision it may not take. A memo written before
these keys reads as "anyone may decide", and the run, again, decides.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from stratagem.domain.decisions import escalation
from stratagem.domain.decisions.common import step_of
from stratagem.domain.decisions.kinds import waiting_for
from stratagem.domain.quorum import deciders, person
from stratagem.domain.run_levels import Change, reached
from stratagem.domain.run_types import DecisionKind, PendingDecision, RunState

IDENTITY = ("kind", "step_id", "revision", "since")
"""The keys whose change rewrites the memo (all an entry held before the others were added)."""

APPROVABLE = (DecisionKind.plan_approval.value, DecisionKind.step_approval.value)
"""What an inbox may approve in bulk: a revision, bound to its number, and a gated step, bound to
its revision and the digest of what it will run. A tool call is approved having seen its
arguments, on the run's page."""


def entries(state: RunState) -> list[dict[str, Any]]:
    """The memo's `waiting`: one entry per pending decision."""
    return [entry(state, pending) for pending in state.pending]


def entry(state: RunState, pending: PendingDecision) -> dict[str, Any]:
    listed: dict[str, Any] = {
        "kind": pending.kind.value,
        "step_id": pending.step_id,
        "revision": pending.revision,
        "since": pending.since.isoformat(),
    }
    if pending.call is not None:
        listed["call_id"] = pending.call.call_id
        listed["digest"] = pending.call.digest or None
    elif pending.preview is not None:
        listed["digest"] = pending.preview.digest
    listed["deciders"] = _deciders(state, pending)
    if pending.barred:
        listed["barred"] = sorted(pending.barred)
    if escalates := _escalates(state, pending):
        listed["escalates"] = escalates
    return listed


def identity(entries: list[dict[str, Any]] | None) -> list[tuple[Any, ...]] | None:
    """What of the entries decides whether the memo is rewritten."""
    if entries is None:
        return None
    return [tuple(e.get(key) for key in IDENTITY) for e in entries if isinstance(e, dict)]


def _deciders(state: RunState, pending: PendingDecision) -> list[str] | None:
    """Who may decide it as the rules stand now (escalation aside): None for anyone."""
    if pending.may_approve is not None:
        return list(pending.may_approve)  # a quorum's or four eyes' own list
    options = state.options
    step = step_of(state, pending.step_id) if pending.step_id is not None else None
    named = step.approvers if step is not None else []
    match pending.kind:
        case DecisionKind.step_approval | DecisionKind.tool_call_approval:
            return deciders(named, options.approvers, options.approver_groups)
        case DecisionKind.human_answer:
            if named:
                return deciders(named, options.approvers, options.approver_groups)
            return list(options.approvers) if options.approvers is not None and _answers_listed(state) else None
    return list(options.approvers) if options.approvers is not None else None


def _answers_listed(state: RunState) -> bool:
    return reached(state, Change.ANSWERS_BY_APPROVERS)


def _escalates(state: RunState, pending: PendingDecision) -> dict[str, Any] | None:
    """The group an escalation hands it to (its people) and from when: past or still ahead."""
    if pending.escalated_to is not None:
        at = pending.escalated_at or pending.since
        return {"at": at.isoformat(), "people": escalation.people(state, pending)}
    due = escalation.deadline(state, pending)
    group = state.options.escalate_to
    if due is None or due.then is not None or group is None:
        return None
    return {"at": due.at.isoformat(), "people": list(state.options.approver_groups.get(group, []))}


def may_decide(listed: dict[str, Any], who: str, now: datetime) -> bool:
    """Whether `who` may decide a listed wait, as far as the listing tells: the run has the last word."""
    escalates = listed.get("escalates")
    if isinstance(escalates, dict) and who in (escalates.get("people") or []):
        at = _moment(escalates.get("at"))
        if at is not None and at <= now:
            return True  # escalated to their group: the lists do not apply to them
    barred = listed.get("barred") or []
    if any(person(who) == person(str(name)) for name in barred):
        return False
    allowed = listed.get("deciders")
    return allowed is None or who in allowed


def waited(listed: dict[str, Any], now: datetime) -> timedelta | None:
    since = _moment(listed.get("since"))
    return now - since if since is not None else None


def _moment(text: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(str(text)) if text else None
    except ValueError:
        return None


def words(listed: dict[str, Any]) -> str:
    """What a listed wait waits for, in the words the console and notifications use."""
    kind, step = listed.get("kind"), listed.get("step_id")
    try:
        known = DecisionKind(str(kind))
    except ValueError:
        return str(kind)
    if known is DecisionKind.tool_call_approval:
        return f"approval of a tool call by step {step}"  # the tool's name is on the run's page
    revision = listed.get("revision")
    since = _moment(listed.get("since")) or datetime.min
    number = revision if isinstance(revision, int) else 0
    pending = PendingDecision(kind=known, revision=number, since=since, step_id=str(step) if step else None)
    return waiting_for(pending)
