"""Stratagem's payload converter leaves default-valued fields out of Temporal payloads; reading a
payload back must give exactly the models that were written."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest
from support import FIXTURE_TOOLS
from support.plans import GREETING

import stratagem.io.payloads as payloads
from stratagem.activities.planning import describe_tools_here
from stratagem.domain.catalog import ToolCatalog, ToolSpec
from stratagem.domain.ledger import EventKind, Ledger, StepRecord, StepStatus, ToolCallRecord, ToolCallStatus
from stratagem.domain.plan import Author, AuthorKind, Plan, PlanDraft, Risk, Step
from stratagem.domain.run_types import DecisionKind, PendingDecision, Phase, RunOptions, RunState
from stratagem.io.notify import SLACK_ENV
from stratagem.io.payloads import stratagem_data_converter
from stratagem.tools import ToolRegistry

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def round_trip(value, type_hint):
    converter = stratagem_data_converter.payload_converter
    payload = converter.to_payloads([value])[0]
    return payload, converter.from_payloads([payload], [type_hint])[0]


def state() -> RunState:
    draft = PlanDraft.model_validate(GREETING)
    plan = Plan.from_draft(draft, revision=1, author=Author(kind=AuthorKind.human, name="ada"), reason="supplied")
    ledger = Ledger(run_id="r")
    ledger.add_revision(plan)
    record = ledger.steps["greet"]
    record.status, record.attempts, record.output, record.started_at = StepStatus.succeeded, 2, {"text": None}, NOW
    # Mutated in place, never assigned: a converter that left out "unset" fields would lose these.
    record.tool_calls.append(ToolCallRecord(call=1, tool="greet", status=ToolCallStatus.ok))
    ledger.record(EventKind.step_succeeded, NOW, revision=1, step_id="greet", attempt=2, model=None)
    options = RunOptions(max_parallel=8, approvers=[], review_timeout_seconds=None)
    pending = [PendingDecision(kind=DecisionKind.step_approval, revision=1, since=NOW, step_id="note")]
    return RunState(
        run_id="r",
        execution_id="e",
        goal="g",
        options=options,
        ledger=ledger,
        phase=Phase.running,
        pending=pending,
        answers={"ask": None},
    )


def test_the_state_round_trips_exactly_and_smaller():
    original = state()
    payload, back = round_trip(original, RunState)
    assert back == original
    assert back.ledger.steps["greet"].tool_calls[0].tool == "greet"
    assert back.options.approvers == [] and back.answers == {"ask": None}  # set values are kept, even empty or null
    assert len(payload.data) < 0.6 * len(original.model_dump_json())


def test_a_step_keeps_what_differs_from_its_defaults():
    step = Step(id="pay", title="Pay", tool="pay", args={"amount": 0, "note": ""}, risk=Risk.high)
    payload, back = round_trip(step, Step)
    assert back == step
    assert payload.data == b'{"id":"pay","title":"Pay","tool":"pay","args":{"amount":0,"note":""},"risk":"high"}'
    # Only Temporal payloads are compact: what people and the command line see has every field.
    assert "instructions" in step.model_dump() and '"requires_approval":false' in step.model_dump_json()


def test_tool_outputs_keep_their_nulls_and_empties():
    record = StepRecord(step_id="s", status=StepStatus.succeeded, output={"a": None, "b": [], "c": {"d": ""}})
    _, back = round_trip(record, StepRecord)
    assert back.output == {"a": None, "b": [], "c": {"d": ""}}


def test_the_tool_catalogue_is_recorded_without_its_defaults():
    # Every run records its worker's catalogue in its history (the local activity's marker).
    pay = ToolSpec(name="pay", description="Pay an invoice.", irreversible=True, returns={"type": "object"})
    catalog = ToolCatalog(tools=[pay, ToolSpec(name="look", side_effects=False)], notify=True)
    payload, back = round_trip(catalog, ToolCatalog)
    assert back == catalog
    assert (
        back.get("look").parameters == {"type": "object", "properties": {}} and back.get("look").side_effects is False
    )
    assert back.get("pay").needs_approval and back.get("pay").side_effects is True
    assert (
        b'"local"' not in payload.data and b'"risk"' not in payload.data and b'"requires_approval"' not in payload.data
    )
    assert len(payload.data) < 0.6 * len(catalog.model_dump_json())


def test_runs_of_one_worker_share_one_copy_of_its_catalogue():
    # Each run reads its worker's catalogue from its own describe-tools result: the same bytes
    # give one shared object (read-only, like the registry's), where each cached run held a copy.
    converter = stratagem_data_converter.payload_converter
    catalog = ToolCatalog(tools=[ToolSpec(name="look", side_effects=False)])
    other = ToolCatalog(tools=[ToolSpec(name="look", side_effects=False), ToolSpec(name="pay")])
    first, again, changed = (converter.to_payloads([c])[0] for c in (catalog, catalog, other))
    one = converter.from_payloads([first], [ToolCatalog | None])[0]
    assert one == catalog and one is not catalog
    assert converter.from_payloads([again], [ToolCatalog | None])[0] is one
    assert converter.from_payloads([again], [ToolCatalog])[0] is one  # the remote activity's hint
    assert converter.from_payloads([changed], [ToolCatalog])[0] == other  # another worker's, its own
    assert converter.from_payloads([converter.to_payloads([None])[0]], [ToolCatalog | None]) == [None]


def test_a_worker_writes_its_catalogue_once_for_every_run(monkeypatch):
    # Every run's describe-tools activity returns the registry's one catalogue object: its bytes
    # are written once. Another object, equal or not, is written for itself.
    writes = []
    real = payloads.to_json
    monkeypatch.setattr(payloads, "to_json", lambda value, **kw: writes.append(value) or real(value, **kw))
    converter = stratagem_data_converter.payload_converter
    catalog = ToolCatalog(tools=[ToolSpec(name="look", side_effects=False)])
    first, again = (converter.to_payloads([catalog])[0] for _ in range(2))
    assert first == again and writes == [catalog]
    other = ToolCatalog(tools=[ToolSpec(name="look", side_effects=False), ToolSpec(name="pay")])
    assert converter.from_payloads([converter.to_payloads([other])[0]], [ToolCatalog])[0] == other
    assert len(writes) == 2


def test_a_worker_with_notify_channels_hands_every_run_one_catalogue(monkeypatch):

    registry = ToolRegistry.from_modules([FIXTURE_TOOLS])
    describe = describe_tools_here(registry)
    plain = asyncio.run(describe())
    # The registry's catalogue, saying where the worker's secrets go (here: nowhere).
    assert plain is asyncio.run(describe()) and plain.tools is registry.catalog().tools
    assert plain.notify is False and plain.secrets == {}
    monkeypatch.setenv(SLACK_ENV, "https://hooks.example/T0")
    first, second = asyncio.run(describe()), asyncio.run(describe())
    assert first.notify is True and first is second and first.tools == plain.tools
    monkeypatch.delenv(SLACK_ENV)
    assert asyncio.run(describe()) is plain
