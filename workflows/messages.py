"""Every message a run answers: the decisions people send (approve, reject, revise, answer,
repair, budget), each as an update with a validator and as a signal, and the queries that show its
status, plan, ledger, pending decisions and events.

Temporal requires the handlers on the workflow class, so this is `StratagemRun`'s one base class;
what a decision does is `Decider`'s, whose `@decision` methods are the rows of `DECISIONS` registered
here, and the rules it applies live in `stratagem.domain.decisions`. A decision's wire names are
its kind's (stratagem.domain.decisions.kinds), a query's the constants in
`stratagem.domain.handlers`, both shared with the client. Workflow code: deterministic, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from stratagem.domain import handlers
    from stratagem.domain.catalog import ToolCatalog
    from stratagem.domain.ledger import Ledger
    from stratagem.domain.plan import Plan
    from stratagem.domain.run_types import (
        DecisionOutcome,
        EventPage,
        EventsQuery,
        PendingDecision,
        RunState,
        RunStatus,
        StepCounts,
    )

from .decider import DECISIONS, Decider, DecisionMessages, DecisionRefused

__all__ = ["DECISIONS", "DecisionMessages", "DecisionRefused", "Messages"]


class _Run(Protocol):
    _decider: Decider


def _with_decision_handlers(cls: type[Any]) -> type[Any]:
    """Put each decision's update (with its validator) and signal on the class, as methods named
    as they always were (`approve`, `_validate_approve`, `approve_signal`).

    On the class, not set in __init__ with workflow.set_update_handler/set_signal_handler: the
    SDK buffers a signal of the run's first workflow task that has no handler yet, and __init__
    runs after it has scheduled run(), so run() would start before the signal is handled; as a
    method, the signal is handled first, as it always was."""
    for row in DECISIONS:
        for attribute, method in _methods(row).items():
            method.__name__, method.__qualname__ = attribute, f"{cls.__name__}.{attribute}"
            method.__module__ = cls.__module__
            setattr(cls, attribute, method)
    return cls


def _methods(row: DecisionMessages) -> dict[str, Callable[..., Any]]:
    kind = row.kind

    async def update(self: _Run, decision: Any) -> DecisionOutcome:
        decider = self._decider
        return decider.update(decision, lambda: row.apply(decider, decision, "update"))

    def validate(self: _Run, decision: Any) -> None:
        self._decider.validate(row.check, decision)

    def signal(self: _Run, decision: Any) -> None:
        decider = self._decider
        decider.signal(row.check, decision, lambda: row.apply(decider, decision, "signal"))

    # The SDK converts a payload to the type the handler's annotation names.
    # (A method's `self` carries no annotation there, as on a method written out.)
    update.__annotations__ = {"decision": kind.input, "return": DecisionOutcome}
    validate.__annotations__ = {"decision": kind.input, "return": None}
    signal.__annotations__ = {"decision": kind.input, "return": None}
    handler = workflow.update(name=kind.update)(update)
    handler.validator(validate)
    return {
        kind.name: handler,
        f"_validate_{kind.name}": validate,
        f"{kind.name}_signal": workflow.signal(name=kind.signal)(signal),
    }


@_with_decision_handlers
class Messages:
    # Set by StratagemRun's __init__, before any handler runs.
    state: RunState
    _decider: Decider

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
            process=state.process,
            compensation=state.compensation,
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
