"""How a step's record moves (started, failed, closed) and how model calls and tool calls are
recorded, with the budget warnings they cross.

Plain functions over `RunState`, beside `stratagem.domain.decisions` and for the same reason: no
Temporal in them, time passed in as `now`. The workflow wraps them with what only it holds (the
scheduling frontier, metrics, spans) and decides what the run does next.
"""

from __future__ import annotations

from datetime import datetime

from stratagem.domain.ledger import EventKind, StepRecord, StepStatus, ToolCallRecord, ToolCallStatus
from stratagem.domain.ledger_events import BudgetWarning, StepFailed, ToolCalled
from stratagem.domain.run_types import RunState
from stratagem.domain.usage import CallUsage, UsageTotals, budget_warnings


def _revision(state: RunState) -> int | None:
    return state.plan.revision if state.plan else None


def start_step(state: RunState, record: StepRecord, revision: int, now: datetime) -> None:
    record.status = StepStatus.running
    record.started_at = now
    record.ended_at = None
    record.revision = revision
    state.ledger.record(EventKind.step_started, now, revision=revision, step_id=record.step_id)


def close_step(state: RunState, record: StepRecord, status: StepStatus, error: str | None, now: datetime) -> None:
    """End the step's record; a skipped or cancelled step's end is an event of its own (a
    succeeded or failed one is recorded by the caller, with what it learned)."""
    record.status = status
    record.error = error
    record.ended_at = now
    if status in (StepStatus.skipped, StepStatus.cancelled):
        kind = EventKind.step_skipped if status is StepStatus.skipped else EventKind.step_cancelled
        state.ledger.record(kind, now, step_id=record.step_id, message=error or "")


def fail_step(
    state: RunState, record: StepRecord, error: str, *, attempts: int, now: datetime, trigger: str = "step_failed"
) -> bool:
    """Record the step's failure. True when it is the run's first since its last revision: the
    failure the next replan answers. `trigger` says what kind of failure the replan answers:
    step_failed, criteria_unmet (the step ran, and its answer did not meet its criteria), or
    step_rejected (a person sent the gated step back before it ran; `error` says who and why)."""
    record.attempts += attempts
    close_step(state, record, StepStatus.failed, error, now)
    state.ledger.record(
        EventKind.step_failed,
        now,
        revision=_revision(state),
        step_id=record.step_id,
        message=error,
        data=StepFailed(attempts=attempts, trigger=trigger),
    )
    if state.failure is not None:
        return False
    if trigger == "criteria_unmet":
        state.failure = error
    elif trigger == "step_rejected":
        state.failure = f"step '{record.step_id}' {error}"
    else:
        state.failure = f"step '{record.step_id}' failed: {error}"
    return True


def record_calls(
    state: RunState, calls: list[CallUsage], purpose: str, now: datetime, step_id: str | None = None
) -> UsageTotals:
    """Model calls into the ledger, priced, and a warning for each budget they brought near its limit."""
    totals = state.ledger.record_calls(
        calls, now, purpose=purpose, prices=state.options.prices, step_id=step_id, revision=_revision(state)
    )
    for warning in budget_warnings(state.options.budget, state.ledger.usage, state.budget_warned):
        state.budget_warned.append(warning.dimension)
        state.ledger.record(
            EventKind.budget_warning, now, message=warning.message, data=BudgetWarning(dimension=warning.dimension)
        )
    return totals


def record_tool_calls(state: RunState, step_id: str, tool_calls: list[ToolCallRecord], now: datetime) -> None:
    """The tool calls an llm step's executor made (or was refused), on its record and as events."""
    ledger, revision = state.ledger, _revision(state)
    ledger.steps[step_id].tool_calls.extend(tool_calls)
    for call in tool_calls:
        refused = call.status is ToolCallStatus.refused
        ledger.record(
            EventKind.tool_call_refused if refused else EventKind.tool_called,
            now,
            revision=revision,
            step_id=step_id,
            message=call.message or call.tool,
            data=ToolCalled(tool=call.tool, call=call.call, status=call.status.value),
        )


def record_negotiated(state: RunState, notes: list[str], now: datetime) -> None:
    """What the run's models' endpoints were found to support, once per run."""
    if not notes:
        return
    known = {e.message for e in state.ledger.events if e.kind is EventKind.model_negotiated}
    for note in notes:
        if note not in known:
            known.add(note)
            state.ledger.record(EventKind.model_negotiated, now, message=note)


def record_failovers(state: RunState, notes: list[str], now: datetime, step_id: str | None = None) -> None:
    """Calls that went to the next model of a failover tier, and why."""
    for note in notes:
        state.ledger.record(EventKind.model_failover, now, revision=_revision(state), step_id=step_id, message=note)
