"""Approving or rejecting one tool call an llm step wants to make (tool-call approvals): the
call is shown with its exact arguments, an approval names their digest, and the step goes on
either way (a rejection is the call's result).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from stratagem.common.errors import DecisionRefusedError
from stratagem.domain.activity_io import CallDecision
from stratagem.domain.decisions.step_approval import decide_on_step
from stratagem.domain.ledger import EventKind
from stratagem.domain.ledger_events import CallAwaitingApproval
from stratagem.domain.run_types import ApproveInput, DecisionKind, PendingDecision, RejectInput, RunState


def check_call_digest(decision: ApproveInput, digest: str) -> None:
    """A tool call is approved as it was shown: the approval names the digest of its arguments."""
    if decision.digest is None:
        raise DecisionRefusedError(
            f"approve call {decision.call_id} with the digest of the arguments you saw (digest "
            f"{digest[:12]}...): `stratagem approve --step {decision.step_id} --call {decision.call_id}`, the "
            "console and the terminal prompt show the arguments and send it"
        )
    if decision.digest != digest:
        raise DecisionRefusedError(
            f"the arguments of call {decision.call_id} differ from the ones approved (digest {decision.digest[:12]}... "
            f"was shown, {digest[:12]}... waits): look at the call again"
        )


def pending_call(state: RunState, step_id: str, call_id: str) -> PendingDecision | None:
    return next(
        (
            p
            for p in state.pending
            if p.kind is DecisionKind.tool_call_approval
            and p.step_id == step_id
            and p.call is not None
            and p.call.call_id == call_id
        ),
        None,
    )


def request_call_approval(state: RunState, step_id: str, call: Any, now: datetime) -> None:
    """Ask for one tool call of an llm step, showing the exact arguments. Not again if already asked."""
    assert state.plan is not None
    if pending_call(state, step_id, call.call_id) is not None:
        return
    state.pending.append(
        PendingDecision(
            kind=DecisionKind.tool_call_approval,
            revision=state.plan.revision,
            since=now,
            step_id=step_id,
            prompt=f"step '{step_id}' wants to call {call.tool}({call.arguments})",
            call=call,
        )
    )
    state.ledger.record(
        EventKind.call_awaiting_approval,
        now,
        revision=state.plan.revision,
        step_id=step_id,
        message=f"{call.tool}({call.arguments})",
        data=CallAwaitingApproval(call=call.call_id, digest=call.digest),
    )


def decide_call(state: RunState, decision: ApproveInput | RejectInput, *, via: str, now: datetime) -> None:
    """Approve or reject one paused tool call; the step goes on either way (a rejection is the call's result)."""
    assert decision.step_id is not None and decision.call_id is not None
    kinds = (EventKind.call_approved, EventKind.call_rejected)
    approved, comment = decide_on_step(state, decision, kinds, via=via, now=now, call=decision.call_id)
    state.ledger.decisions[-1].call_id = decision.call_id
    paused = state.paused_calls[decision.step_id]
    digest = decision.digest if isinstance(decision, ApproveInput) else None
    paused.decisions[decision.call_id] = CallDecision(approved=approved, by=decision.by, reason=comment, digest=digest)
    paused.decided = True
    state.pending = [
        p
        for p in state.pending
        if not (
            p.kind is DecisionKind.tool_call_approval
            and p.step_id == decision.step_id
            and p.call is not None
            and p.call.call_id == decision.call_id
        )
    ]


def waiting(pending: PendingDecision) -> str:
    """What the run waits for, in words (notifications, the console, the inbox)."""
    if pending.call is None:  # never asked so (a call approval carries its call); worded as it always was
        return "a budget decision"
    return f"a call of {pending.call.tool} by step {pending.step_id}"


def question(pending: PendingDecision) -> str:
    """The question a person is asked at the terminal (before the choices)."""
    return f"{pending.prompt}\nlet it make this call?"
