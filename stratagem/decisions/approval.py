"""Approve and reject: one decision each for a plan revision, a gated step or one tool call,
told apart by the ids it carries (`step_id`, `call_id`). Each target's rules live in its own
module (plan_approval, step_approval, call_approval); this checks which target a decision
is for and whether it may be taken.
"""

from __future__ import annotations

from ..errors import DecisionRefusedError
from ..run_levels import Change, reached
from ..run_types import ApproveInput, DecisionKind, Phase, RejectInput, RunState
from .call_approval import check_call_digest, pending_call
from .common import check_approver, check_open, check_revision, pending_for
from .step_approval import check_step_approver


def check_approve(state: RunState, decision: ApproveInput, *, rejecting: bool = False) -> None:
    """Whether an approval (or, `rejecting`, a rejection) of the plan, a step or a call may be taken."""
    check_open(state)
    check_approver(state, decision.by)
    check_revision(state, decision.revision)
    if decision.call_id is not None:
        if decision.step_id is None:
            raise DecisionRefusedError("a tool call is approved with its step: give --step as well as --call")
        waiting = pending_call(state, decision.step_id, decision.call_id)
        if waiting is None or waiting.call is None:
            raise DecisionRefusedError(
                f"step '{decision.step_id}' has no tool call {decision.call_id} waiting for approval"
            )
        check_step_approver(state, decision.by, decision.step_id)
        if not rejecting and reached(state, Change.CALL_APPROVAL_BOUND) and waiting.call.digest:
            check_call_digest(decision, waiting.call.digest)
    elif decision.step_id is not None:
        if pending_for(state, DecisionKind.step_approval, decision.step_id) is None:
            raise DecisionRefusedError(f"step '{decision.step_id}' is not waiting for approval")
        check_step_approver(state, decision.by, decision.step_id)
    elif state.phase is not Phase.awaiting_approval:
        raise DecisionRefusedError(f"no plan is waiting for approval (the run is {state.phase.value})")


def check_reject(state: RunState, decision: RejectInput) -> None:
    check_approve(
        state,
        ApproveInput(by=decision.by, revision=decision.revision, step_id=decision.step_id, call_id=decision.call_id),
        rejecting=True,
    )
