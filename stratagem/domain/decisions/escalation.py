"""Escalation (level 9): a plan approval, a gated step's approval or a human step's answer that
nobody gave within `escalate_after_seconds` goes to the approver group `escalate_to` names. Its
members are told (a notification naming them) and may decide it on top of whoever could before,
also on a step that names its own approvers. If `escalation_timeout_seconds` then passes
undecided, the run rejects what waited or stops (`on_escalation_timeout`).

The deadlines count from the pending decision's `since` and `escalated_at`, which the state
carries, so a continue-as-new keeps them; the workflow waits on them (workflows/escalation.py).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import NamedTuple

from stratagem.domain.decision_inputs import PlanTarget, StepTarget
from stratagem.domain.decisions.common import pending_for
from stratagem.domain.ledger import EventKind
from stratagem.domain.ledger_events import DecisionEscalated, EscalationExpired
from stratagem.domain.run_levels import Change, reached
from stratagem.domain.run_types import (
    ApproveInput,
    DecisionKind,
    EscalationTimeoutAction,
    PendingDecision,
    RejectInput,
    RunState,
)

ESCALATES = (DecisionKind.plan_approval, DecisionKind.step_approval, DecisionKind.human_answer)
"""What escalates: a review and a person's answer. A tool call's approval, a budget or a repair waits on."""

ACTOR = "escalation"
"""Who a decision the run takes at an escalation's deadline is recorded as."""


class Deadline(NamedTuple):
    at: datetime
    then: EscalationTimeoutAction | None
    """None: escalate at `at`; else what to do at `at`, the escalation's own deadline."""


def deadline(state: RunState, pending: PendingDecision | None) -> Deadline | None:
    """The next deadline of a pending decision, if it has one."""
    options = state.options
    after, group = options.escalate_after_seconds, options.escalate_to
    if pending is None or pending.kind not in ESCALATES or after is None or group is None:
        return None
    if not reached(state, Change.ESCALATION_GROUPS):
        return None
    if pending.escalated_to is None:
        return Deadline(pending.since + timedelta(seconds=after), None)
    if options.escalation_timeout_seconds is None:
        return None
    since = pending.escalated_at or pending.since
    return Deadline(since + timedelta(seconds=options.escalation_timeout_seconds), options.on_escalation_timeout)


def people(state: RunState, pending: PendingDecision) -> list[str]:
    """Who an escalated decision went to (nobody, if it did not)."""
    if pending.escalated_to is None:
        return []
    return list(state.options.approver_groups.get(pending.escalated_to, []))


def escalate(state: RunState, pending: PendingDecision, now: datetime) -> None:
    """Hand a decision to the escalation group: recorded, and shown wherever the decision is."""
    group = state.options.escalate_to
    assert group is not None and state.options.escalate_after_seconds is not None
    pending.escalated, pending.escalated_to, pending.escalated_at = True, group, now
    who = people(state, pending)
    state.ledger.record(
        EventKind.decision_escalated,
        now,
        revision=pending.revision,
        step_id=pending.step_id,
        message=f"no decision within {state.options.escalate_after_seconds:g} s: escalated to {group} "
        f"({', '.join(who)}), who may now decide",
        data=DecisionEscalated(kind=pending.kind.value, group=group, people=who),
    )


def expire(state: RunState, pending: PendingDecision, now: datetime) -> str:
    """Record that an escalated decision's own deadline passed; returns the reason the run gives."""
    then = state.options.on_escalation_timeout
    group = pending.escalated_to or ""
    what = f"step '{pending.step_id}'" if pending.step_id else f"revision {pending.revision}"
    reason = (
        f"no decision on {what} within {state.options.escalation_timeout_seconds:g} s of its escalation to "
        f"{group}: {'rejected' if then is EscalationTimeoutAction.reject else 'the run is stopped'}"
    )
    state.ledger.record(
        EventKind.escalation_expired,
        now,
        revision=pending.revision,
        step_id=pending.step_id,
        actor=ACTOR,
        message=reason,
        data=EscalationExpired(kind=pending.kind.value, group=group, then=then.value),
    )
    return reason


def may_decide(state: RunState, by: str, kind: DecisionKind, step_id: str | None) -> bool:
    """Whether `by` may decide what waits because it was escalated to their group: on top of the
    run's approver list and a step's own approvers, which then do not apply to them."""
    pending = pending_for(state, kind, step_id)
    return pending is not None and by in people(state, pending) and reached(state, Change.ESCALATION_GROUPS)


def may_approve(state: RunState, decision: ApproveInput | RejectInput) -> bool:
    """`may_decide` for an approval or a rejection of a plan or a gated step (a tool call does not escalate)."""
    match decision.target:
        case PlanTarget():
            return may_decide(state, decision.by, DecisionKind.plan_approval, None)
        case StepTarget(step_id):
            return may_decide(state, decision.by, DecisionKind.step_approval, step_id)
    return False


def carry(before: list[PendingDecision], into: PendingDecision) -> None:
    """A revision asks for its approval anew: an escalation of the one before stays with it (the
    group may go on deciding; its own deadline is unchanged)."""
    earlier = next((p for p in before if p.kind is DecisionKind.plan_approval and p.escalated_to), None)
    if earlier is not None:
        into.escalated_to, into.escalated_at = earlier.escalated_to, earlier.escalated_at
