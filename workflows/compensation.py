"""Compensation (level 10): a run that gives up on its goal after effects ran undoes them. The
plan that does it is derived by `stratagem.domain.compensation`; this part adopts it as the next
revision, which is reviewed like any revision (auto_approve approves it) and runs like one. What
ends it: every undo succeeded (compensated, `StratagemRun._finish`); a rejection, a stop or any
other end while it runs (compensation_failed, `Steps.end`). A failed undo never replans: it
waits for a repair (`Planning.replan`). Workflow code: deterministic, no I/O.

What gives up and compensates: a step that failed for good with `on_failure: compensate`
(`Planning.cannot_replan`), a repair `stop` with it, a revision rejected with it after effects
ran (`Decider`, `Execution`), and a person's repair `compensate` in any run. Cancelling a run
does not compensate: it stops at once, as it always did.
"""

from __future__ import annotations

from collections.abc import Callable

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from stratagem.domain import compensation, decisions
    from stratagem.domain.ledger import EventKind, StepStatus
    from stratagem.domain.ledger_events import CompensationPlanned
    from stratagem.domain.plan import Author, AuthorKind, Plan, PlanDraft
    from stratagem.domain.run_levels import Change
    from stratagem.domain.run_types import Compensating, FailureAction, Phase, RunState
    from stratagem.domain.scheduling import Reconciliation, reconcile

from .core import has
from .steps import Steps

Adopt = Callable[[Reconciliation, Author, str], Plan]
Problems = Callable[[PlanDraft], list[str]]
End = Callable[[str], None]

AUTHOR = Author(kind=AuthorKind.human, name="compensation")
"""Who the compensation revision is by: derived from the ledger, not written by a model or a person."""


class Compensation:
    def __init__(self, state: RunState, steps: Steps, adopt: Adopt, problems: Problems) -> None:
        self._state = state
        self._steps = steps
        # Planning's: a revision made and checked as every other (given as functions, since
        # Planning, built after this part, asks it when no replan can follow).
        self._adopt = adopt
        self._problems = problems

    @property
    def active(self) -> bool:
        """Whether the run is undoing its effects."""
        return self._state.compensation is not None

    def wanted(self) -> bool:
        """Whether the run compensates when it ends without its goal (on_failure: compensate)."""
        state = self._state
        return (
            has(state, Change.COMPENSATION)
            and state.options.on_failure is FailureAction.compensate
            and state.compensation is None
        )

    def begin(self, reason: str, otherwise: End) -> None:
        """Give up on the goal and undo what ran. With no effect to undo the run ends as
        `otherwise` ends it, saying so; with effects nothing can undo, compensation_failed."""
        state = self._state
        assert state.plan is not None
        derived = compensation.derive(state, reason)
        if not derived.effects:
            return otherwise(f"{reason}; nothing to undo: no step with an effect ran")
        if derived.draft is None:
            return self._cannot(reason, derived, f"nothing undoes {', '.join(derived.cannot_undo)}")
        merged = reconcile(state.plan, derived.draft, state.ledger.steps)
        problems = merged.problems or self._problems(merged.draft)
        if problems:
            return self._cannot(reason, derived, "the compensation plan is invalid: " + "; ".join(problems))
        kept = set(merged.draft.step_ids)
        for step in state.plan.steps:
            record = state.ledger.steps[step.id]
            if step.id not in kept and record.status is StepStatus.running:
                # A step parked on a person (a paused call, a question) gives up with the goal.
                self._steps.close(record, StepStatus.skipped, "the run gave up on its goal")
        plan = self._adopt(merged, AUTHOR, derived.draft.reason)
        state.compensation = Compensating(reason=reason, revision=plan.revision, cannot_undo=derived.cannot_undo)
        asked = compensation.prompt(derived, reason)
        state.ledger.record(
            EventKind.compensation_planned,
            workflow.now(),
            revision=plan.revision,
            message=asked,
            data=CompensationPlanned(reason=reason, undos=derived.originals, cannot_undo=derived.cannot_undo),
        )
        # Reviewed like any revision, whatever the replan policy: a person sees what will be
        # undone and what stays (Review finds this request and asks it; auto_approve approves).
        changes = decisions.review_changes(state, has(state, Change.PARTIAL_REAPPROVAL))
        request = decisions.plan_approval_request(state, workflow.now(), changes=changes)
        request.prompt = f"{asked}: {request.prompt}"
        state.pending = [request]
        state.failure = None
        state.phase = Phase.awaiting_approval

    def _cannot(self, reason: str, derived: compensation.Derived, why: str) -> None:
        """Effects ran and no compensation can run: the run ends compensation_failed, naming them."""
        state = self._state
        assert state.plan is not None
        state.compensation = Compensating(reason=reason, revision=state.plan.revision, cannot_undo=derived.effects)
        self._steps.close_open(StepStatus.skipped, "the run gave up on its goal")
        self._steps.end(
            Phase.compensation_failed,
            f"{reason}; {why}; effects remain: {', '.join(derived.effects)}",
            EventKind.run_compensation_failed,
        )
