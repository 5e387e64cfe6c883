"""Edit, then approve: an approver changes some arguments of a gated tool step and approves the
step with them, in one decision (`ApproveInput.args`, level 9).

The edit is a new plan revision written by that person, in which only that step's arguments
changed: the changed ones as the literal values given, every other one as the plan wrote it (its
references fill in exactly the values shown, since the outputs they read are final once a step
is asked; a stored output and a `${secret:NAME}` stay references, never copied into the plan).
Only this step changed, and the person approving it may decide on it, so the revision is
approved by the same decision, not reviewed again; the step's approval is bound to the digest of
what it will now run, so exactly the edited call runs (`Waits.approved_as_shown`). An edit is
only ever applied to what the approver was shown: it must name that digest.
"""

from __future__ import annotations

import json
import math
from datetime import datetime
from typing import Any

from stratagem.common.errors import DecisionRefusedError, ReferenceResolutionError
from stratagem.domain.decision_inputs import StepTarget
from stratagem.domain.decisions import quorum
from stratagem.domain.decisions.common import record_decision, remove_pending, step_of, with_step_args
from stratagem.domain.ledger import DecisionAction, EventKind
from stratagem.domain.ledger_events import ArgumentEdit, PlanApproved, StepApproved
from stratagem.domain.plan import PlanDraft, Step, StepKind
from stratagem.domain.redaction import masked
from stratagem.domain.references import iter_strings, references_in, resolve
from stratagem.domain.run_levels import Change, reached
from stratagem.domain.run_types import ApproveInput, PendingDecision, Phase, RunState
from stratagem.domain.step_preview import preview
from stratagem.domain.stored import is_stored
from stratagem.domain.validation import argument_problems, plan_problems


def check_edit(state: RunState, decision: ApproveInput, waiting: PendingDecision | None) -> None:
    """Whether an approval with changed arguments may be taken: who may decide was checked with
    the approval; here, what it changes and on what it was shown."""
    assert decision.args is not None
    if not reached(state, Change.EDIT_AND_APPROVE):
        raise DecisionRefusedError(
            f"this run started at level {state.level}, before an approval could change arguments; "
            "approve or reject the step as it is"
        )
    if not isinstance(decision.target, StepTarget) or waiting is None:
        raise DecisionRefusedError(
            "changed arguments go with the approval of a gated tool step (--step); "
            "a plan is changed with revise, and a tool call is approved as the model asked it"
        )
    step = step_of(state, decision.target.step_id)
    assert step is not None and state.plan is not None
    if quorum.applies(state, step.id) or quorum.applies(state, None):
        # The edit is a revision its approver writes and approves in one decision: that is one
        # person, where the step (or the run) asks for more than one, or for someone else.
        raise DecisionRefusedError(
            f"step '{step.id}' needs more than one person or four eyes, so an approval cannot change its "
            "arguments; reject it with the change as the reason, then retry it with --args"
        )
    if step.kind is not StepKind.tool or step.tool is None:
        raise DecisionRefusedError(
            f"step '{step.id}' is {'an' if step.kind is StepKind.llm else 'a'} {step.kind.value} step: an approval "
            "changes a tool step's arguments only; change what it does with revise"
        )
    if decision.digest is None or waiting.preview is None:
        raise DecisionRefusedError(
            f"an approval that changes arguments must name the digest of what it showed of step '{step.id}' "
            "(its preview's digest), so nothing is changed that was not seen"
        )
    if state.phase is not Phase.running or state.approved_revision != state.plan.revision:
        raise DecisionRefusedError(
            f"revision {state.plan.revision} is not the approved one the run runs; decide on it before changing "
            f"step '{step.id}'"
        )
    if not decision.args:
        raise DecisionRefusedError("no argument is changed: approve without arguments")
    _check_values(state, step, decision.args)
    try:
        now = _resolved(step, state)
    except ReferenceResolutionError as exc:  # cannot be shown either: the gate failed the step
        raise DecisionRefusedError(str(exc)) from None
    if all(key in now and now[key] == value for key, value in decision.args.items()):
        raise DecisionRefusedError(
            f"the arguments given are those step '{step.id}' was shown: approve without arguments"
        )
    draft = edited_plan(state, decision)
    rules = {**state.options.plan_rules(), "human_fields": True}
    problems = plan_problems(draft, state.catalog, **rules)
    spec = state.catalog.get(step.tool)
    if not problems and spec is not None:
        # The exact values it will run (the plan check skips values that hold a reference).
        problems = argument_problems(now | decision.args, spec.parameters, tool=step.tool)
    if problems:
        said = "; ".join(p.removeprefix(f"step '{step.id}': ") for p in problems)
        raise DecisionRefusedError(f"the changed arguments of step '{step.id}' are refused: {said}")


def _check_values(state: RunState, step: Step, args: dict[str, Any]) -> None:
    """Names the step has or its tool takes; values, not templates."""
    spec = state.catalog.get(step.tool or "")
    known = set(step.args) | set((spec.parameters.get("properties") or {}) if spec is not None else {})
    for key, value in args.items():
        if key not in known:
            takes = ", ".join(sorted(known)) or "none"
            raise DecisionRefusedError(
                f"argument {json.dumps(key)} is not one of tool '{step.tool}''s (it takes: {takes})"
            )
        if any("${" in text for text in iter_strings(value)):
            raise DecisionRefusedError(
                f"argument '{key}' holds '${{': an approval changes values, not references or templates; "
                "to change what it reads, revise the plan"
            )
        if not _finite(value):
            raise DecisionRefusedError(f"argument '{key}' holds a number that is not finite")


def _finite(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, list):
        return all(_finite(v) for v in value)
    return True


def _resolved(step: Step, state: RunState) -> dict[str, Any]:
    """A step's arguments as they will run (unmasked); those reading a stored output as written."""
    outputs = state.ledger.outputs()
    referenced = {ref.step_id for ref in references_in("", step.args)}
    stored = [sid for sid in referenced if is_stored(outputs.get(sid))]
    return dict(resolve(dict(step.args), outputs, stored))


def edited_plan(state: RunState, decision: ApproveInput) -> PlanDraft:
    """The current plan with the step's changed arguments given as the literal values approved."""
    assert decision.step_id is not None and decision.args is not None
    step = step_of(state, decision.step_id)
    assert step is not None
    reason = f"{decision.by} approved step '{decision.step_id}' with {', '.join(decision.args)} changed"
    return with_step_args(state, step.id, {**step.args, **decision.args}, reason)


def argument_edits(before: Step, state: RunState, args: dict[str, Any]) -> dict[str, ArgumentEdit]:
    """What changed, as the ledger keeps it: each value as shown before and after, credentials masked."""
    shown = masked(_resolved(before, state))
    return {key: ArgumentEdit(before=shown.get(key), after=masked(value)) for key, value in args.items()}


def approve_edited(
    state: RunState, decision: ApproveInput, changed: dict[str, ArgumentEdit], *, via: str, now: datetime
) -> str:
    """The edited revision, already adopted, is approved by the person who wrote it (only the
    step they were asked about changed), and so is the step, as it will now run. Returns the
    new digest."""
    assert state.plan is not None and decision.step_id is not None
    step_id, revision = decision.step_id, state.plan.revision
    step = state.plan.step(step_id)
    digest = preview(step, state.ledger.outputs()).digest
    summary = "; ".join(f"{k}: {json.dumps(e.before)} -> {json.dumps(e.after)}" for k, e in changed.items())
    comment = decision.comment or f"approved with {summary}"
    record_decision(state, DecisionAction.approve, decision.by, now, revision, comment, via, step_id, decision=decision)
    state.ledger.decisions[-1].edited = changed
    state.ledger.record(
        EventKind.plan_approved,
        now,
        revision=revision,
        actor=decision.by,
        message=f"only step '{step_id}' changed, by its approver: {summary}",
        data=PlanApproved(via=via, covers=[step_id]),
    )
    state.approved_revision = revision
    state.ledger.record(
        EventKind.step_approved,
        now,
        revision=revision,
        step_id=step_id,
        actor=decision.by,
        message=comment,
        data=StepApproved(via=via, edited=changed),
    )
    remove_pending(state, step_id)
    state.step_approvals[step_id] = True
    state.approved_digests[step_id] = digest
    return digest
