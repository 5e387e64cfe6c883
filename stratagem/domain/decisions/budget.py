"""The budget decision: a run that used its budget up waits for a person to raise a limit or stop
it; a limit may also be raised at any time, as long as it leaves room above what was used.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from stratagem.common.errors import DecisionRefusedError
from stratagem.domain.decision_inputs import Stop
from stratagem.domain.decisions.common import check_approver, check_open, pending_for, record_decision
from stratagem.domain.ledger import DecisionAction, EventKind
from stratagem.domain.ledger_events import BudgetChanged, BudgetExhausted
from stratagem.domain.run_types import BudgetInput, DecisionKind, PendingDecision, RunState
from stratagem.domain.usage import price_for


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
        EventKind.budget_exhausted,
        now,
        revision=revision,
        message=reasons,
        data=BudgetExhausted(usage=state.ledger.usage),
    )
    return True


def apply_budget(
    state: RunState, decision: BudgetInput, *, via: str, now: datetime, still_used_up: Callable[[], list[str]]
) -> Stop | None:
    """Change the budget, or stop the run; returns why the run must stop, if it must."""
    revision = state.plan.revision if state.plan else 0
    if decision.stop:
        comment = decision.reason or "stopped at the budget"
        record_decision(
            state, DecisionAction.budget, decision.by, now, revision, f"stop: {comment}", via, decision=decision
        )
        state.pending = [p for p in state.pending if p.kind is not DecisionKind.budget]
        return Stop(f"stopped by {decision.by} when the budget ran out: {comment}")
    before = state.options.budget.model_dump(exclude_none=True)
    state.options.budget = state.options.budget.model_copy(update=decision.limits)
    changes = ", ".join(
        f"{name} {before.get(name, 'unlimited')} -> {limit:g}" for name, limit in decision.limits.items()
    )
    record_decision(
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
        data=BudgetChanged(via=via, budget=state.options.budget.model_dump(exclude_none=True)),
    )
    if not still_used_up():
        state.pending = [p for p in state.pending if p.kind is not DecisionKind.budget]
    return None


def waiting(pending: PendingDecision) -> str:
    """What the run waits for, in words (notifications, the console, the inbox)."""
    return "a budget decision"


def question(pending: PendingDecision) -> str:
    """The question a person is asked at the terminal (before the choices)."""
    return f"paused: {pending.prompt}"
