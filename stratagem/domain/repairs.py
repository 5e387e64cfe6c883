"""Repairs: what a person may do about a run whose failure no replan can answer (retry a failed
step, with new arguments if given; skip it with an output given by hand; ask a human step's
question again; or stop the run), whether a repair may be taken, and what taking one records.

Plain functions over `RunState`, like stratagem.domain.decisions, whose checks they share; the workflow
checks a repair with them in the repair update's validator (its row of `DECISIONS` in
workflows/messages.py) and applies one in `Decider.repair` (workflows/decider.py).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from stratagem.common.errors import DecisionRefusedError
from stratagem.domain.answers import answer_problem
from stratagem.domain.decision_inputs import (
    AskAgainRepair,
    CompensateRepair,
    RetryRepair,
    SkipRepair,
    Stop,
    StopRepair,
)
from stratagem.domain.decisions import (
    check_approver,
    check_open,
    check_step_approver,
    quorum,
    record_decision,
    step_of,
    with_step_args,
)
from stratagem.domain.graph import ancestry
from stratagem.domain.ledger import DecisionAction, EventKind, StepStatus
from stratagem.domain.ledger_events import PlanApproved, RepairRequested, StepRepaired
from stratagem.domain.plan import PlanDraft, Step, StepKind
from stratagem.domain.risk import needs_approval
from stratagem.domain.run_levels import Change, reached
from stratagem.domain.run_types import DecisionKind, PendingDecision, Phase, RepairInput, RunState
from stratagem.domain.validation import plan_problems


def failed_steps(state: RunState) -> list[str]:
    """The steps of the current plan that failed, or were cancelled, and wait for a repair."""
    if state.plan is None:
        return []
    stuck = (StepStatus.failed, StepStatus.cancelled)
    return [s.id for s in state.plan.steps if state.ledger.steps[s.id].status in stuck]


def check_repair(state: RunState, decision: RepairInput) -> None:
    """A repair needs a run waiting for one; retry and skip name a step that failed, ask_again a
    human step whose answer a failed step used. A field the action does not take is refused."""
    check_open(state)
    check_approver(state, decision.by)
    if state.phase is not Phase.awaiting_repair:
        raise DecisionRefusedError(f"the run is not waiting for a repair (it is {state.phase.value})")
    match decision.repair:
        case StopRepair():
            pass
        case CompensateRepair():
            _check_compensate(state)
        case AskAgainRepair(step_id):
            _check_ask_again(state, decision, step_id)
        case RetryRepair(step_id, args):
            step = _failed_step(state, decision.by, step_id)
            if decision.output is not None:
                raise DecisionRefusedError("a retry takes new arguments, not an output; to supply the output, skip")
            if args is not None:
                _check_args(state, step, args)
                quorum.check_reachable(state, decision.by, "a retry with arguments")
        case SkipRepair(step_id, output):
            step = _failed_step(state, decision.by, step_id)
            if decision.args is not None:
                raise DecisionRefusedError(
                    "a skip takes the step's output, not arguments; to run it with new ones, retry"
                )
            schema, what = _output_schema(state, step)
            if schema is not None and (problem := answer_problem(output, schema, "the output")):
                raise DecisionRefusedError(
                    f"step '{step.id}' refused the output, which does not match {what}: {problem}"
                )


def _check_compensate(state: RunState) -> None:
    """Compensating is giving up on the goal, once, in a run that knows how (level 10)."""
    if not reached(state, Change.COMPENSATION):
        raise DecisionRefusedError(
            f"this run was started at level {state.level}, before compensation (level {Change.COMPENSATION.level}); "
            "stop it instead"
        )
    if state.compensation is not None:
        raise DecisionRefusedError(
            "the run is undoing its effects already; retry or skip the failed undo, or stop (the effects remain)"
        )


def _failed_step(state: RunState, by: str, step_id: str) -> Step:
    """The failed step a retry or a skip names, which `by` may decide on."""
    failed = failed_steps(state)
    if step_id not in failed:
        waiting = ", ".join(failed) or "none"
        raise DecisionRefusedError(f"step '{step_id}' did not fail; the failed steps are: {waiting}")
    check_step_approver(state, by, step_id)
    step = step_of(state, step_id)
    assert step is not None
    return step


def _check_args(state: RunState, step: Step, args: dict[str, Any]) -> None:
    """A retry's new arguments: a tool step's, valid in the plan they make."""
    if step.kind is not StepKind.tool:
        raise DecisionRefusedError(f"step '{step.id}' is a {step.kind.value} step; only tool steps take arguments")
    rules = {**state.options.plan_rules(), "human_fields": reached(state, Change.HUMAN_STEP_FIELDS)}
    problems = plan_problems(retried_plan(state, step.id, args), state.catalog, **rules)
    if problems:
        raise DecisionRefusedError("the new arguments are refused: " + "; ".join(problems))


def retried_plan(state: RunState, step_id: str, args: dict[str, Any]) -> PlanDraft:
    """The current plan with one step's arguments changed (a retry with edited arguments): from
    level 9 merged into the step's current ones (`retry_args`), before it replacing them."""
    step = step_of(state, step_id)
    assert step is not None
    return with_step_args(state, step_id, retry_args(state, step, args), f"step '{step_id}' retried with new arguments")


def retry_args(state: RunState, step: Step, args: dict[str, Any]) -> dict[str, Any]:
    """The arguments a retry runs a step with. From level 9 the given ones are merged into the
    step's current arguments, name by name, so a person changes the one that was wrong without
    typing the others again; before, they replaced them."""
    if not reached(state, Change.REJECTED_STEP_REPAIRS):
        return args
    return {**step.args, **args}


def changes_args(state: RunState, step_id: str, args: dict[str, Any]) -> bool:
    """Whether a retry's arguments change the step (a new revision). From level 9 arguments that
    leave it as it is (a form sent back as it was shown) make a plain retry; before, any did."""
    step = step_of(state, step_id)
    if step is None or not reached(state, Change.REJECTED_STEP_REPAIRS):
        return True
    return retry_args(state, step, args) != step.args


def request_repair(state: RunState, why: str, now: datetime) -> None:
    """Ask a person to repair each failed step (retry it, skip it with an output), revise the plan, or stop."""
    assert state.plan is not None
    revision = state.plan.revision
    failed = failed_steps(state)
    state.phase = Phase.awaiting_repair
    # A tool call a paused step waits on stays open: a person may decide it while repairing.
    calls = [p for p in state.pending if p.kind is DecisionKind.tool_call_approval]
    choices = _choices(state)
    repairs = [
        PendingDecision(
            kind=DecisionKind.repair,
            revision=revision,
            since=now,
            step_id=sid,
            prompt=f"{_what_happened(state, sid, why)}. "
            + (
                choices
                or "Retry it, skip it with an output, "
                + "".join(f"ask '{h}' again, " for h in askable(state, sid))
                + _last_choices(state)
            ),
            ask_again=askable(state, sid),
        )
        for sid in failed
    ] or [
        PendingDecision(
            kind=DecisionKind.repair,
            revision=revision,
            since=now,
            prompt=f"{why}. " + (choices or _no_step_choices(state)),
        )
    ]
    state.pending = calls + repairs
    state.ledger.record(
        EventKind.repair_requested, now, revision=revision, message=why, data=RepairRequested(steps=failed)
    )


def _choices(state: RunState) -> str:
    """What a person may do about a failed undo (level 10; "" otherwise): no replan, no revision."""
    if state.compensation is None:
        return ""
    return "Retry it, skip it with an output (its effect counts as undone), or stop (the compensation fails: effects remain)"


def _last_choices(state: RunState) -> str:
    """How a repair's choices end: from level 10 a person may also give up and undo what ran."""
    if reached(state, Change.COMPENSATION):
        return "revise the plan, stop the run, or compensate (undo what ran)"
    return "revise the plan, or stop the run"


def _no_step_choices(state: RunState) -> str:
    """A repair asked with no failed step to name (a planner that failed): its choices."""
    if reached(state, Change.COMPENSATION):
        return "Revise the plan, stop the run, or compensate (undo what ran)"
    return "Revise the plan or stop the run"


def _what_happened(state: RunState, step_id: str, why: str) -> str:
    """What a repair answers: the step's failure, or (level 9) who sent it back and why."""
    error = state.ledger.steps[step_id].error or why
    if state.step_approvals.get(step_id) is False and reached(state, Change.REJECTED_STEP_REPAIRS):
        return f"step '{step_id}' was sent back, {error}"
    return f"step '{step_id}' failed: {error}"


def apply_repair(state: RunState, decision: RepairInput, *, via: str, now: datetime) -> Stop | None:
    """Apply a repair to one failed step (retry without new arguments, or skip), or stop. Returns
    why the run ends, for a stop. A retry with new arguments is a new revision: the workflow adopts
    it (`retried_plan`) and then calls `approve_repair`."""
    assert state.plan is not None
    revision = state.plan.revision
    action = DecisionAction(decision.action.value)
    record_decision(
        state, action, decision.by, now, revision, decision.reason, via, decision.step_id, decision=decision
    )
    repair = decision.repair
    if isinstance(repair, StopRepair):
        state.ledger.record(
            EventKind.step_repaired,
            now,
            revision=revision,
            actor=decision.by,
            message="stopped the run",
            data=StepRepaired(action="stop", via=via),
        )
        return Stop(
            f"stopped by {decision.by} instead of a repair" + (f": {decision.reason}" if decision.reason else "")
        )
    if isinstance(repair, CompensateRepair):
        state.ledger.record(
            EventKind.step_repaired,
            now,
            revision=revision,
            actor=decision.by,
            message="gave up on the goal: the effects that ran are undone",
            data=StepRepaired(action="compensate", via=via),
        )
        failure = state.failure or "; ".join(state.ledger.steps[s].error or s for s in failed_steps(state))
        why = f"{failure}; {decision.by} chose to undo what ran" if failure else f"{decision.by} chose to undo what ran"
        return Stop(why + (f": {decision.reason}" if decision.reason else ""))
    match repair:
        case AskAgainRepair(step_id):
            return _ask_again(state, decision, step_id, via=via, now=now)
        case SkipRepair(step_id, output):
            record = state.ledger.steps[step_id]
            record.status, record.error, record.output = StepStatus.succeeded, None, output
            message = f"skipped by {decision.by}, with an output supplied by hand"
        case RetryRepair(step_id, args):
            record = state.ledger.steps[step_id]
            record.status, record.error, record.output, record.started_at = StepStatus.pending, None, None, None
            changed = args is not None and changes_args(state, step_id, args)
            message = f"retried by {decision.by}" + (" with new arguments" if changed else "")
            _drop_approval(state, step_id)
    state.ledger.record(
        EventKind.step_repaired,
        now,
        revision=revision,
        step_id=decision.step_id,
        actor=decision.by,
        message=message,
        data=StepRepaired(action=decision.action.value, via=via),
    )
    state.pending = [p for p in state.pending if not (p.kind is DecisionKind.repair and p.step_id == step_id)]
    _resume_if_repaired(state)
    return None


def asks_again(state: RunState, step_id: str | None) -> bool:
    """Whether a retried step waits for a person's approval again before it runs (level 9)."""
    step = step_of(state, step_id) if step_id is not None else None
    return (
        step is not None
        and reached(state, Change.REJECTED_STEP_REPAIRS)
        and needs_approval(step, state.catalog)
        and not state.options.auto_approve
    )


def _drop_approval(state: RunState, step_id: str) -> None:
    """From level 9 a step that runs again is asked again: its approval (or rejection) let it run
    once, and the first run may have had effects or been sent back."""
    if reached(state, Change.REJECTED_STEP_REPAIRS):
        state.step_approvals.pop(step_id, None)
        state.approved_digests.pop(step_id, None)


def _resume_if_repaired(state: RunState) -> None:
    """Once no failed step is left, the run goes on (or its pending revision is reviewed first)."""
    assert state.plan is not None
    if not failed_steps(state):
        state.pending = [p for p in state.pending if p.kind is not DecisionKind.repair]
        state.failure = None
        # A revision made while the run ran may still await its approval: it is reviewed first.
        approved = state.approved_revision == state.plan.revision
        state.phase = Phase.running if approved else Phase.awaiting_approval


def approve_repair(state: RunState, decision: RepairInput, *, via: str, now: datetime) -> None:
    """The person who retried a step with new arguments approved that revision by doing so."""
    assert state.plan is not None and decision.step_id is not None
    comment = f"retry of step '{decision.step_id}' with new arguments" + (
        f": {decision.reason}" if decision.reason else ""
    )
    state.ledger.record(
        EventKind.plan_approved,
        now,
        revision=state.plan.revision,
        actor=decision.by,
        message=comment,
        data=PlanApproved(via=via, covers=[decision.step_id]),
    )
    state.approved_revision = state.plan.revision


def _output_schema(state: RunState, step: Step) -> tuple[dict[str, Any] | None, str]:
    """What a step's output must look like, where something says: its answer schema or its tool's return type."""
    if step.kind is StepKind.human and step.answer_schema is not None:
        return step.answer_schema, "its answer schema"
    spec = state.catalog.get(step.tool) if step.kind is StepKind.tool and step.tool else None
    if spec is not None and spec.returns is not None:
        return spec.returns, f"the return type of tool '{spec.name}'"
    return None, ""


# ------------------------------------------------------------------ asking a person again


def _users_of(state: RunState, human_id: str) -> tuple[list[str], list[str]]:
    """The steps that used a human step's answer (directly or through other steps): those that
    failed or were cancelled, and those that succeeded."""
    assert state.plan is not None
    is_ancestor = ancestry({s.id: s.depends_on for s in state.plan.steps})
    failed, succeeded = [], []
    for step in state.plan.steps:
        if step.id == human_id or not is_ancestor(step.id, human_id):
            continue
        status = state.ledger.steps[step.id].status
        if status in (StepStatus.failed, StepStatus.cancelled):
            failed.append(step.id)
        elif status is StepStatus.succeeded:
            succeeded.append(step.id)
    return failed, succeeded


def askable(state: RunState, failed_id: str) -> list[str]:
    """The human steps a person may ask again for a failed step: the step itself, or those whose
    answer it used, provided no step that succeeded used that answer (it would not run again)."""
    assert state.plan is not None
    is_ancestor = ancestry({s.id: s.depends_on for s in state.plan.steps})
    return [
        s.id
        for s in state.plan.steps
        if s.kind is StepKind.human
        and (s.id == failed_id or is_ancestor(failed_id, s.id))
        and not _users_of(state, s.id)[1]
    ]


def _check_ask_again(state: RunState, decision: RepairInput, step_id: str) -> None:
    step = step_of(state, step_id)
    if step is None or step.kind is not StepKind.human:
        raise DecisionRefusedError(
            f"step '{step_id}' is not a human step: only a person's answer can be asked for again"
        )
    if decision.args is not None or decision.output is not None:
        raise DecisionRefusedError("ask_again takes neither arguments nor an output: the person answers anew")
    failed, succeeded = _users_of(state, step_id)
    own = state.ledger.steps[step_id].status in (StepStatus.failed, StepStatus.cancelled)
    if not failed and not own:
        waiting = ", ".join(failed_steps(state)) or "none"
        raise DecisionRefusedError(f"no failed step used the answer to '{step_id}'; the failed steps are: {waiting}")
    if succeeded:
        raise DecisionRefusedError(
            f"{', '.join(succeeded)} already used the answer to '{step_id}' and succeeded, and would not run "
            "again with a new one; revise the plan instead"
        )
    check_step_approver(state, decision.by, step_id)


def _ask_again(state: RunState, decision: RepairInput, human: str, *, via: str, now: datetime) -> Stop | None:
    """The human step's answer is dropped and its question asked anew; the failed steps that used
    it wait for the new answer and run again."""
    assert state.plan is not None
    failed, _ = _users_of(state, human)
    for sid in [human, *failed]:
        record = state.ledger.steps[sid]
        record.status, record.error, record.output, record.started_at = StepStatus.pending, None, None, None
        _drop_approval(state, sid)
    state.answers.pop(human, None)
    again = f"; {', '.join(failed)} run again with the new answer" if failed else ""
    state.ledger.record(
        EventKind.step_repaired,
        now,
        revision=state.plan.revision,
        step_id=human,
        actor=decision.by,
        message=f"asked again by {decision.by}{again}",
        data=StepRepaired(action=decision.action.value, via=via),
    )
    reset = {human, *failed}
    state.pending = [p for p in state.pending if not (p.kind is DecisionKind.repair and p.step_id in reset)]
    _resume_if_repaired(state)
    return None
