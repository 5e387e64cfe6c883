"""Step transitions and usage recording on a hand-built RunState, without Temporal: what a
record says after each move, which events the ledger gets, and which failure a replan answers."""

from __future__ import annotations

import pytest
from support.states import NOW, make_state

from stratagem.domain import transitions
from stratagem.domain.ledger import EventKind, StepStatus, ToolCallRecord, ToolCallStatus
from stratagem.domain.run_types import Budget, RunOptions, RunState
from stratagem.domain.usage import CallUsage

pytestmark = pytest.mark.unit


def kinds(state: RunState) -> list[EventKind]:
    return [e.kind for e in state.ledger.events]


def test_a_started_step_is_running_under_its_revision_and_forgets_an_earlier_end() -> None:
    state = make_state()
    record = state.ledger.steps["first"]
    record.ended_at = NOW
    transitions.start_step(state, record, 1, NOW)
    assert (record.status, record.started_at, record.ended_at, record.revision) == (StepStatus.running, NOW, None, 1)
    assert kinds(state)[-1] is EventKind.step_started and state.ledger.events[-1].step_id == "first"


def test_only_the_first_failure_since_a_revision_is_the_one_a_replan_answers() -> None:
    state = make_state()
    first, second = state.ledger.steps["first"], state.ledger.steps["second"]
    assert transitions.fail_step(state, first, "disk full", attempts=3, now=NOW) is True
    assert transitions.fail_step(state, second, "timeout", attempts=1, now=NOW) is False
    assert state.failure == "step 'first' failed: disk full"
    assert (first.status, first.error, first.attempts, first.ended_at) == (StepStatus.failed, "disk full", 3, NOW)
    failed = [e for e in state.ledger.events if e.kind is EventKind.step_failed]
    assert [(e.step_id, e.message, e.revision) for e in failed] == [("first", "disk full", 1), ("second", "timeout", 1)]


def test_a_skipped_or_cancelled_step_is_an_event_a_succeeded_one_is_left_to_the_caller() -> None:
    state = make_state()
    transitions.close_step(state, state.ledger.steps["first"], StepStatus.skipped, "dropped by revision 2", NOW)
    transitions.close_step(state, state.ledger.steps["second"], StepStatus.succeeded, None, NOW)
    assert kinds(state) == [EventKind.step_skipped]
    assert state.ledger.events[-1].message == "dropped by revision 2"
    assert state.ledger.steps["second"].status is StepStatus.succeeded


def test_calls_near_a_budget_warn_once() -> None:
    state = make_state()
    state.options = RunOptions(budget=Budget(tokens=1000))
    totals = transitions.record_calls(state, [CallUsage(model="m", input_tokens=700, output_tokens=150)], "plan", NOW)
    assert totals.calls == 1 and state.ledger.usage.input_tokens == 700
    transitions.record_calls(state, [CallUsage(model="m", input_tokens=10)], "plan", NOW)
    warnings = [e for e in state.ledger.events if e.kind is EventKind.budget_warning]
    assert len(warnings) == 1 and "85%" in warnings[0].message
    assert state.budget_warned == ["tokens"]


def test_an_executors_tool_calls_land_on_its_record_refused_ones_as_refusals() -> None:
    state = make_state()
    calls = [
        ToolCallRecord(call=1, tool="record", status=ToolCallStatus.ok),
        ToolCallRecord(call=2, tool="pay", status=ToolCallStatus.refused, message="not allowed"),
    ]
    transitions.record_tool_calls(state, "first", calls, NOW)
    assert state.ledger.steps["first"].tool_calls == calls
    assert kinds(state)[-2:] == [EventKind.tool_called, EventKind.tool_call_refused]
    assert state.ledger.events[-1].message == "not allowed"
