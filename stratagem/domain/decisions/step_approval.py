"""Approving or rejecting a gated step (one that needs approval before it runs): who may decide
on it (the run's approvers, then the step's own), asking, deciding, and which approvals a new
revision keeps.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Any

from stratagem.common.errors import DecisionRefusedError
from stratagem.domain.decision_inputs import Stop
from stratagem.domain.decisions import quorum
from stratagem.domain.decisions.common import pending_for, record_decision, step_of
from stratagem.domain.ledger import DecisionAction, EventKind
from stratagem.domain.ledger_events import data_model
from stratagem.domain.plan import Plan, Step
from stratagem.domain.risk import effective_risk
from stratagem.domain.run_levels import Change, reached
from stratagem.domain.run_types import (
    ApproveInput,
    DecisionKind,
    Mode,
    PendingDecision,
    RejectInput,
    RunState,
)
from stratagem.domain.step_preview import StepPreview


def step_approvers(state: RunState, step_id: str) -> list[str] | None:
    """The people a step's `approvers` name, groups expanded; None when it names nobody."""
    step = step_of(state, step_id)
    if step is None or not step.approvers:
        return None
    groups = state.options.approver_groups
    people: list[str] = []
    for name in step.approvers:
        for person in groups.get(name, [name]):
            if person not in people:
                people.append(person)
    return people


def check_step_approver(state: RunState, by: str, step_id: str) -> None:
    """A step that names its approvers takes decisions about it from them only (on top of the run's list)."""
    people = step_approvers(state, step_id)
    if people is not None and by not in people:
        step = step_of(state, step_id)
        named = ", ".join(step.approvers) if step is not None else ""
        expanded = "" if step is not None and people == step.approvers else f" ({', '.join(people)})"
        raise DecisionRefusedError(f"{by} may not decide on step '{step_id}': its approvers are {named}{expanded}")


def kept_step_approvals(
    state: RunState, before: Plan | None, after: Plan, retried: Collection[str] = ()
) -> dict[str, bool]:
    """The step approvals a new revision keeps: those of steps identical to the revision they were
    given in that have not run on them. An approval lets a step run once: a step that ran and
    failed, and runs again (`retried`), is asked again, since its first run may have had effects."""
    if before is None:
        return {}
    old = {s.id: s for s in before.steps}
    return {
        sid: True
        for step in after.steps
        if (sid := step.id) in old and old[sid] == step and sid not in retried and state.step_approvals.get(sid) is True
    }


def request_step_approval(state: RunState, step: Step, now: datetime, preview: StepPreview | None = None) -> None:
    """Ask for a gated step's approval, unless a continue-as-new carried the request here. From
    level 8 the request carries what the step will run (`preview`), and an approval is bound to it."""
    assert state.plan is not None
    if pending_for(state, DecisionKind.step_approval, step.id) is not None:
        return
    state.pending.append(
        PendingDecision(
            kind=DecisionKind.step_approval,
            revision=state.plan.revision,
            since=now,
            step_id=step.id,
            prompt=f"approve step '{step.id}' ({step.title}), risk {effective_risk(step, state.catalog).value}",
            preview=preview,
        )
    )
    quorum.ask(state, state.pending[-1])
    state.ledger.record(EventKind.step_awaiting_approval, now, revision=state.plan.revision, step_id=step.id)


def decide_on_step(
    state: RunState,
    decision: ApproveInput | RejectInput,
    kinds: tuple[EventKind, EventKind],
    *,
    via: str,
    now: datetime,
    **data: Any,
) -> tuple[bool, str]:
    """Record a person's approval or rejection of something a step waits on (the step itself, or
    one of its tool calls): the decision and its event (`kinds`: approved, rejected). Returns
    whether it was an approval, and its comment or reason."""
    assert state.plan is not None
    approved = isinstance(decision, ApproveInput)
    comment = decision.comment if isinstance(decision, ApproveInput) else decision.reason
    action = DecisionAction.approve if approved else DecisionAction.reject
    record_decision(
        state, action, decision.by, now, state.plan.revision, comment, via, decision.step_id, decision=decision
    )
    kind = kinds[0] if approved else kinds[1]
    state.ledger.record(
        kind,
        now,
        revision=state.plan.revision,
        step_id=decision.step_id,
        actor=decision.by,
        message=comment,
        data=data_model(kind).model_validate({"via": via, **data}),
    )
    return approved, comment


def decide_step(state: RunState, decision: ApproveInput | RejectInput, *, via: str, now: datetime) -> Stop | None:
    """Approve or reject one gated step. Below level 9 a rejection returns why the run must stop;
    from level 9 the step is sent back instead (its gate records it failed: `rejection`)."""
    assert decision.step_id is not None
    kinds = (EventKind.step_approved, EventKind.step_rejected)
    waiting = pending_for(state, DecisionKind.step_approval, decision.step_id)
    approved, comment = decide_on_step(state, decision, kinds, via=via, now=now)
    state.step_approvals[decision.step_id] = approved
    if approved and waiting is not None and waiting.preview is not None:
        # What this approval lets run: the step is asked again if it would run anything else.
        state.approved_digests[decision.step_id] = waiting.preview.digest
    if approved or reached(state, Change.REJECTED_STEP_REPAIRS):
        return None
    return Stop(f"step '{decision.step_id}' rejected by {decision.by}: {comment}")


def rejection(state: RunState, step_id: str) -> str:
    """Why a gated step was sent back, as its record's error says it: who rejected it and why."""
    for made in reversed(state.ledger.decisions):
        if made.step_id == step_id and made.action is DecisionAction.reject:
            return f"rejected by {made.by}: {made.comment}" if made.comment else f"rejected by {made.by}"
    return "rejected"


def sent_back(state: RunState, step_id: str) -> str:
    """What a rejection of a gated step does next (level 9), for the person who sent it: the
    planner revises where it can (the rules of `Planning.replan`), else a person repairs it, else
    (on_failure: fail) the run ends. Either way once the steps running beside it finish."""
    options = state.options
    if options.planner and options.mode is not Mode.joint and state.ledger.replans < options.max_replans:
        return f"step '{step_id}' sent back: the planner revises the plan with the reason"
    if options.repairs:
        return (
            f"step '{step_id}' sent back: the run waits for a repair (retry it with arguments, skip it with an "
            "output, revise the plan, or stop)"
        )
    return f"step '{step_id}' rejected: the run ends (on_failure is fail and no replan can follow)"


def check_step_digest(decision: ApproveInput, preview: StepPreview) -> None:
    """A step approval that names a digest approves exactly what it was shown: if what the step
    will run changed since (a revision, a repaired input), the approval is refused as stale. One
    that names none approves what waits when it arrives (callers of the API that show nothing)."""
    if decision.digest is not None and decision.digest != preview.digest:
        raise DecisionRefusedError(
            f"step '{decision.step_id}' changed since it was shown (digest {decision.digest[:12]}... was shown, "
            f"{preview.digest[:12]}... waits): look at it again"
        )


def waiting(pending: PendingDecision) -> str:
    """What the run waits for, in words (notifications, the console, the inbox)."""
    return f"approval of step {pending.step_id}"


def question(pending: PendingDecision) -> str:
    """The question a person is asked at the terminal (before the choices), with what will run."""
    if pending.preview is None:
        return f"{pending.prompt}?"
    # What will run comes first, so the question itself stays the last line, next to its choices.
    shown = "".join(f"  {line}\n" for line in pending.preview.lines())
    return f"step '{pending.step_id}' will run:\n{shown}  (digest {pending.preview.digest[:12]}...)\n{pending.prompt}?"
