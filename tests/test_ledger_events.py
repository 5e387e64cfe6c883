"""Ledger events written through their kind's model keep the JSON they had as loose keywords, and
events that no longer fit their model still read."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from stratagem.domain.compact import COMPACT_CONTEXT
from stratagem.domain.ledger import EventKind, Ledger, LedgerEvent
from stratagem.domain.ledger_events import (
    EVENT_DATA,
    AnswerReceived,
    BudgetExhausted,
    CallAwaitingApproval,
    GoalChecked,
    PlanApproved,
    RunStarted,
    StepCarried,
    StepFailed,
    StepRepaired,
    StepSucceeded,
    data_model,
    read_data,
)
from stratagem.domain.usage import UsageTotals

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)

# (kind, the typed data, the keywords writers passed before the models): the cases where a key was
# left out, or written as null, depending on the value.
CASES: list[tuple[EventKind, Any, dict[str, Any]]] = [
    (EventKind.step_failed, StepFailed(attempts=2), {"attempts": 2}),
    (
        EventKind.step_failed,
        StepFailed(attempts=1, trigger="criteria_unmet"),
        {"attempts": 1, "trigger": "criteria_unmet"},
    ),
    (EventKind.step_succeeded, StepSucceeded(attempt=2, model=None), {"attempt": 2, "model": None}),
    (EventKind.goal_checked, GoalChecked(met=None), {"met": None}),
    (EventKind.answer_received, AnswerReceived(signed_by=None), {}),
    (EventKind.answer_received, AnswerReceived(signed_by="dana"), {"signed_by": "dana"}),
    (EventKind.call_awaiting_approval, CallAwaitingApproval(call="1", digest=None), {"call": "1"}),
    (EventKind.step_carried, StepCarried(source="r1"), {"source": "r1"}),
    (
        EventKind.step_carried,
        StepCarried(source="r1", source_revision=2, steps=[]),
        {"source": "r1", "source_revision": 2, "steps": []},
    ),
    (EventKind.plan_approved, PlanApproved(via="update"), {"via": "update"}),
    (EventKind.plan_approved, PlanApproved(via="signal", covers=["a"]), {"via": "signal", "covers": ["a"]}),
    (EventKind.step_repaired, StepRepaired(action="skip", via="update"), {"action": "skip", "via": "update"}),
    (
        EventKind.budget_exhausted,
        BudgetExhausted(usage=UsageTotals(calls=3, cost_usd=0.5)),
        {"usage": UsageTotals(calls=3, cost_usd=0.5).model_dump()},
    ),
    (
        EventKind.run_started,
        RunStarted(auto_approve=True, mode="plan", auto_approve_by="ada"),
        {"auto_approve": True, "mode": "plan", "auto_approve_by": "ada"},
    ),
    (EventKind.run_started, RunStarted(auto_approve=False, mode="plan"), {"auto_approve": False, "mode": "plan"}),
]


@pytest.mark.parametrize(("kind", "data", "loose"), CASES)
def test_typed_data_is_written_as_the_loose_keywords_were(kind: EventKind, data: Any, loose: dict[str, Any]):
    typed, untyped = Ledger(run_id="r"), Ledger(run_id="r")
    event = typed.record(kind, NOW, step_id="s", data=data)
    before = untyped.record(kind, NOW, step_id="s", **loose)
    for context in (None, COMPACT_CONTEXT):
        assert event.model_dump_json(context=context) == before.model_dump_json(context=context)
    assert LedgerEvent.model_validate_json(event.model_dump_json()).details == data


def test_a_kind_takes_only_its_own_model():
    with pytest.raises(AssertionError, match="step_failed carries StepFailed"):
        Ledger(run_id="r").record(EventKind.step_failed, NOW, data=GoalChecked(met=True))


def test_events_that_do_not_fit_their_model_still_read():
    odd = LedgerEvent.model_validate({"seq": 1, "at": NOW, "kind": "step_failed", "data": {"from": "elsewhere"}})
    failed = odd.details_as(StepFailed)
    assert failed.attempts is None and failed.trigger == "step_failed" and failed.model_extra == {"from": "elsewhere"}
    extra = LedgerEvent.model_validate(
        {"seq": 2, "at": NOW, "kind": "goal_checked", "data": {"met": False, "score": 0.2}}
    )
    assert extra.details_as(GoalChecked).met is False
    assert extra.details.as_data() == {"met": False, "score": 0.2}  # kept, in place


def test_the_golden_histories_events_read_as_their_models_and_write_back_unchanged():
    """Every event in the recorded histories' payloads validates against its kind's model, and
    turning the model back into data gives the same JSON."""
    events = 0
    for path in Path(__file__).parent.joinpath("golden").rglob("*.json"):
        for payload in _payloads(json.loads(path.read_text())):
            for event in _events(payload):
                kind = EventKind(event["kind"])
                data = event.get("data", {})
                model = data_model(kind).model_validate(data)
                assert json.dumps(model.as_data()) == json.dumps(data), (path.name, kind)
                events += 1
    assert events > 100


def test_every_kind_with_a_model_is_a_kind():
    assert set(EVENT_DATA) <= set(EventKind)
    assert type(read_data(EventKind.step_started, {})) is data_model(EventKind.step_started)


def _payloads(node: Any) -> Any:
    if isinstance(node, dict):
        if isinstance(node.get("data"), str) and "metadata" in node:
            try:
                yield json.loads(base64.b64decode(node["data"]))
            except ValueError:
                pass
        for value in node.values():
            yield from _payloads(value)
    elif isinstance(node, list):
        for value in node:
            yield from _payloads(value)


def _events(node: Any) -> Any:
    if isinstance(node, dict):
        if {"seq", "kind", "at"} <= set(node) and node["kind"] in EventKind._value2member_map_:
            yield node
        for value in node.values():
            yield from _events(value)
    elif isinstance(node, list):
        for value in node:
            yield from _events(value)
