"""What the decisions people send do: each is checked (a refused update never reaches history; a
refused signal is recorded instead of applied) and then applied to the run. The rules, what a
decision may do and what it records, live in `stratagem.domain.decisions` and `stratagem.domain.repairs`; the
handlers that receive them are `Messages`'. Workflow code: deterministic, no I/O.

Each kind's method is marked `@decision(kind, check=...)`, which makes it the kind's row of
`DECISIONS`: the rule that may refuse it and what applying it does. `Messages` registers every row's
update, validator and signal, in the order the methods are written here (the order handlers were
always registered in), so a new kind is written here and needs no edit there.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, NamedTuple

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from stratagem.common.errors import DecisionRefusedError
    from stratagem.common.workflow_errors import DecisionRefused, DecisionTooSoon
    from stratagem.domain import decisions, in_doubt, repairs
    from stratagem.domain.decision_inputs import (
        CallTarget,
        CompensateRepair,
        PlanTarget,
        RetryRepair,
        StepTarget,
        StopRepair,
    )
    from stratagem.domain.decisions import Kind, kinds, quorum
    from stratagem.domain.ledger import EventKind, StepStatus
    from stratagem.domain.plan import Author, AuthorKind
    from stratagem.domain.run_levels import Change
    from stratagem.domain.run_types import (
        AnswerInput,
        ApproveInput,
        BudgetInput,
        DecisionOutcome,
        Phase,
        RejectInput,
        RepairAction,
        RepairInput,
        ResolveInput,
        ReviseInput,
        RunState,
    )
    from stratagem.domain.scheduling import reconcile

from .budgets import Budgets
from .compensation import Compensation
from .control import RunControl
from .core import has
from .execution import Execution
from .planning import Planning
from .progress import Progress
from .steps import Steps

Check = Callable[[RunState, Any], None]


class DecisionMessages(NamedTuple):
    """One kind of decision as the run receives it: its `kind` (stratagem.domain.decisions.kinds: the
    update, validated first, and the signal, both taking the kind's input); `check` gives the rule
    that may refuse it, `apply` what it does (with `via`, "update" or "signal")."""

    kind: Kind
    check: Check
    apply: Callable[[Decider, Any, str], DecisionOutcome]


# Every decision a run takes, one row per kind, in the order Decider's methods are written (the
# order the handlers were always registered in). Names and inputs come from the table of kinds,
# which the client sends by, so the two cannot disagree.
DECISIONS: list[DecisionMessages] = []


def decision(kind: Kind, *, check: Check) -> Callable[[Callable[..., DecisionOutcome]], Any]:
    """Make a Decider method what `kind` does once the domain rule `check` lets it through.
    A method with a `via` parameter is told whether an update or a signal carried the decision."""

    def register(method: Callable[..., DecisionOutcome]) -> Callable[..., DecisionOutcome]:
        takes_via = "via" in inspect.signature(method).parameters

        def apply(decider: Decider, decision: Any, via: str) -> DecisionOutcome:
            return method(decider, decision, via=via) if takes_via else method(decider, decision)

        DECISIONS.append(DecisionMessages(kind, check, apply))
        return method

    return register


def _check_budget(state: RunState, decision: BudgetInput) -> None:
    """The budget rule, with the time the run has taken so far."""
    now = workflow.now()
    started = state.started_at or now
    decisions.check_budget(state, decision, elapsed_seconds=(now - started).total_seconds())


class Decider:
    def __init__(
        self,
        state: RunState,
        control: RunControl,
        progress: Progress,
        steps: Steps,
        budgets: Budgets,
        planning: Planning,
        execution: Execution,
        compensation: Compensation,
    ) -> None:
        self._state = state
        self._compensation = compensation
        self._control = control
        self._progress = progress
        self._steps = steps
        self._budgets = budgets
        self._planning = planning
        self._execution = execution

    # ------------------------------------------------------------------ checking and taking

    def _refusal(self, check: Check, decision: Any) -> DecisionRefused | None:
        state = self._state
        if has(state, Change.DECISIONS_COUNT_ONCE) and decision.verdict is None:
            # No VerifyDecisions on this worker (built without Stratagem's plugin): nothing was
            # checked, so nothing is taken.
            return DecisionRefused(
                "this worker checks no signatures; run it with Stratagem's plugin (stratagem.temporal.plugin)"
            )
        if has(state, Change.DECISIONS_COUNT_ONCE) and decision.signature and _mark(decision) in state.decided:
            # Read from a history and sent again (the same signature), it would decide twice.
            return DecisionRefused("this signed decision was taken already; each counts once")
        try:
            check(state, decision)
        except DecisionRefusedError as exc:
            return DecisionRefused(str(exc))
        return None

    def _took(self, decision: Any) -> None:
        """Remember a signed decision the run took, so the same one sent again is refused."""
        if has(self._state, Change.DECISIONS_COUNT_ONCE) and decision.signature:
            self._state.decided.append(_mark(decision))

    def validate(self, check: Check, decision: Any) -> None:
        """A validator that raises refuses the update before it reaches history; the caller gets the error.

        An update is refused as too soon while the run holds work no workflow task has recorded
        yet (`Progress.too_soon`): taken, it would reach history after that work, and a replay,
        which applies an update before the task's other work, would find the run's commands in
        another order (a nondeterminism error) or decide on another state. Refused, it leaves no
        trace in history; the client sends it again, and it comes in a task of its own."""
        if has(self._state, Change.TOO_SOON_UPDATES) and self._progress.too_soon():
            raise DecisionTooSoon("the run is still recording what it just did; send the decision again in a moment")
        refused = self._refusal(check, decision)
        if refused is not None:
            raise refused

    def update(self, decision: Any, apply: Callable[[], DecisionOutcome]) -> DecisionOutcome:
        """An update the validator let through: applied, taken, shown."""
        outcome = apply()
        self._took(decision)
        self._progress.show()
        return outcome

    def signal(self, check: Check, decision: Any, apply: Callable[[], Any]) -> None:
        """Signals cannot be refused, so a refused one is recorded instead of applied. One the
        worker could not verify (stratagem.common.signing) is refused before its content is looked at."""
        state = self._state
        verdict = decision.verdict
        if verdict is not None and verdict.refused:
            message = f"not verified: {verdict.refused}"
            state.ledger.record(EventKind.signal_ignored, workflow.now(), actor=decision.by, message=message)
            return
        refused = self._refusal(check, decision)
        if refused is not None:
            state.ledger.record(EventKind.signal_ignored, workflow.now(), actor=decision.by, message=refused.message)
            return
        apply()
        self._took(decision)
        self._progress.show()

    # ------------------------------------------------------------------ what each decision does

    @decision(kinds.APPROVE, check=decisions.check_approve)
    def approve(self, decision: ApproveInput, *, via: str) -> DecisionOutcome:
        state = self._state
        if has(state, Change.QUORUM) and (short := quorum.counted(state, decision, via=via, now=workflow.now())):
            return decisions.outcome(state, short)  # recorded; the plan or step waits for more people
        match decision.target:
            case CallTarget(step_id, call_id):
                decisions.decide_call(state, decision, via=via, now=workflow.now())
                return decisions.outcome(state, f"call {call_id} of step '{step_id}' approved")
            case StepTarget(step_id) if decision.args is not None and has(state, Change.EDIT_AND_APPROVE):
                return self._approve_edited(decision, step_id, via=via)
            case StepTarget():
                self._control.decide_step(decision, via=via)
            case PlanTarget():
                decisions.approve_plan(state, decision, via=via, now=workflow.now())
                if has(state, Change.MEMO_HELD_BY_APPROVAL):
                    self._progress.hold_memo()
        return decisions.outcome(state, "approved")

    def _approve_edited(self, decision: ApproveInput, step_id: str, *, via: str) -> DecisionOutcome:
        """A gated step approved with changed arguments: a revision by its approver, approved by
        the same decision (only this step changed), and the step approved as it will now run."""
        state = self._state
        assert state.plan is not None
        changed = decisions.argument_edits(state.plan.step(step_id), state, decision.args or {})
        draft = decisions.edited_plan(state, decision)
        author = Author(kind=AuthorKind.human, name=decision.by)
        plan = self._planning.adopt(reconcile(state.plan, draft, state.ledger.steps), author, draft.reason)
        decisions.approve_edited(state, decision, changed, via=via, now=workflow.now())
        # The step waits in the execution of the revision before, as it was: that execution winds
        # up (running steps finish) and the run goes on with this revision, which runs the edit.
        self._control.stop()
        return decisions.outcome(
            state,
            f"step '{step_id}' approved with {', '.join(changed)} changed, in revision {plan.revision} by {decision.by}",
        )

    @decision(kinds.REJECT, check=decisions.check_reject)
    def reject(self, decision: RejectInput, *, via: str) -> DecisionOutcome:
        state = self._state
        match decision.target:
            case CallTarget(step_id, call_id):
                decisions.decide_call(state, decision, via=via, now=workflow.now())
                return decisions.outcome(state, f"call {call_id} of step '{step_id}' rejected; the step is told")
            case StepTarget(step_id):
                self._control.decide_step(decision, via=via)
                if has(state, Change.REJECTED_STEP_REPAIRS):
                    return decisions.outcome(state, decisions.sent_back(state, step_id))
                return decisions.outcome(state, "step rejected; the run ends once running steps finish")
            case PlanTarget():
                return self._reject_plan(decision, via=via)

    def _reject_plan(self, decision: RejectInput, *, via: str) -> DecisionOutcome:
        state = self._state
        reason = decisions.record_plan_rejection(state, decision, via=via, now=workflow.now())
        if self._compensation.wanted():
            return self._give_up(reason)
        if self._execution.busy:
            # A revision made while the run ran was rejected: its running steps finish first, and
            # the execution loop then ends the run, so no step records an end after the run's.
            self._control.reject(reason)
            return decisions.outcome(state, "rejected; the run ends once running steps finish")
        self._rejected(reason)
        return decisions.outcome(state, "rejected")

    def _give_up(self, reason: str) -> DecisionOutcome:
        """A revision rejected in a run that compensates (level 10): what ran is undone, once the
        running steps finish; a rejected revision that ran nothing ends the run rejected."""
        state = self._state
        if self._execution.busy:
            self._control.give_up(reason)
            return decisions.outcome(state, "rejected; the run undoes what ran once running steps finish")
        self._compensation.begin(reason, self._rejected)
        if state.phase is Phase.awaiting_approval:
            return decisions.outcome(state, f"rejected; the run undoes what ran: {_undos(state)} awaits approval")
        return decisions.outcome(state, "rejected")

    def _rejected(self, reason: str) -> None:
        self._steps.reject_run(reason, "plan rejected")

    @decision(kinds.REVISE, check=decisions.check_revise)
    def revise(self, decision: ReviseInput, *, via: str) -> DecisionOutcome:
        state = self._state
        running = state.phase is Phase.running
        merged = reconcile(state.plan, decision.plan, state.ledger.steps)
        author = Author(kind=AuthorKind.human, name=decision.by)
        plan = self._planning.adopt(merged, author, decision.reason or decision.plan.reason or "edited by a reviewer")
        decisions.record_revision(
            state, decision, plan, via=via, now=workflow.now(), partial=has(state, Change.PARTIAL_REAPPROVAL)
        )
        if running:
            # Nothing new starts and steps waiting on people give up for now; running ones finish.
            # The execution loop then ends, and the new revision runs once it is approved.
            self._control.stop()
        if state.phase is Phase.running:
            return decisions.outcome(state, f"revision {plan.revision} keeps the approval: no step changed")
        return decisions.outcome(state, f"revision {plan.revision} awaits approval")

    @decision(kinds.ANSWER, check=decisions.check_answer)
    def answer(self, answer: AnswerInput) -> DecisionOutcome:
        decisions.record_answer(self._state, answer, workflow.now())
        return decisions.outcome(self._state, f"answer recorded for step '{answer.step_id}'")

    @decision(kinds.REPAIR, check=repairs.check_repair)
    def repair(self, decision: RepairInput, *, via: str) -> DecisionOutcome:
        state = self._state
        assert state.plan is not None, "a run waits for a repair only once it has a plan"
        match decision.repair:
            case RetryRepair(step_id, args) if args is not None and repairs.changes_args(state, step_id, args):
                self._retry_with(decision, step_id, args, via=via)
        stop = repairs.apply_repair(state, decision, via=via, now=workflow.now())
        if stop is not None:
            return self._stopped(decision, stop)
        done = {RepairAction.retry: "retried", RepairAction.skip: "skipped"}.get(decision.action, "asked again")
        if decision.action is RepairAction.retry and repairs.asks_again(state, decision.step_id):
            done += " (its approval is asked again before it runs)"
        if state.phase is Phase.running:
            return decisions.outcome(state, f"step '{decision.step_id}' {done}; the run goes on")
        if state.phase is Phase.awaiting_approval:
            return decisions.outcome(
                state, f"step '{decision.step_id}' {done}; the current revision awaits approval before the run goes on"
            )
        left = ", ".join(repairs.failed_steps(state))
        return decisions.outcome(state, f"step '{decision.step_id}' {done}; still failed: {left}")

    def _stopped(self, decision: RepairInput, stop: str) -> DecisionOutcome:
        """A stop ends the run (or, with on_failure: compensate, undoes what ran first); a
        compensate repair undoes what ran; a stop while undoing ends the compensation."""
        state = self._state
        compensating = self._compensation.active
        if isinstance(decision.repair, CompensateRepair) or (
            isinstance(decision.repair, StopRepair) and self._compensation.wanted()
        ):
            self._compensation.begin(stop, self._steps.fail_run)
        else:
            self._steps.fail_run(stop)
        if state.phase is Phase.awaiting_approval:
            return decisions.outcome(state, f"the run undoes what ran: {_undos(state)} awaits approval")
        if compensating:
            return decisions.outcome(state, "the compensation is stopped; effects remain")
        if state.phase is Phase.compensation_failed:
            return decisions.outcome(state, "nothing can undo what ran; the run ends with its effects")
        return decisions.outcome(state, "the run is stopped")

    def _retry_with(self, decision: RepairInput, step_id: str, args: dict[str, Any], *, via: str) -> None:
        """A retry with new arguments: a new revision that runs this step again."""
        state = self._state
        assert state.plan is not None
        draft = repairs.retried_plan(state, step_id, args)
        author = Author(kind=AuthorKind.human, name=decision.by)
        # The new revision runs this step again; the other failed steps still wait for their repair.
        others = {sid: state.ledger.steps[sid].error for sid in repairs.failed_steps(state)}
        others.pop(step_id, None)
        # Retrying is approving the new arguments, but not a revision someone else is still reviewing.
        approved = state.approved_revision == state.plan.revision
        if has(state, Change.QUORUM) and quorum.applies(state, None):
            approved = False  # one person's retry cannot meet the plan's quorum or other eyes: it is reviewed
        self._planning.adopt(reconcile(state.plan, draft, state.ledger.steps), author, draft.reason)
        for sid, error in others.items():
            state.ledger.steps[sid].status, state.ledger.steps[sid].error = StepStatus.failed, error
        if approved:
            repairs.approve_repair(state, decision, via=via, now=workflow.now())

    @decision(kinds.BUDGET, check=_check_budget)
    def budget(self, decision: BudgetInput, *, via: str) -> DecisionOutcome:
        stop = decisions.apply_budget(
            self._state, decision, via=via, now=workflow.now(), still_used_up=self._budgets.used_up
        )
        self._budgets.changed()
        if stop is not None:
            self._control.reject(stop)
            return decisions.outcome(self._state, "the run stops once running steps finish")
        return decisions.outcome(self._state, "budget changed")

    @decision(kinds.RESOLVE, check=in_doubt.check_resolve)
    def resolve(self, decision: ResolveInput, *, via: str) -> DecisionOutcome:
        """A person's word on a step in doubt (level 10): its effect happened, and it succeeds with
        the output given; or it did not, and it runs again. The step's task, parked on the word
        (workflows/doubts.py), goes on from what its record now says."""
        state, step_id = self._state, decision.step_id
        record = in_doubt.apply_resolve(state, decision, via=via, now=workflow.now())
        if not decision.happened:
            return decisions.outcome(state, f"step '{step_id}' runs again")
        self._steps.close(record, StepStatus.succeeded, None)
        revision = state.plan.revision if state.plan else None
        state.ledger.record(EventKind.step_succeeded, workflow.now(), revision=revision, step_id=step_id)
        return decisions.outcome(state, f"step '{step_id}' succeeded with the output given; the run goes on")


def _undos(state: RunState) -> str:
    """The compensation's revision, as a decision's outcome names it."""
    return f"revision {state.compensation.revision}" if state.compensation else "the compensation"


def _mark(decision: Any) -> str:
    """What tells one signed decision from another: the start of its signature (an Ed25519
    signature over a decision with a random nonce; 24 base64 characters are 144 bits)."""
    return str(decision.signature)[:24]
