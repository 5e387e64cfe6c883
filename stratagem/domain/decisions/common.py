"""What every decision kind shares: whether a run takes decisions at all, from whom, about which
revision; what it waits for; and how a decision is recorded and answered.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from stratagem.common.errors import DecisionRefusedError
from stratagem.domain.ledger import Decision, DecisionAction
from stratagem.domain.plan import PlanDraft, Step
from stratagem.domain.run_types import DecisionInput, DecisionKind, DecisionOutcome, PendingDecision, RunState


def check_open(state: RunState) -> None:
    if state.phase.finished:
        raise DecisionRefusedError(f"run {state.run_id} has finished ({state.phase.value}); it takes no decisions")


def check_revision(state: RunState, revision: int | None) -> None:
    current = state.plan.revision if state.plan else None
    if revision is not None and revision != current:
        if current is None:
            raise DecisionRefusedError(f"there is no revision {revision} yet: the plan is still being made")
        if revision > current:
            raise DecisionRefusedError(f"there is no revision {revision}: the current plan is revision {current}")
        raise DecisionRefusedError(f"revision {revision} is stale: the current plan is revision {current}")


def pending_for(state: RunState, kind: DecisionKind, step_id: str | None) -> PendingDecision | None:
    return next((p for p in state.pending if p.kind is kind and p.step_id == step_id), None)


def check_approver(state: RunState, by: str) -> None:
    approvers = state.options.approvers
    if approvers is not None and by not in approvers:
        names = ", ".join(approvers) or "nobody"
        raise DecisionRefusedError(f"{by} is not on this run's approver list ({names})")


def step_of(state: RunState, step_id: str) -> Step | None:
    """A step of the current plan (None: no plan, or no such step)."""
    if state.plan is None:
        return None
    try:
        return state.plan.step(step_id)
    except KeyError:
        return None


def with_step_args(state: RunState, step_id: str, args: dict[str, Any], reason: str) -> PlanDraft:
    """The current plan with one step's arguments replaced by `args` (a person's change, which
    becomes the next revision: an edited approval, a retry with arguments)."""
    assert state.plan is not None
    steps = [s.model_copy(update={"args": args}) if s.id == step_id else s for s in state.plan.steps]
    return PlanDraft(goal=state.plan.goal, steps=steps, reason=reason)


def pending_key(pending: PendingDecision) -> str:
    """What tells one pending decision from another, for a notification sent once per decision."""
    call = pending.call.call_id if pending.call is not None else "-"
    key = f"{pending.kind.value}/{pending.step_id or '-'}/{call}/r{pending.revision}/{pending.since.isoformat()}"
    # An escalation (level 9) is news to the group it went to: a notification of its own.
    return key + f"/escalated:{pending.escalated_to}" if pending.escalated_to else key


def remove_pending(state: RunState, step_id: str) -> None:
    state.pending = [p for p in state.pending if p.step_id != step_id]


def record_decision(
    state: RunState,
    action: DecisionAction,
    by: str,
    now: datetime,
    revision: int,
    comment: str,
    via: str,
    step_id: str | None = None,
    *,
    decision: DecisionInput | None = None,
) -> None:
    verdict = decision.verdict if decision is not None else None
    signed_by = verdict.signer if verdict is not None else None
    state.ledger.decisions.append(
        Decision(
            action=action,
            by=by,
            at=now,
            revision=revision,
            comment=comment,
            step_id=step_id,
            via=via,
            signed_by=signed_by,
        )
    )
    state.ledger.auto_approved |= via == "auto"


def outcome(state: RunState, message: str) -> DecisionOutcome:
    revision = state.plan.revision if state.plan else 0
    return DecisionOutcome(revision=revision, phase=state.phase, message=message)
