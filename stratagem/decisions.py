"""Decisions people send a run: whether it takes an approve, reject, revise or answer, and what
taking one records.

Plain functions over `RunState`, with no Temporal in them, so they can be tested on their own.
The workflow calls the checks from its update validators and signal handlers, and the other
functions to ask for a decision and to apply one. Those only change the state and its ledger;
time comes in as `now` (workflow time, in the workflow), and what the run loop must do next
(stop, end the run) is left to the caller.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from .answers import answer_problem
from .errors import DecisionRefusedError
from .ledger import Decision, DecisionAction, EventKind
from .plan import Plan, Risk, Step
from .run_types import (
    AnswerInput,
    ApproveInput,
    BudgetInput,
    DecisionInput,
    DecisionKind,
    DecisionOutcome,
    PendingDecision,
    Phase,
    RejectInput,
    ReviseInput,
    RunState,
)
from .scheduling import reconcile
from .usage import price_for
from .validation import plan_problems

# ------------------------------------------------------------------ checks


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


def check_approve(state: RunState, decision: ApproveInput) -> None:
    check_open(state)
    check_approver(state, decision.by)
    check_revision(state, decision.revision)
    if decision.step_id is not None:
        if pending_for(state, DecisionKind.step_approval, decision.step_id) is None:
            raise DecisionRefusedError(f"step '{decision.step_id}' is not waiting for approval")
    elif state.phase is not Phase.awaiting_approval:
        raise DecisionRefusedError(f"no plan is waiting for approval (the run is {state.phase.value})")


def check_reject(state: RunState, decision: RejectInput) -> None:
    check_approve(state, ApproveInput(by=decision.by, revision=decision.revision, step_id=decision.step_id))


def check_revise(state: RunState, decision: ReviseInput) -> None:
    """The edited plan must be valid as laid over what already ran, against the run's tools."""
    check_open(state)
    check_approver(state, decision.by)
    if state.phase is not Phase.awaiting_approval:
        raise DecisionRefusedError(
            f"a plan can only be revised while it awaits approval (the run is {state.phase.value})"
        )
    check_revision(state, decision.revision)
    merged = reconcile(state.plan, decision.plan, state.ledger.steps)
    problems = merged.problems or plan_problems(merged.draft, state.catalog, **state.options.plan_rules())
    if problems:
        raise DecisionRefusedError("the revised plan is invalid: " + "; ".join(problems))


def check_answer(state: RunState, answer: AnswerInput) -> None:
    check_open(state)
    if pending_for(state, DecisionKind.human_answer, answer.step_id) is None:
        raise DecisionRefusedError(f"step '{answer.step_id}' is not waiting for an answer")
    schema = _answer_schema(state, answer.step_id)
    if schema is not None and (problem := answer_problem(answer.answer, schema)):
        raise DecisionRefusedError(f"step '{answer.step_id}' refused the answer: {problem}")


def _answer_schema(state: RunState, step_id: str) -> dict[str, Any] | None:
    """The answer schema of a step of the current plan (None: no plan, no such step, no schema)."""
    if state.plan is None:
        return None
    try:
        return state.plan.step(step_id).answer_schema
    except KeyError:
        return None


def check_budget(state: RunState, decision: BudgetInput, *, elapsed_seconds: float) -> None:
    """A stop needs a run waiting on its budget; a change must leave room above what is used."""
    check_open(state)
    check_approver(state, decision.by)
    waiting = pending_for(state, DecisionKind.budget, None) is not None
    if decision.stop:
        if not waiting:
            raise DecisionRefusedError("the run is not waiting on its budget; to end it anyway, cancel it")
        if decision.limits:
            raise DecisionRefusedError("a stop takes no limits: send either the limits or the stop")
        return
    if not decision.limits:
        raise DecisionRefusedError("give at least one limit: tokens, cost_usd, model_calls or wall_clock_seconds")
    if decision.cost_usd is not None:
        unpriced = [m for m in state.options.models if price_for(m, state.options.prices) is None]
        if unpriced:
            raise DecisionRefusedError(
                f"a cost limit cannot hold: {', '.join(unpriced)} has no price in this run; limit tokens instead"
            )
    usage = state.ledger.usage
    used = {
        "tokens": usage.tokens,
        "cost_usd": usage.cost_usd,
        "model_calls": usage.calls,
        "wall_clock_seconds": elapsed_seconds,
    }
    for name, limit in decision.limits.items():
        if limit <= used[name]:
            raise DecisionRefusedError(
                f"a {name} limit of {limit:g} leaves no room: the run has used {used[name]:g} already"
            )


# ------------------------------------------------------------------ pending decisions


def request_budget(state: RunState, used_up: list[str], now: datetime) -> bool:
    """Ask a person to raise the budget or stop the run. False if already asked."""
    if pending_for(state, DecisionKind.budget, None) is not None:
        return False
    revision = state.plan.revision if state.plan else 0
    reasons = "; ".join(used_up)
    state.pending.append(
        PendingDecision(
            kind=DecisionKind.budget,
            revision=revision,
            since=now,
            prompt=f"{reasons}: raise the budget or stop the run",
        )
    )
    state.ledger.record(
        EventKind.budget_exhausted, now, revision=revision, message=reasons, usage=state.ledger.usage.model_dump()
    )
    return True


def plan_approval_request(state: RunState, now: datetime, why: Sequence[str] = ()) -> PendingDecision:
    plan = state.plan
    assert plan is not None
    prompt = f"approve revision {plan.revision} ({len(plan.steps)} steps)"
    if why:
        prompt += ": " + "; ".join(why)
    return PendingDecision(kind=DecisionKind.plan_approval, revision=plan.revision, since=now, prompt=prompt)


_RISK_ORDER = {Risk.low: 0, Risk.medium: 1, Risk.high: 2}


def loosened(before: Plan | None, after: Plan) -> list[str]:
    """What `after` loosens against the approved `before`: changes only a person may approve.

    Whatever the options say, a revision may not lower a step's risk, drop its approval, let it
    call more tools, or change what a step that needs approval does (its tool, arguments or
    instructions). New steps are not listed: a gated new step still waits for its own approval.
    """
    if before is None:
        return ["no approved revision to compare with"]
    approved = {step.id: step for step in before.steps}
    changes = []
    for step in after.steps:
        old = approved.get(step.id)
        if old is None:
            continue
        if _RISK_ORDER[step.risk] < _RISK_ORDER[old.risk]:
            changes.append(f"step '{step.id}' risk lowered from {old.risk.value} to {step.risk.value}")
        if old.requires_approval and not step.requires_approval:
            changes.append(f"step '{step.id}' no longer requires approval")
        if added := sorted(set(step.tools) - set(old.tools)):
            changes.append(f"step '{step.id}' may now call {', '.join(added)}")
        gated = old.needs_step_approval or step.needs_step_approval
        if gated and (step.tool, step.args, step.instructions, step.kind) != (
            old.tool,
            old.args,
            old.instructions,
            old.kind,
        ):
            changes.append(f"step '{step.id}' needs approval and what it does changed")
    return changes


def request_step_approval(state: RunState, step: Step, now: datetime) -> None:
    """Ask for a gated step's approval, unless a continue-as-new carried the request here."""
    assert state.plan is not None
    if pending_for(state, DecisionKind.step_approval, step.id) is not None:
        return
    state.pending.append(
        PendingDecision(
            kind=DecisionKind.step_approval,
            revision=state.plan.revision,
            since=now,
            step_id=step.id,
            prompt=f"approve step '{step.id}' ({step.title}), risk {step.risk.value}",
        )
    )
    state.ledger.record(EventKind.step_awaiting_approval, now, revision=state.plan.revision, step_id=step.id)


def request_answer(state: RunState, step_id: str, question: str, now: datetime) -> PendingDecision:
    """Ask a person the question of a human step."""
    assert state.plan is not None
    pending = PendingDecision(
        kind=DecisionKind.human_answer, revision=state.plan.revision, since=now, step_id=step_id, prompt=question
    )
    state.pending.append(pending)
    state.ledger.record(
        EventKind.step_awaiting_answer, now, revision=state.plan.revision, step_id=step_id, message=question
    )
    return pending


def remove_pending(state: RunState, step_id: str) -> None:
    state.pending = [p for p in state.pending if p.step_id != step_id]


# ------------------------------------------------------------------ applying decisions


def _decided(
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


def approve_plan(state: RunState, decision: ApproveInput, *, via: str, now: datetime) -> None:
    """Approve the current revision: the run starts (or resumes) executing it."""
    assert state.plan is not None
    revision = state.plan.revision
    _decided(state, DecisionAction.approve, decision.by, now, revision, decision.comment, via, decision=decision)
    state.ledger.record(
        EventKind.plan_approved, now, revision=revision, actor=decision.by, message=decision.comment, via=via
    )
    state.approved_revision = revision
    state.pending = []
    state.phase = Phase.running


def decide_step(state: RunState, decision: ApproveInput | RejectInput, *, via: str, now: datetime) -> str | None:
    """Approve or reject one gated step. A rejection returns why the run must stop."""
    assert state.plan is not None and decision.step_id is not None
    approved = isinstance(decision, ApproveInput)
    comment = decision.comment if isinstance(decision, ApproveInput) else decision.reason
    action = DecisionAction.approve if approved else DecisionAction.reject
    _decided(state, action, decision.by, now, state.plan.revision, comment, via, decision.step_id, decision=decision)
    state.ledger.record(
        EventKind.step_approved if approved else EventKind.step_rejected,
        now,
        revision=state.plan.revision,
        step_id=decision.step_id,
        actor=decision.by,
        message=comment,
        via=via,
    )
    state.step_approvals[decision.step_id] = approved
    return None if approved else f"step '{decision.step_id}' rejected by {decision.by}: {comment}"


def record_plan_rejection(state: RunState, decision: RejectInput, *, via: str, now: datetime) -> str:
    """Record the rejection of the current revision; returns the reason the run ends with."""
    assert state.plan is not None
    _decided(
        state, DecisionAction.reject, decision.by, now, state.plan.revision, decision.reason, via, decision=decision
    )
    state.ledger.record(
        EventKind.plan_rejected, now, revision=state.plan.revision, actor=decision.by, message=decision.reason, via=via
    )
    return f"rejected by {decision.by}: {decision.reason}"


def record_revision(state: RunState, decision: ReviseInput, plan: Plan, *, via: str, now: datetime) -> None:
    """Record a reviewer's edit, already adopted as `plan`; the new revision awaits approval."""
    _decided(state, DecisionAction.revise, decision.by, now, plan.revision, decision.reason, via, decision=decision)
    escalated = any(p.escalated for p in state.pending)
    state.pending = [plan_approval_request(state, now)]
    state.pending[0].escalated = escalated  # an escalation stays visible until someone decides


def record_answer(state: RunState, answer: AnswerInput, now: datetime) -> None:
    state.answers[answer.step_id] = answer.answer
    revision = state.plan.revision if state.plan else None
    signed = {"signed_by": answer.verdict.signer} if answer.verdict is not None and answer.verdict.signer else {}
    state.ledger.record(
        EventKind.answer_received, now, revision=revision, step_id=answer.step_id, actor=answer.by, **signed
    )


def apply_budget(
    state: RunState, decision: BudgetInput, *, via: str, now: datetime, still_used_up: Callable[[], list[str]]
) -> str | None:
    """Change the budget, or stop the run; returns why the run must stop, if it must."""
    revision = state.plan.revision if state.plan else 0
    if decision.stop:
        comment = decision.reason or "stopped at the budget"
        _decided(state, DecisionAction.budget, decision.by, now, revision, f"stop: {comment}", via, decision=decision)
        state.pending = [p for p in state.pending if p.kind is not DecisionKind.budget]
        return f"stopped by {decision.by} when the budget ran out: {comment}"
    before = state.options.budget.model_dump(exclude_none=True)
    state.options.budget = state.options.budget.model_copy(update=decision.limits)
    changes = ", ".join(
        f"{name} {before.get(name, 'unlimited')} -> {limit:g}" for name, limit in decision.limits.items()
    )
    _decided(
        state,
        DecisionAction.budget,
        decision.by,
        now,
        revision,
        f"{changes}. {decision.reason}".strip(),
        via,
        decision=decision,
    )
    state.ledger.record(
        EventKind.budget_changed,
        now,
        revision=revision,
        actor=decision.by,
        message=changes,
        via=via,
        budget=state.options.budget.model_dump(exclude_none=True),
    )
    if not still_used_up():
        state.pending = [p for p in state.pending if p.kind is not DecisionKind.budget]
    return None


def outcome(state: RunState, message: str) -> DecisionOutcome:
    revision = state.plan.revision if state.plan else 0
    return DecisionOutcome(revision=revision, phase=state.phase, message=message)
