"""The rules of compensation (issue #41), without Temporal: which steps ran with effects, their
undos in reverse dependency order, a plan's `compensate` checked like a step, and a tool's
`compensate=` checked when its registry is built."""

from __future__ import annotations

from typing import Any

import pytest
from support.states import NOW

from stratagem.common.errors import DecisionRefusedError, ToolRegistrationError
from stratagem.domain import compensation, repairs
from stratagem.domain.catalog import ToolCatalog, ToolSpec
from stratagem.domain.ledger import EventKind, Ledger, StepStatus, ToolCallRecord, ToolCallStatus
from stratagem.domain.ledger_events import StepRepaired
from stratagem.domain.plan import Author, AuthorKind, Plan, PlanDraft
from stratagem.domain.run_types import (
    Compensating,
    Phase,
    RepairAction,
    RepairInput,
    RunOptions,
    RunState,
)
from stratagem.domain.validation import plan_problems
from stratagem.tools import ToolContext, ToolRegistry, tool

pytestmark = pytest.mark.unit


def _schema(**props: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {name: {"type": kind} for name, kind in props.items()},
        "required": list(props),
        "additionalProperties": False,
    }


CATALOG = ToolCatalog(
    tools=[
        ToolSpec(name="book", parameters=_schema(slot="string"), compensate="unbook"),
        ToolSpec(name="unbook", parameters=_schema(slot="string", original_output="object")),
        ToolSpec(name="email", parameters=_schema(to="string")),
        ToolSpec(name="cancel", parameters=_schema(order="string")),
        ToolSpec(name="look", parameters=_schema(slot="string"), side_effects=False),
    ]
)


def book(sid: str, *deps: str, **extra: Any) -> dict[str, Any]:
    return {"id": sid, "title": sid, "tool": "book", "args": {"slot": sid}, "depends_on": list(deps), **extra}


def state_of(steps: list[dict[str, Any]], succeeded: set[str], failed: set[str] = frozenset()) -> RunState:  # type: ignore[assignment]
    draft = PlanDraft.model_validate({"goal": "g", "steps": steps})
    ledger = Ledger(run_id="r")
    ledger.add_revision(
        Plan.from_draft(draft, revision=1, author=Author(kind=AuthorKind.human, name="ann"), reason="r")
    )
    for sid, record in ledger.steps.items():
        record.status = (
            StepStatus.succeeded if sid in succeeded else StepStatus.failed if sid in failed else StepStatus.pending
        )
        if sid in succeeded:
            record.output = {"booking": f"B-{sid}", "note": "costs ${5}"}
    return RunState(
        run_id="r", execution_id="e", goal="g", options=RunOptions(), ledger=ledger, catalog=CATALOG, level=10
    )


def test_a_diamond_is_undone_leaves_first_and_what_nothing_undoes_is_named():
    steps = [
        book("a"),
        book("b", "a"),
        book("c", "a"),
        {"id": "mail", "title": "mail", "tool": "email", "args": {"to": "x"}, "depends_on": ["b"]},
        {"id": "peek", "title": "peek", "tool": "look", "args": {"slot": "a"}},
        {"id": "ask", "title": "ask", "kind": "human", "instructions": "who?"},
        book("d", "b", "c"),
    ]
    state = state_of(steps, succeeded={"a", "b", "c", "mail", "peek", "ask"}, failed={"d"})
    derived = compensation.derive(state, "d failed")
    assert derived.effects == ["a", "b", "c", "mail"]
    assert derived.cannot_undo == ["mail"]
    assert {sid: u.depends_on for sid, u in derived.undos.items()} == {
        "c": ["c"],
        "b": ["b"],
        "a": ["a", "undo-b", "undo-c"],
    }
    # What the reviewer sees is what runs: the output itself, its "${" escaped so it stays text.
    assert derived.undos["a"].args == {"slot": "a", "original_output": {"booking": "B-a", "note": "costs $${5}"}}
    assert derived.draft is not None
    assert [s.id for s in derived.draft.steps] == ["a", "b", "c", "mail", "peek", "ask", "undo-c", "undo-b", "undo-a"]
    assert plan_problems(derived.draft, CATALOG) == []
    assert compensation.prompt(derived, "d failed") == (
        "undo 3 effects of a run that ends without its goal (d failed); these stay: mail"
    )


def test_a_step_in_doubt_counts_as_an_effect_but_is_never_undone():
    state = state_of([book("a"), book("b")], succeeded={"a"})
    state.ledger.steps["b"].status = StepStatus.in_doubt
    derived = compensation.derive(state, "x")
    assert derived.effects == ["a", "b"] and derived.cannot_undo == ["b"] and list(derived.undos) == ["a"]


def test_no_effect_and_effects_by_hand_or_a_fork_are_not_undone():
    steps = [book("a"), book("b"), {"id": "peek", "title": "peek", "tool": "look", "args": {"slot": "a"}}]
    state = state_of(steps, succeeded={"a", "b", "peek"})
    state.ledger.record(
        EventKind.step_repaired, NOW, step_id="a", actor="dana", data=StepRepaired(action="skip", via="update")
    )
    state.ledger.record(EventKind.step_carried, NOW, step_id="b", message="forked")
    derived = compensation.derive(state, "x")
    assert derived.effects == [] and derived.draft is None


def test_an_llm_step_that_called_a_tool_with_effects_stays_unless_it_names_its_undo():
    steps = [
        {"id": "agent", "title": "agent", "kind": "llm", "instructions": "do it", "tools": ["email", "look"]},
        {"id": "reader", "title": "reader", "kind": "llm", "instructions": "read", "tools": ["look"]},
    ]
    state = state_of(steps, succeeded={"agent", "reader"})
    state.ledger.steps["agent"].tool_calls = [ToolCallRecord(call=1, tool="email", status=ToolCallStatus.ok)]
    state.ledger.steps["reader"].tool_calls = [ToolCallRecord(call=1, tool="look", status=ToolCallStatus.ok)]
    derived = compensation.derive(state, "x")
    assert (derived.effects, derived.cannot_undo, derived.draft) == (["agent"], ["agent"], None)


def test_a_plan_level_undo_replaces_the_tools_and_an_undo_id_is_unique_and_short():
    long_id = "b" * 60
    steps = [
        book("a", compensate={"tool": "cancel", "args": {"order": "${a.id}"}}),
        book(long_id),
        {"id": "undo-a", "title": "taken", "tool": "look", "args": {"slot": "a"}},
    ]
    state = state_of(steps, succeeded={"a", long_id})
    derived = compensation.derive(state, "x")
    assert derived.undos["a"].id == "undo-a-2" and derived.undos["a"].tool == "cancel"
    assert derived.undos["a"].args == {"order": "${a.id}"}
    assert derived.undos[long_id].id == ("undo-" + long_id)[:64]
    assert compensation.undo_id("x" * 70, {("undo-" + "x" * 70)[:64]}) == ("undo-" + "x" * 70)[:62] + "-2"


@pytest.mark.parametrize(
    ("compensate", "kind", "problem"),
    [
        ({"tool": "cancl"}, "tool", "step 'a': compensate uses unknown tool 'cancl' (did you mean 'cancel'?)"),
        ({"tool": "cancel", "args": {"order": 3}}, "tool", "step 'a': compensate: argument 'order' of tool 'cancel'"),
        ({"tool": "cancel"}, "tool", "step 'a': compensate: tool 'cancel' is missing required argument 'order'"),
        ({"tool": "cancel", "args": {"order": "${z.id}"}}, "tool", "compensate references ${z.id}, but 'z' is neither"),
        ({"tool": "cancel", "args": {"order": "${q.id}"}}, "tool", "compensate references ${q.id}, but there is no"),
        ({"tool": "cancel", "args": {"order": "x"}}, "human", "step 'a' is a human step, which has no effect to undo"),
    ],
)
def test_a_plans_compensate_is_checked_like_a_step(compensate, kind, problem):
    step = book("a", "y", compensate=compensate)
    if kind == "human":
        step = {"id": "a", "title": "a", "kind": "human", "instructions": "?", "compensate": compensate}
    draft = PlanDraft.model_validate({"goal": "g", "steps": [book("y"), book("z"), step]})
    problems = plan_problems(draft, CATALOG)
    assert any(p.startswith(problem) or problem in p for p in problems), problems


def test_a_compensate_may_not_carry_a_literal_credential():
    catalog = ToolCatalog(
        tools=[*CATALOG.tools, ToolSpec(name="http", parameters={"type": "object", "properties": {}})]
    )
    undo = {"tool": "http", "args": {"url": "https://x.test", "headers": {"Authorization": "Bearer abc"}}}
    draft = PlanDraft.model_validate({"goal": "g", "steps": [book("a", compensate=undo)]})
    assert any(
        p.startswith("step 'a': compensate: header 'Authorization' holds a literal credential")
        for p in plan_problems(draft, catalog)
    )


def test_a_compensate_that_reads_its_own_output_and_its_ancestors_is_valid():
    step = book("a", "y", compensate={"tool": "cancel", "args": {"order": "${a.id}-${y.id}"}})
    assert plan_problems(PlanDraft.model_validate({"goal": "g", "steps": [book("y"), step]}), CATALOG) == []


def test_a_compensate_repair_is_refused_below_level_10_and_while_compensating():
    state = state_of([book("a"), book("d", "a")], succeeded={"a"}, failed={"d"})
    state.phase = Phase.awaiting_repair
    decision = RepairInput(by="dana", action=RepairAction.compensate)
    repairs.check_repair(state, decision)  # a level-10 run waiting for a repair takes it
    state.level = 9
    with pytest.raises(DecisionRefusedError, match="before compensation"):
        repairs.check_repair(state, decision)
    state.level = 10
    state.compensation = Compensating(reason="x", revision=2)
    with pytest.raises(DecisionRefusedError, match="undoing its effects already"):
        repairs.check_repair(state, decision)


@tool
def release(slot: str, original_output: dict, ctx: ToolContext) -> str:
    return "released"


@tool(compensate=release)
def reserve(slot: str, ctx: ToolContext) -> dict:
    return {}


@tool
def refund(amount: int, account: str) -> str:
    return "refunded"


@tool(compensate=refund)
def charge(amount: int) -> str:
    return "charged"


@tool(compensate="nowhere")
def ship(parcel: str) -> str:
    return "shipped"


def test_a_decorated_undo_is_registered_with_its_tool_and_its_parameters_are_checked():
    registry = ToolRegistry()
    registry.register(reserve)
    assert "release" in registry
    assert registry.catalog().get("reserve").compensate == "release"  # type: ignore[union-attr]
    with pytest.raises(ToolRegistrationError, match="requires parameter 'account'.*original_output"):
        ToolRegistry().register(charge)


def test_an_undo_named_but_not_registered_is_refused_when_the_registry_is_built():
    registry = ToolRegistry()
    registry.register(ship)
    with pytest.raises(ToolRegistrationError, match="compensate= names tool 'nowhere', which this worker does not"):
        registry.catalog()
