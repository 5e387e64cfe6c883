"""Every message a run answers: the decisions people send (approve, reject, revise, answer,
repair, budget), each as an update with a validator and as a signal, and the queries that show its
status, plan, ledger, pending decisions and events.

Temporal requires the handlers on the workflow class, so this is `StratagemRun`'s one base class;
what a decision does is `Decider`'s, and the rules it applies live in `stratagem.decisions`. Wire
names are the constants in `stratagem.handlers`, shared with the client. Workflow code:
deterministic, no I/O.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from stratagem import decisions, handlers, repairs
    from stratagem.catalog import ToolCatalog
    from stratagem.ledger import Ledger
    from stratagem.plan import Plan
    from stratagem.run_types import (
        AnswerInput,
        ApproveInput,
        BudgetInput,
        DecisionOutcome,
        EventPage,
        EventsQuery,
        PendingDecision,
        RejectInput,
        RepairInput,
        ReviseInput,
        RunState,
        RunStatus,
        StepCounts,
    )

from .decider import Decider, DecisionRefused

__all__ = ["DecisionRefused", "Messages"]


class Messages:
    # Set by StratagemRun's __init__, before any handler runs.
    state: RunState
    _decider: Decider

    @workflow.update(name=handlers.APPROVE)
    async def approve(self, decision: ApproveInput) -> DecisionOutcome:
        return self._decider.update(decision, lambda: self._decider.approve(decision, via="update"))

    @approve.validator
    def _validate_approve(self, decision: ApproveInput) -> None:
        self._decider.validate(decisions.check_approve, decision)

    @workflow.signal(name=handlers.signal_name(handlers.APPROVE))
    def approve_signal(self, decision: ApproveInput) -> None:
        decider = self._decider
        decider.signal(decisions.check_approve, decision, lambda: decider.approve(decision, via="signal"))

    @workflow.update(name=handlers.REJECT)
    async def reject(self, decision: RejectInput) -> DecisionOutcome:
        return self._decider.update(decision, lambda: self._decider.reject(decision, via="update"))

    @reject.validator
    def _validate_reject(self, decision: RejectInput) -> None:
        self._decider.validate(decisions.check_reject, decision)

    @workflow.signal(name=handlers.signal_name(handlers.REJECT))
    def reject_signal(self, decision: RejectInput) -> None:
        decider = self._decider
        decider.signal(decisions.check_reject, decision, lambda: decider.reject(decision, via="signal"))

    @workflow.update(name=handlers.REVISE)
    async def revise(self, decision: ReviseInput) -> DecisionOutcome:
        return self._decider.update(decision, lambda: self._decider.revise(decision, via="update"))

    @revise.validator
    def _validate_revise(self, decision: ReviseInput) -> None:
        self._decider.validate(decisions.check_revise, decision)

    @workflow.signal(name=handlers.signal_name(handlers.REVISE))
    def revise_signal(self, decision: ReviseInput) -> None:
        decider = self._decider
        decider.signal(decisions.check_revise, decision, lambda: decider.revise(decision, via="signal"))

    @workflow.update(name=handlers.ANSWER)
    async def answer(self, answer: AnswerInput) -> DecisionOutcome:
        return self._decider.update(answer, lambda: self._decider.answer(answer))

    @answer.validator
    def _validate_answer(self, answer: AnswerInput) -> None:
        self._decider.validate(decisions.check_answer, answer)

    @workflow.signal(name=handlers.signal_name(handlers.ANSWER))
    def answer_signal(self, answer: AnswerInput) -> None:
        decider = self._decider
        decider.signal(decisions.check_answer, answer, lambda: decider.answer(answer))

    @workflow.update(name=handlers.REPAIR)
    async def repair(self, decision: RepairInput) -> DecisionOutcome:
        return self._decider.update(decision, lambda: self._decider.repair(decision, via="update"))

    @repair.validator
    def _validate_repair(self, decision: RepairInput) -> None:
        self._decider.validate(repairs.check_repair, decision)

    @workflow.signal(name=handlers.signal_name(handlers.REPAIR))
    def repair_signal(self, decision: RepairInput) -> None:
        decider = self._decider
        decider.signal(repairs.check_repair, decision, lambda: decider.repair(decision, via="signal"))

    @workflow.update(name=handlers.BUDGET)
    async def budget(self, decision: BudgetInput) -> DecisionOutcome:
        return self._decider.update(decision, lambda: self._decider.budget(decision, via="update"))

    @budget.validator
    def _validate_budget(self, decision: BudgetInput) -> None:
        self._decider.validate(self._decider.check_budget, decision)

    @workflow.signal(name=handlers.signal_name(handlers.BUDGET))
    def budget_signal(self, decision: BudgetInput) -> None:
        decider = self._decider
        decider.signal(decider.check_budget, decision, lambda: decider.budget(decision, via="signal"))

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
