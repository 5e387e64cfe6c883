"""Every message a run answers: the decisions people send (approve, reject, revise, answer,
budget), each as an update with a validator and as a signal, and the queries that show its
status, plan, ledger, pending decisions and events.

Temporal requires the handlers on the workflow class (this is one of its parts); the rules, what
a decision may do and what it records, live in `stratagem.decisions`. Wire names are the
constants in `stratagem.handlers`, shared with the client. Workflow code: deterministic, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from stratagem import decisions, handlers, repairs
    from stratagem.catalog import ToolCatalog
    from stratagem.errors import DecisionRefusedError
    from stratagem.ledger import EventKind, Ledger, StepStatus
    from stratagem.plan import Author, AuthorKind, Plan
    from stratagem.run_types import (
        AnswerInput,
        ApproveInput,
        BudgetInput,
        DecisionOutcome,
        EventPage,
        EventsQuery,
        PendingDecision,
        Phase,
        RejectInput,
        RepairAction,
        RepairInput,
        ReviseInput,
        RunState,
        RunStatus,
        StepCounts,
    )
    from stratagem.scheduling import reconcile

from .execution import Execution


class DecisionRefused(ApplicationError):
    def __init__(self, message: str):
        super().__init__(message, type="DecisionRefused", non_retryable=True)


class Messages(Execution):
    @workflow.update(name=handlers.APPROVE)
    async def approve(self, decision: ApproveInput) -> DecisionOutcome:
        outcome = self._apply_approve(decision, via="update")
        self._took(decision)
        self._show()
        return outcome

    @approve.validator
    def _validate_approve(self, decision: ApproveInput) -> None:
        self._validate(decisions.check_approve, decision)

    @workflow.signal(name=handlers.signal_name(handlers.APPROVE))
    def approve_signal(self, decision: ApproveInput) -> None:
        self._signal(decisions.check_approve, decision, lambda: self._apply_approve(decision, via="signal"))

    @workflow.update(name=handlers.REJECT)
    async def reject(self, decision: RejectInput) -> DecisionOutcome:
        outcome = self._apply_reject(decision, via="update")
        self._took(decision)
        self._show()
        return outcome

    @reject.validator
    def _validate_reject(self, decision: RejectInput) -> None:
        self._validate(decisions.check_reject, decision)

    @workflow.signal(name=handlers.signal_name(handlers.REJECT))
    def reject_signal(self, decision: RejectInput) -> None:
        self._signal(decisions.check_reject, decision, lambda: self._apply_reject(decision, via="signal"))

    @workflow.update(name=handlers.REVISE)
    async def revise(self, decision: ReviseInput) -> DecisionOutcome:
        outcome = self._apply_revise(decision, via="update")
        self._took(decision)
        self._show()
        return outcome

    @revise.validator
    def _validate_revise(self, decision: ReviseInput) -> None:
        self._validate(decisions.check_revise, decision)

    @workflow.signal(name=handlers.signal_name(handlers.REVISE))
    def revise_signal(self, decision: ReviseInput) -> None:
        self._signal(decisions.check_revise, decision, lambda: self._apply_revise(decision, via="signal"))

    @workflow.update(name=handlers.ANSWER)
    async def answer(self, answer: AnswerInput) -> DecisionOutcome:
        outcome = self._apply_answer(answer)
        self._took(answer)
        self._show()
        return outcome

    @answer.validator
    def _validate_answer(self, answer: AnswerInput) -> None:
        self._validate(decisions.check_answer, answer)

    @workflow.signal(name=handlers.signal_name(handlers.ANSWER))
    def answer_signal(self, answer: AnswerInput) -> None:
        self._signal(decisions.check_answer, answer, lambda: self._apply_answer(answer))

    @workflow.update(name=handlers.REPAIR)
    async def repair(self, decision: RepairInput) -> DecisionOutcome:
        outcome = self._apply_repair(decision, via="update")
        self._took(decision)
        self._show()
        return outcome

    @repair.validator
    def _validate_repair(self, decision: RepairInput) -> None:
        self._validate(repairs.check_repair, decision)

    @workflow.signal(name=handlers.signal_name(handlers.REPAIR))
    def repair_signal(self, decision: RepairInput) -> None:
        self._signal(repairs.check_repair, decision, lambda: self._apply_repair(decision, via="signal"))

    def _refusal(self, check: Callable[[RunState, Any], None], decision: Any) -> DecisionRefused | None:
        # As an ApplicationError the refusal reaches update callers with its type.
        if self.state.level >= 7 and decision.verdict is None:
            # No VerifyDecisions on this worker (built without Stratagem's plugin): nothing was
            # checked, so nothing is taken.
            return DecisionRefused(
                "this worker checks no signatures; run it with Stratagem's plugin (stratagem.plugin)"
            )
        if self.state.level >= 7 and decision.signature and _mark(decision) in self.state.decided:
            # Read from a history and sent again (the same signature), it would decide twice.
            return DecisionRefused("this signed decision was taken already; each counts once")
        try:
            check(self.state, decision)
        except DecisionRefusedError as exc:
            return DecisionRefused(str(exc))
        return None

    def _took(self, decision: Any) -> None:
        """Remember a signed decision the run took, so the same one sent again is refused."""
        if self.state.level >= 7 and decision.signature:
            self.state.decided.append(_mark(decision))

    def _validate(self, check: Callable[[RunState, Any], None], decision: Any) -> None:
        """A validator that raises refuses the update before it reaches history; the caller gets the error."""
        refused = self._refusal(check, decision)
        if refused is not None:
            raise refused

    def _signal(self, check: Callable[[RunState, Any], None], decision: Any, apply: Callable[[], Any]) -> None:
        """Signals cannot be refused, so a refused one is recorded instead of applied. One the
        worker could not verify (stratagem.signing) is refused before its content is looked at."""
        verdict = decision.verdict
        if verdict is not None and verdict.refused:
            message = f"not verified: {verdict.refused}"
            self.state.ledger.record(EventKind.signal_ignored, self._now(), actor=decision.by, message=message)
            return
        refused = self._refusal(check, decision)
        if refused is not None:
            self.state.ledger.record(EventKind.signal_ignored, self._now(), actor=decision.by, message=refused.message)
            return
        apply()
        self._took(decision)
        self._show()

    def _apply_approve(self, decision: ApproveInput, *, via: str) -> DecisionOutcome:
        if decision.call_id is not None:
            decisions.decide_call(self.state, decision, via=via, now=self._now())
            return decisions.outcome(self.state, f"call {decision.call_id} of step '{decision.step_id}' approved")
        if decision.step_id is not None:
            self._decide_step(decision, via=via)
        else:
            decisions.approve_plan(self.state, decision, via=via, now=self._now())
            if self.state.level >= 2:
                # The phase's memo write waits for the next workflow task (_memo_held): in this
                # one it delayed the first step's start by the server's visibility update.
                self._memo_hold = workflow.info().get_current_history_length()
        return decisions.outcome(self.state, "approved")

    def _apply_reject(self, decision: RejectInput, *, via: str) -> DecisionOutcome:
        if decision.call_id is not None:
            decisions.decide_call(self.state, decision, via=via, now=self._now())
            return decisions.outcome(
                self.state, f"call {decision.call_id} of step '{decision.step_id}' rejected; the step is told"
            )
        if decision.step_id is not None:
            self._decide_step(decision, via=via)
            return decisions.outcome(self.state, "step rejected; the run ends once running steps finish")
        reason = decisions.record_plan_rejection(self.state, decision, via=via, now=self._now())
        if self._tasks:
            # A revision made while the run ran was rejected: its running steps finish first, and
            # the execution loop then ends the run, so no step records an end after the run's.
            self._rejection, self._stopping = reason, True
            return decisions.outcome(self.state, "rejected; the run ends once running steps finish")
        self._close_open_steps(StepStatus.skipped, "plan rejected")
        self._end(Phase.rejected, reason, EventKind.run_rejected)
        return decisions.outcome(self.state, "rejected")

    def _apply_revise(self, decision: ReviseInput, *, via: str) -> DecisionOutcome:
        running = self.state.phase is Phase.running
        merged = reconcile(self.state.plan, decision.plan, self.state.ledger.steps)
        author = Author(kind=AuthorKind.human, name=decision.by)
        plan = self._adopt(merged, author, decision.reason or decision.plan.reason or "edited by a reviewer")
        decisions.record_revision(self.state, decision, plan, via=via, now=self._now(), partial=self._partial())
        if running:
            # Nothing new starts and steps waiting on people give up for now; running ones finish.
            # The execution loop then ends, and the new revision runs once it is approved.
            self._stopping = True
        if self.state.phase is Phase.running:
            return decisions.outcome(self.state, f"revision {plan.revision} keeps the approval: no step changed")
        return decisions.outcome(self.state, f"revision {plan.revision} awaits approval")

    def _apply_repair(self, decision: RepairInput, *, via: str) -> DecisionOutcome:
        state = self.state
        assert state.plan is not None, "a run waits for a repair only once it has a plan"
        if decision.action is RepairAction.retry and decision.args is not None:
            assert decision.step_id is not None
            draft = repairs.retried_plan(state, decision.step_id, decision.args)
            author = Author(kind=AuthorKind.human, name=decision.by)
            # The new revision runs this step again; the other failed steps still wait for their repair.
            others = {sid: state.ledger.steps[sid].error for sid in repairs.failed_steps(state)}
            others.pop(decision.step_id, None)
            # Retrying is approving the new arguments, but not a revision someone else is still reviewing.
            approved = state.approved_revision == state.plan.revision
            self._adopt(reconcile(state.plan, draft, state.ledger.steps), author, draft.reason)
            for sid, error in others.items():
                state.ledger.steps[sid].status, state.ledger.steps[sid].error = StepStatus.failed, error
            if approved:
                repairs.approve_repair(state, decision, via=via, now=self._now())
        stop = repairs.apply_repair(state, decision, via=via, now=self._now())
        if stop is not None:
            self._fail(stop)
            return decisions.outcome(state, "the run is stopped")
        done = {RepairAction.retry: "retried", RepairAction.skip: "skipped"}.get(decision.action, "asked again")
        if state.phase is Phase.running:
            return decisions.outcome(state, f"step '{decision.step_id}' {done}; the run goes on")
        if state.phase is Phase.awaiting_approval:
            return decisions.outcome(
                state, f"step '{decision.step_id}' {done}; the current revision awaits approval before the run goes on"
            )
        left = ", ".join(repairs.failed_steps(state))
        return decisions.outcome(state, f"step '{decision.step_id}' {done}; still failed: {left}")

    def _apply_answer(self, answer: AnswerInput) -> DecisionOutcome:
        decisions.record_answer(self.state, answer, self._now())
        return decisions.outcome(self.state, f"answer recorded for step '{answer.step_id}'")

    @workflow.update(name=handlers.BUDGET)
    async def budget(self, decision: BudgetInput) -> DecisionOutcome:
        outcome = self._apply_budget(decision, via="update")
        self._took(decision)
        self._show()
        return outcome

    @budget.validator
    def _validate_budget(self, decision: BudgetInput) -> None:
        self._validate(self._check_budget, decision)

    @workflow.signal(name=handlers.signal_name(handlers.BUDGET))
    def budget_signal(self, decision: BudgetInput) -> None:
        self._signal(self._check_budget, decision, lambda: self._apply_budget(decision, via="signal"))

    def _check_budget(self, state: RunState, decision: BudgetInput) -> None:
        started = state.started_at or self._now()
        decisions.check_budget(state, decision, elapsed_seconds=(self._now() - started).total_seconds())

    def _apply_budget(self, decision: BudgetInput, *, via: str) -> DecisionOutcome:
        stop = decisions.apply_budget(
            self.state, decision, via=via, now=self._now(), still_used_up=self._budget_used_up
        )
        self._budget_epoch += 1
        if stop is not None:
            self._rejection = stop
            self._stopping = True
            return decisions.outcome(self.state, "the run stops once running steps finish")
        return decisions.outcome(self.state, "budget changed")

    # ------------------------------------------------------------------ queries

    @workflow.query(name=handlers.STATUS)
    def status(self) -> RunStatus:
        state = self.state
        counts = StepCounts()
        if state.plan is not None:
            for step in state.plan.steps:
                status = state.ledger.steps[step.id].status.value
                setattr(counts, status, getattr(counts, status) + 1)
        return RunStatus(
            run_id=state.run_id,
            goal=state.goal,
            phase=state.phase,
            revision=state.plan.revision if state.plan else None,
            approved_revision=state.approved_revision,
            steps=counts,
            pending=state.pending,
            replans=state.ledger.replans,
            max_replans=state.options.max_replans,
            reason=state.reason,
            continued=state.continued,
            usage=state.ledger.usage,
            budget=state.options.budget,
            mode=state.options.mode,
            workspace=state.options.workspace,
        )

    @workflow.query(name=handlers.PLAN)
    def plan(self) -> Plan | None:
        return self.state.plan

    @workflow.query(name=handlers.LEDGER)
    def ledger(self) -> Ledger:
        return self.state.ledger

    @workflow.query(name=handlers.CATALOG)
    def catalog(self) -> ToolCatalog:
        """The run's tools as the worker declared them: what plan tables show effective risk with."""
        return self.state.catalog

    @workflow.query(name=handlers.PENDING)
    def pending(self) -> list[PendingDecision]:
        return self.state.pending

    @workflow.query(name=handlers.EVENTS)
    def events(self, query: EventsQuery) -> EventPage:
        """The progress stream from an offset: small pages, so a watcher never fetches the whole ledger."""
        ledger = self.state.ledger
        return EventPage(
            events=ledger.events_after(query.after, query.limit),
            last_seq=ledger.last_seq,
            phase=self.state.phase,
            archives=[a for a in ledger.archives if a.last_seq > query.after],
        )


def _mark(decision: Any) -> str:
    """What tells one signed decision from another: the start of its signature (an Ed25519
    signature over a decision with a random nonce; 24 base64 characters are 144 bits)."""
    return str(decision.signature)[:24]
