"""In doubt (level 10): a step whose tool is irreversible and has no reconcile check, and whose
attempt ended without telling whether its effect happened (a lost worker, a timeout, a connection
dropped after sending), is never retried blindly. It waits, `in_doubt`, for a person to say: the
effect happened (the step succeeds with the output they give) or it did not (the step runs again).

Plain functions over `RunState`, as stratagem.domain.decisions: the workflow puts a step in doubt
with `doubt` (workflows/step_runner.py), checks a `resolve` with `check_resolve` in its update's
validator and applies one with `apply_resolve` (workflows/decider.py). The words people see are
stratagem.domain.decisions.in_doubt.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from stratagem.common.errors import DecisionRefusedError
from stratagem.domain.answers import answer_problem
from stratagem.domain.decisions import check_approver, check_open, check_step_approver, pending_for, remove_pending
from stratagem.domain.ledger import EventKind, StepRecord, StepStatus
from stratagem.domain.ledger_events import InDoubtResolved, StepInDoubt
from stratagem.domain.plan import Step
from stratagem.domain.redaction import masked
from stratagem.domain.run_types import DecisionKind, PendingDecision, ResolveInput, RunState
from stratagem.domain.stored import describe, is_stored

# How much of a step's arguments the question shows (the ledger's step has them all).
_SHOWN_ARGS = 1000


def prompt(step: Step, args: dict[str, Any], why: str) -> str:
    """The question: which call, with which arguments (credentials masked, stored values described),
    and why its outcome is unknown."""
    shown = ", ".join(
        f"{name}={describe(value) if is_stored(value) else json.dumps(masked(value), default=str)}"
        for name, value in args.items()
    )
    if len(shown) > _SHOWN_ARGS:
        shown = shown[: _SHOWN_ARGS - 3] + "..."
    return f"step '{step.id}' called {step.tool}({shown}) and its outcome is unknown ({why}): did it happen?"


def doubt(
    state: RunState, record: StepRecord, step: Step, args: dict[str, Any], why: str, attempts: int, now: datetime
) -> PendingDecision:
    """Put a step in doubt: its record says so, the ledger records why, and a person is asked
    (unless a continue-as-new carried the question here)."""
    assert state.plan is not None
    record.status = StepStatus.in_doubt
    record.attempts += attempts
    pending = pending_for(state, DecisionKind.in_doubt, step.id)
    if pending is not None:
        return pending
    question = prompt(step, args, why)
    pending = PendingDecision(
        kind=DecisionKind.in_doubt, revision=state.plan.revision, since=now, step_id=step.id, prompt=question
    )
    state.pending.append(pending)
    state.ledger.record(
        EventKind.step_in_doubt,
        now,
        revision=state.plan.revision,
        step_id=step.id,
        message=question,
        data=StepInDoubt(attempts=record.attempts),
    )
    return pending


def check_resolve(state: RunState, decision: ResolveInput) -> None:
    """Only a step in doubt, only from people who may decide on it (the run's approvers, then the
    step's own), and an output only with `happened`, shaped as its tool returns."""
    check_open(state)
    record = state.ledger.steps.get(decision.step_id)
    if record is None or record.status is not StepStatus.in_doubt:
        doubted = ", ".join(sid for sid, r in state.ledger.steps.items() if r.status is StepStatus.in_doubt)
        raise DecisionRefusedError(
            f"step '{decision.step_id}' is not in doubt; the steps in doubt are: {doubted or 'none'}"
        )
    check_approver(state, decision.by)
    check_step_approver(state, decision.by, decision.step_id)
    if not decision.happened:
        if decision.output is not None:
            raise DecisionRefusedError("an output goes with happened: a step whose effect did not happen runs again")
        return
    assert state.plan is not None
    step = state.plan.step(decision.step_id)
    spec = state.catalog.get(step.tool) if step.tool else None
    if decision.output is not None and spec is not None and spec.returns is not None:
        if problem := answer_problem(decision.output, spec.returns, "the output"):
            raise DecisionRefusedError(
                f"step '{step.id}' refused the output, which does not match the return type of tool "
                f"'{spec.name}': {problem}"
            )


def apply_resolve(state: RunState, decision: ResolveInput, *, via: str, now: datetime) -> StepRecord:
    """Record the word: the question is answered, and the step's record holds the output (the
    effect happened; the caller closes it succeeded) or is pending again (it runs again)."""
    record = state.ledger.steps[decision.step_id]
    remove_pending(state, decision.step_id)
    said = "happened" if decision.happened else "did not happen"
    state.ledger.record(
        EventKind.in_doubt_resolved,
        now,
        revision=state.plan.revision if state.plan else None,
        step_id=decision.step_id,
        actor=decision.by,
        message=f"{decision.by}: its effect {said}" + (f" ({decision.reason})" if decision.reason else ""),
        data=InDoubtResolved(
            via=via,
            happened=decision.happened,
            signed_by=decision.verdict.signer if decision.verdict is not None else None,
        ),
    )
    if decision.happened:
        record.output = decision.output
    else:
        record.status, record.started_at = StepStatus.pending, None
    return record
