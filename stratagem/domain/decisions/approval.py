"""Approve and reject: one decision each for a plan revision, a gated step or one tool call,
told apart by its target (`ApproveInput.target`). Each target's rules live in its own module
(plan_approval, step_approval, call_approval); this checks whether a decision on its target
may be taken.
"""

from __future__ import annotations

from stratagem.common.errors import DecisionRefusedError
from stratagem.domain.decision_inputs import CallTarget, PlanTarget, StepTarget
from stratagem.domain.decisions import quorum
from stratagem.domain.decisions.call_approval import check_call_digest, pending_call
from stratagem.domain.decisions.common import check_approver, check_open, check_revision, pending_for
from stratagem.domain.decisions.edit import check_edit
from stratagem.domain.decisions.escalation import may_approve
from stratagem.domain.decisions.step_approval import check_step_approver, check_step_digest
from stratagem.domain.run_levels import Change, reached
from stratagem.domain.run_types import ApproveInput, DecisionKind, PendingDecision, Phase, RejectInput, RunState


def check_approve(state: RunState, decision: ApproveInput) -> None:
    """Whether an approval of the plan, a step or a call may be taken (with changed arguments: edit)."""
    waiting = _check_target(state, decision)
    if (
        waiting is not None
        and waiting.call is not None
        and reached(state, Change.CALL_APPROVAL_BOUND)
        and waiting.call.digest
    ):
        check_call_digest(decision, waiting.call.digest)
    elif waiting is not None and waiting.preview is not None and reached(state, Change.RESOLVED_GATES):
        check_step_digest(decision, waiting.preview)
    if decision.args is not None:
        check_edit(state, decision, waiting if isinstance(decision.target, StepTarget) else None)
    quorum.check(state, decision)  # four eyes, and the same person twice (level 9)


def check_reject(state: RunState, decision: RejectInput) -> None:
    """Whether a rejection may be taken: as an approval of the same target, but a rejected call's
    arguments need no digest (nothing runs)."""
    _check_target(state, decision)


def _check_target(state: RunState, decision: ApproveInput | RejectInput) -> PendingDecision | None:
    """The checks an approval and a rejection share; returns what waits, for a call or a step."""
    check_open(state)
    escalated = may_approve(state, decision)  # its group decides on top of whoever could before
    if not escalated:
        check_approver(state, decision.by)
    check_revision(state, decision.revision)
    match decision.target:
        case CallTarget(step_id, call_id):
            waiting = pending_call(state, step_id, call_id)
            if waiting is None or waiting.call is None:
                raise DecisionRefusedError(f"step '{step_id}' has no tool call {call_id} waiting for approval")
            check_step_approver(state, decision.by, step_id)
            return waiting
        case StepTarget(step_id):
            waiting = pending_for(state, DecisionKind.step_approval, step_id)
            if waiting is None:
                raise DecisionRefusedError(f"step '{step_id}' is not waiting for approval")
            if not escalated:
                check_step_approver(state, decision.by, step_id)
            return waiting
        case PlanTarget():
            if state.phase is not Phase.awaiting_approval:
                raise DecisionRefusedError(f"no plan is waiting for approval (the run is {state.phase.value})")
    return None
