"""Typed answers (stratagem.domain.answers): which answer schemas a plan may carry, what a wrong answer
is told, and which references into an answer the plan validation catches."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel
from support.states import NOW, make_state
from typing_extensions import TypedDict  # pydantic reads typing.TypedDict only from Python 3.12

from stratagem.common.errors import DecisionRefusedError
from stratagem.domain import decisions
from stratagem.domain.answers import (
    KEYWORDS,
    answer_fields,
    answer_problem,
    coerce,
    describe_field,
    path_problem,
    schema_problems,
)
from stratagem.domain.catalog import ToolCatalog, ToolSpec
from stratagem.domain.plan import PlanDraft
from stratagem.domain.run_types import AnswerInput, DecisionKind, PendingDecision
from stratagem.domain.validation import plan_problems
from stratagem.io.planner import render_tools
from stratagem.tools import ToolRegistry, tool

pytestmark = pytest.mark.unit

TERMS = {
    "type": "object",
    "properties": {"status": {"enum": ["ok", "change"]}, "days": {"type": "integer", "minimum": 0}},
    "required": ["status"],
}


def test_a_schema_outside_the_subset_is_refused_with_the_keyword_named() -> None:
    assert schema_problems(TERMS) == []
    # A pattern would let an answer cost the worker a regular-expression backtrack; $ref names
    # documents elsewhere. Both are refused wherever they sit.
    nested = {"type": "object", "properties": {"code": {"type": "string", "pattern": "(a+)+$"}}}
    assert schema_problems(nested) == [
        "answer_schema.properties.code uses 'pattern', which answer schemas do not support "
        f"(they take: {', '.join(sorted(KEYWORDS))})"
    ]
    assert "uses '$ref'" in schema_problems({"$ref": "https://example.com/schema.json"})[0]
    assert "is not a valid schema" in schema_problems({"type": "objekt"})[0]
    assert schema_problems("object") == ["answer_schema must be a JSON Schema object, not str"]


def test_a_wrong_answer_is_told_which_field_is_wrong() -> None:
    assert answer_problem({"status": "ok", "days": 30}, TERMS) is None
    assert answer_problem("ok", TERMS) == "the answer: 'ok' is not of type 'object'"
    assert answer_problem({"days": 3}, TERMS) == "the answer lacks field 'status'"
    assert (
        answer_problem({"status": "maybe"}, TERMS)
        == "field 'status' of the answer: 'maybe' is not one of ['ok', 'change']"
    )
    assert answer_problem({"status": "ok", "days": -1}, TERMS) == (
        "field 'days' of the answer: -1 is less than the minimum of 0"
    )


def test_a_reference_into_an_answer_must_name_a_field_it_can_have() -> None:
    assert path_problem(TERMS, ["status"]) is None
    assert path_problem(TERMS, ["stauts"]) == "the answer has no field 'stauts' (its fields: days, status)"
    assert path_problem({"type": "array", "items": TERMS}, ["0", "days"]) is None
    assert "must be an index" in (path_problem({"type": "array"}, ["first"]) or "")
    assert path_problem({"type": "string"}, ["x"]) == "the answer is a string at 'its top', which has no field 'x'"
    assert path_problem({"type": "object"}, ["anything"]) is None  # fields not named: anything may be there


def _plan(*steps: dict[str, Any]) -> PlanDraft:
    return PlanDraft.model_validate({"goal": "g", "steps": list(steps)})


CATALOG = ToolCatalog(tools=[ToolSpec(name="record", parameters={"type": "object"})])
REVIEW = {"id": "review", "title": "Review", "kind": "human", "instructions": "Terms?", "answer_schema": TERMS}


def test_plan_validation_checks_the_schema_and_references_into_the_answer() -> None:
    good = {
        "id": "file",
        "title": "File",
        "tool": "record",
        "args": {"label": "${review.status}"},
        "depends_on": ["review"],
    }
    assert plan_problems(_plan(REVIEW, good), CATALOG) == []
    typo = {**good, "args": {"label": "${review.stauts}"}}
    assert plan_problems(_plan(REVIEW, typo), CATALOG) == [
        "step 'file' references ${review.stauts}, but the answer has no field 'stauts' (its fields: days, status)"
    ]
    on_a_tool = {**good, "answer_schema": TERMS}
    assert plan_problems(_plan(REVIEW, on_a_tool), CATALOG) == [
        "step 'file' has an answer_schema, but only human steps are answered"
    ]
    bad = {**REVIEW, "answer_schema": {"type": "string", "pattern": "x"}}
    assert plan_problems(_plan(bad), CATALOG)[0].startswith("step 'review': answer_schema uses 'pattern'")


def test_a_typed_line_becomes_the_value_its_field_wants() -> None:
    assert [(n, r) for n, _, r in answer_fields(TERMS)] == [("status", True), ("days", False)]
    assert answer_fields({"type": "string"}) == [] and answer_fields(None) == []
    assert describe_field({"enum": ["ok", "change"]}) == "ok / change"
    assert describe_field({"type": "boolean"}) == "yes / no" and describe_field({}) == "any JSON value"
    assert coerce("30", {"type": "integer"}) == 30 and coerce("2.5", {"type": "number"}) == 2.5
    assert coerce("yes", {"type": "boolean"}) is True and coerce("No", {"type": "boolean"}) is False
    assert coerce("[1, 2]", {"type": "array"}) == [1, 2] and coerce("3", {"enum": [1, 3]}) == 3
    assert coerce("ok", {"enum": ["ok"]}) == "ok" and coerce("x y", {"type": "string"}) == "x y"
    for text, schema, expected in [
        ("3.5", {"type": "integer"}, "'3.5' is not a whole number"),
        ("maybe", {"type": "boolean"}, "'maybe' is not yes or no"),
        ("[1,", {"type": "array"}, "that is not valid JSON"),
        ("ok", {"enum": ["approve", "reject"]}, "'ok' is not one of approve / reject"),
    ]:
        with pytest.raises(ValueError, match=expected):
            coerce(text, schema)


class Vendor(BaseModel):
    vendor_id: str
    email: str


class Check(TypedDict):
    passed: bool


@tool
def lookup(name: str) -> Vendor:
    """Find a vendor."""
    return Vendor(vendor_id="V1", email="a@b.c")


@tool
def checks(name: str) -> list[Check]:
    """Run checks."""
    return [{"passed": True}]


@tool
def loose(name: str) -> dict:
    """Anything."""
    return {}


def test_references_into_a_tool_steps_output_are_checked_against_its_return_type() -> None:
    registry = ToolRegistry()
    for fn in (lookup, checks, loose):
        registry.register(fn)
    catalog = registry.catalog()
    assert catalog.get("lookup").returns["properties"].keys() == {"vendor_id", "email"}
    assert catalog.get("checks").returns["items"]["properties"].keys() == {"passed"}  # $ref inlined
    assert catalog.get("loose").returns is None  # a bare dict says nothing to check against
    assert "returns: {" in render_tools(catalog)  # the planner is told what it may reference

    def using(label: str, tool_name: str = "lookup") -> PlanDraft:
        return _plan(
            {"id": "find", "title": "Find", "tool": tool_name, "args": {"name": "acme"}},
            {"id": "use", "title": "Use", "tool": "loose", "args": {"name": label}, "depends_on": ["find"]},
        )

    assert plan_problems(using("${find.email}"), catalog) == []
    assert plan_problems(using("${find.emial}"), catalog) == [
        "step 'use' references ${find.emial}, but the output of tool 'lookup' has no field 'emial' "
        "(its fields: email, vendor_id)"
    ]
    assert plan_problems(using("${find.0.passed}", "checks"), catalog) == []
    assert "must be an index" in plan_problems(using("${find.passed}", "checks"), catalog)[0]
    assert plan_problems(using("${find.whatever}", "loose"), catalog) == []


def test_an_answer_for_a_step_the_plan_lost_is_refused_as_not_waiting_not_as_a_crash() -> None:
    state = make_state()
    # A pending question whose step is not in the plan (a state no rule should make): the check
    # refuses nothing on the schema's account and does not fail with a KeyError.
    state.pending = [PendingDecision(kind=DecisionKind.human_answer, revision=1, since=NOW, step_id="ghost")]
    decisions.check_answer(state, AnswerInput(step_id="ghost", answer="x", by="ann"))
    with pytest.raises(DecisionRefusedError, match="not waiting for an answer"):
        decisions.check_answer(state, AnswerInput(step_id="first", answer="x", by="ann"))
