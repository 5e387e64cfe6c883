"""Planning: parsing a model's answer, and the repair loop that feeds problems back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from stratagem.common.errors import ModelOutputError
from stratagem.domain.ledger import StepRecord, StepStatus
from stratagem.domain.plan import PlanDraft
from stratagem.io.planner import (
    Progress,
    parse_plan_output,
    plan_with_repairs,
    planner_schema,
    planning_messages,
    render_tools,
)
from stratagem.models import ModelRequest, ModelResponse, Purpose, ScriptedModel, Usage, load_model
from stratagem.tools import ToolCatalog, ToolRegistry

pytestmark = pytest.mark.unit


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def greet(name: str, greeting: str = "Hello") -> str:
    """Make a greeting."""
    return f"{greeting}, {name}!"


@pytest.fixture(scope="module")
def catalog() -> ToolCatalog:
    registry = ToolRegistry()
    registry.register(add)
    registry.register(greet)
    return registry.catalog()


def plan_json(*steps: dict[str, Any], goal: str = "say hello") -> str:
    return json.dumps({"goal": goal, "steps": list(steps)})


GOOD = {"id": "hello", "title": "Greet", "tool": "greet", "args": {"name": "Ada"}}
UNKNOWN_TOOL = {"id": "hello", "title": "Greet", "tool": "gret", "args": {"name": "Ada"}}


class FakeModel:
    """Answers planner requests from a list, and remembers every request."""

    def __init__(self, answers: list[str], name: str = "fake:planner"):
        self.name = name
        self.answers = answers
        self.requests: list[ModelRequest] = []

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        text = self.answers[min(len(self.requests), len(self.answers)) - 1]
        return ModelResponse(text=text, model=self.name, usage=Usage(input_tokens=10, output_tokens=3))


# --- parse_plan_output --------------------------------------------------------------------------


def test_parse_plain_json() -> None:
    draft, problems = parse_plan_output(plan_json(GOOD))
    assert problems == []
    assert draft is not None and draft.step_ids == ["hello"]
    assert draft.step("hello").args == {"name": "Ada"}


@pytest.mark.parametrize("fence", ["```json", "```", "```yaml"])
def test_parse_fenced_block(fence: str) -> None:
    draft, problems = parse_plan_output(f"  {fence}\n{plan_json(GOOD)}\n```\n")
    assert problems == []
    assert draft is not None and draft.goal == "say hello"


def test_parse_yaml() -> None:
    text = "goal: say hello\nsteps:\n  - id: hello\n    title: Greet\n    tool: greet\n    args: {name: Ada}\n"
    draft, problems = parse_plan_output(text)
    assert problems == []
    assert draft == PlanDraft.model_validate(json.loads(plan_json(GOOD)))


@pytest.mark.parametrize("text", ["", "   \n ", "```json\n\n```"])
def test_parse_empty_answer(text: str) -> None:
    assert parse_plan_output(text) == (
        None,
        ["the answer was empty; reply with one JSON object following the plan schema"],
    )


def test_parse_a_json_list_is_refused() -> None:
    assert parse_plan_output(json.dumps([GOOD])) == (
        None,
        ["the answer must be a JSON object with 'goal' and 'steps', not a list"],
    )


def test_parse_plain_prose_is_refused_as_not_an_object() -> None:
    draft, problems = parse_plan_output("I cannot do that")
    assert draft is None
    assert problems == ["the answer must be a JSON object with 'goal' and 'steps', not a str"]


def test_parse_broken_json_reports_where() -> None:
    draft, problems = parse_plan_output('{"goal": "x", "steps": [')
    assert draft is None
    assert problems == ["the answer is not valid JSON (Expecting value at line 1, column 25)"]


def test_parse_describes_schema_errors_with_step_numbers() -> None:
    text = plan_json(GOOD, {"id": "2nd", "title": "", "tool": "add", "colour": "red"})
    draft, problems = parse_plan_output(text)
    assert draft is None
    assert problems == [
        "step #2 field 'id': String should match pattern '^[A-Za-z_][A-Za-z0-9_-]{0,63}$'",
        "step #2 field 'title': String should have at least 1 character",
        "step #2 field 'colour': Extra inputs are not permitted",
    ]


def test_parse_describes_top_level_errors() -> None:
    draft, problems = parse_plan_output(json.dumps({"steps": []}))
    assert draft is None
    assert problems == [
        "field 'goal': Field required",
        "field 'steps': List should have at least 1 item after validation, not 0",
    ]


# --- the prompt ---------------------------------------------------------------------------------


def test_planning_messages_hold_rules_schema_and_tools(catalog: ToolCatalog) -> None:
    system, user = planning_messages("say hello", catalog)
    assert (system.role, user.role) == ("system", "user")
    # The reference syntax is shown literally (the prompt template must not eat the braces); a
    # first plan names steps by their places, the engine making their ids.
    assert "${step1} or ${step1.field}" in system.content
    assert "The steps are step1, step2, ... in the order you write them." in system.content
    assert "- greet: Make a greeting." in system.content
    assert "- add: Add two integers." in system.content
    # The plan schema (and with it the tools' arguments) travels as the request's response
    # schema, not in the prompt.
    assert '"required"' not in system.content and "$defs" not in system.content
    assert user.content == "Goal: say hello\n\nWrite the plan."


def test_render_tools_without_tools() -> None:
    assert render_tools(ToolCatalog()) == "(none: use llm and human steps only)"


def test_replanning_message_shows_plan_progress_and_failure(catalog: ToolCatalog) -> None:
    current = PlanDraft.model_validate(
        json.loads(plan_json(GOOD, {"id": "sum", "title": "Sum", "tool": "add", "args": {"a": 1, "b": 2}}))
    )
    progress = Progress(
        plan=current,
        records={
            "hello": StepRecord(step_id="hello", status=StepStatus.succeeded, output={"text": "Hello, Ada!"}),
            "sum": StepRecord(step_id="sum", status=StepStatus.failed, error="overflow"),
        },
        failure="step 'sum' failed: overflow",
    )
    system, user = planning_messages("say hello", catalog, progress)
    # A revision keeps the ids its current plan gives the steps.
    assert "${step_id} or ${step_id.field}" in system.content and 'unique "id"' in system.content
    assert '"id": "sum"' in user.content
    assert '- hello: succeeded; output: {"text": "Hello, Ada!"}' in user.content
    assert "- sum: failed; error: overflow" in user.content
    assert "What went wrong: step 'sum' failed: overflow" in user.content


# --- plan_with_repairs --------------------------------------------------------------------------


async def test_invalid_answer_is_repaired(catalog: ToolCatalog) -> None:
    model = FakeModel([plan_json(UNKNOWN_TOOL), plan_json(GOOD)])
    outcome = await plan_with_repairs(model, "say hello", catalog)
    assert outcome.calls == 2
    assert outcome.draft.step("hello").tool == "greet"
    assert outcome.model == "fake:planner"
    assert outcome.usage == Usage(input_tokens=20, output_tokens=6)
    problem = "step 'hello' uses unknown tool 'gret' (did you mean 'greet'?) (available: add, greet)"
    assert outcome.rejected_attempts == [[problem]]

    first, second = model.requests
    assert first.purpose is Purpose.plan and second.purpose is Purpose.plan
    assert first.response_schema == planner_schema(catalog, positional=True)
    assert len(first.messages) == 2
    assert second.messages[:2] == first.messages
    assert (second.messages[2].role, second.messages[2].content) == ("assistant", plan_json(UNKNOWN_TOOL))
    assert second.messages[3].role == "user"
    assert second.messages[3].content == (
        f"That plan cannot be used:\n- {problem}\nReply with the corrected plan as one JSON object."
    )


async def test_unparseable_answer_is_repaired(catalog: ToolCatalog) -> None:
    model = FakeModel(["Sure! Here is my plan.", plan_json(GOOD)])
    outcome = await plan_with_repairs(model, "say hello", catalog)
    assert outcome.calls == 2
    assert outcome.rejected_attempts == [["the answer must be a JSON object with 'goal' and 'steps', not a str"]]


async def test_valid_first_answer_needs_one_call(catalog: ToolCatalog) -> None:
    model = FakeModel([plan_json(GOOD)])
    outcome = await plan_with_repairs(model, "say hello", catalog)
    assert (outcome.calls, outcome.rejected_attempts, len(model.requests)) == (1, [], 1)


async def test_always_invalid_raises_after_max_repairs_plus_one_calls(catalog: ToolCatalog) -> None:
    model = FakeModel(["[]", plan_json(UNKNOWN_TOOL), plan_json({**GOOD, "args": {}})])
    with pytest.raises(ModelOutputError) as caught:
        await plan_with_repairs(model, "say hello", catalog, max_repairs=2)
    assert len(model.requests) == 3
    # The message carries the last attempt's problems, not the first ones.
    assert str(caught.value) == (
        "the planner gave no valid plan in 3 attempt(s); last problems: "
        "step 'hello': tool 'greet' is missing required argument 'name'"
    )


async def test_no_repairs_allowed_means_one_call(catalog: ToolCatalog) -> None:
    model = FakeModel(["{}"])
    with pytest.raises(ModelOutputError, match=r"in 1 attempt\(s\); last problems: field 'goal': Field required; "):
        await plan_with_repairs(model, "say hello", catalog, max_repairs=0)
    assert len(model.requests) == 1


async def test_call_index_counts_up_from_first_call_index(catalog: ToolCatalog) -> None:
    model = FakeModel(["nope", "nope", plan_json(GOOD)])
    outcome = await plan_with_repairs(model, "say hello", catalog, first_call_index=5)
    assert outcome.calls == 3
    assert [r.call_index for r in model.requests] == [5, 6, 7]


async def test_llm_step_refused_without_an_executor(catalog: ToolCatalog) -> None:
    llm = {"id": "think", "title": "Think", "kind": "llm", "instructions": "Think"}
    model = FakeModel([plan_json(llm)])
    with pytest.raises(ModelOutputError, match="the run has no executor model"):
        await plan_with_repairs(model, "think", catalog, has_executor=False, max_repairs=0)
    outcome = await plan_with_repairs(FakeModel([plan_json(llm)]), "think", catalog, has_executor=True)
    assert outcome.draft.step_ids == ["think"]


def _progress() -> Progress:
    current = PlanDraft.model_validate(
        {
            "goal": "sum and greet",
            "steps": [
                {"id": "sum", "title": "Sum", "tool": "add", "args": {"a": 1, "b": 2}},
                {"id": "hello", "title": "Greet", "tool": "greet", "args": {"name": "${sum}"}, "depends_on": ["sum"]},
            ],
        }
    )
    return Progress(
        plan=current,
        records={
            "sum": StepRecord(step_id="sum", status=StepStatus.succeeded, output=3, revision=1),
            "hello": StepRecord(step_id="hello", status=StepStatus.failed, error="boom", revision=1),
        },
        failure="step 'hello' failed: boom",
    )


async def test_revision_that_changes_a_succeeded_step_is_refused_and_repaired(catalog: ToolCatalog) -> None:
    changed = plan_json(
        {"id": "sum", "title": "Sum", "tool": "add", "args": {"a": 10, "b": 20}},
        {"id": "hello", "title": "Greet", "tool": "greet", "args": {"name": "${sum}"}, "depends_on": ["sum"]},
    )
    kept = plan_json(
        {"id": "sum", "title": "Sum (done)", "tool": "add", "args": {"a": 1, "b": 2}},
        {"id": "hello", "title": "Greet", "tool": "greet", "args": {"name": "n=${sum}"}, "depends_on": ["sum"]},
    )
    model = FakeModel([changed, kept])
    outcome = await plan_with_repairs(model, "sum and greet", catalog, progress=_progress())
    assert outcome.calls == 2
    assert outcome.rejected_attempts == [
        [
            "step 'sum' already succeeded (revision 1) and cannot be changed; "
            "keep it as it was, or add a step with a new id to do the work again"
        ]
    ]
    assert (
        "Progress so far:\n- sum: succeeded; output: 3\n- hello: failed; error: boom"
        in model.requests[0].messages[1].content
    )


async def test_revision_may_leave_out_a_succeeded_step_it_still_depends_on(catalog: ToolCatalog) -> None:
    # "keep them unchanged (or leave them out)": the omitted step is carried into the revision,
    # so a new step may still depend on it and reference its output.
    revised = plan_json(
        {"id": "hello2", "title": "Greet again", "tool": "greet", "args": {"name": "${sum}"}, "depends_on": ["sum"]}
    )
    model = FakeModel([revised])
    outcome = await plan_with_repairs(model, "sum and greet", catalog, progress=_progress(), max_repairs=0)
    assert outcome.calls == 1
    assert outcome.draft.step_ids == ["hello2"]


async def test_revision_is_still_checked_against_the_rules(catalog: ToolCatalog) -> None:
    revised = plan_json({"id": "hello2", "title": "Greet", "tool": "greet", "args": {"name": "${sum}"}})
    model = FakeModel([revised])
    with pytest.raises(
        ModelOutputError, match=r"step 'hello2' references \$\{sum\}, but 'sum' is not among its dependencies"
    ):
        await plan_with_repairs(model, "sum and greet", catalog, progress=_progress(), max_repairs=0)


# --- with the real scripted model ---------------------------------------------------------------


async def test_planning_end_to_end_with_the_scripted_model(tmp_path: Path, catalog: ToolCatalog) -> None:
    script = tmp_path / "planner.yaml"
    script.write_text(
        yaml.safe_dump(
            {
                "planner": [
                    {"text": '```json\n{"goal": "say hello"}\n```'},
                    {
                        "plan": {
                            "goal": "say hello",
                            "steps": [
                                {"id": "sum", "title": "Sum", "tool": "add", "args": {"a": 1, "b": 2}},
                                {
                                    "id": "hello",
                                    "title": "Greet",
                                    "tool": "greet",
                                    "args": {"name": "${sum}"},
                                    "depends_on": ["sum"],
                                },
                            ],
                        },
                        "usage": {"input_tokens": 100, "output_tokens": 50},
                    },
                ]
            }
        )
    )
    model = load_model(f"scripted:{script}")
    assert isinstance(model.model, ScriptedModel)
    outcome = await plan_with_repairs(model, "say hello", catalog)
    assert outcome.calls == 2
    assert outcome.model == f"scripted:{script}"
    assert outcome.draft.step_ids == ["sum", "hello"]
    assert outcome.rejected_attempts == [["field 'steps': Field required"]]
    # The first call's usage is an estimate (> 0), the second is the scripted figure.
    assert outcome.usage.input_tokens > 100
    assert outcome.usage.output_tokens > 50


async def test_scripted_planning_starts_at_first_call_index(tmp_path: Path, catalog: ToolCatalog) -> None:
    script = tmp_path / "planner.yaml"
    script.write_text(yaml.safe_dump({"planner": [{"text": "not used"}, {"plan": {"goal": "g", "steps": [GOOD]}}]}))
    outcome = await plan_with_repairs(ScriptedModel(str(script)), "g", catalog, first_call_index=1, max_repairs=0)
    assert outcome.draft.step_ids == ["hello"]
    with pytest.raises(
        ModelOutputError, match=r"has 2 planner response\(s\), but the run asked for planner response #3"
    ):
        await plan_with_repairs(ScriptedModel(str(script)), "g", catalog, first_call_index=2)


# --- the schema a planner is held to ------------------------------------------------------------


def _valid(schema: dict[str, Any], value: Any) -> bool:
    from jsonschema import Draft202012Validator

    return Draft202012Validator(schema).is_valid(value)


def test_planner_schema_allows_only_registered_tools_with_their_arguments(catalog: ToolCatalog) -> None:
    schema = planner_schema(catalog, tiers=["fast"])
    step = {"tool": "greet", "id": "hello", "title": "Greet", "depends_on": [], "args": {"name": "Ada"}}
    assert _valid(schema, {"goal": "g", "steps": [step]})
    # An unknown tool, a missing argument, an argument of the wrong type, an extra argument: none fit.
    assert not _valid(schema, {"goal": "g", "steps": [{**step, "tool": "gret"}]})
    assert not _valid(schema, {"goal": "g", "steps": [{**step, "args": {}}]})
    assert not _valid(schema, {"goal": "g", "steps": [{**step, "tool": "add", "args": {"a": "one", "b": 2}}]})
    assert not _valid(schema, {"goal": "g", "steps": [{**step, "args": {"name": "Ada", "colour": "red"}}]})
    # Another tool's arguments under this tool's name do not fit either: each tool is its own member.
    assert not _valid(schema, {"goal": "g", "steps": [{**step, "args": {"a": 1, "b": 2}}]})
    llm = {"kind": "llm", "id": "w", "title": "Write", "depends_on": ["hello"], "instructions": "Write."}
    assert _valid(schema, {"goal": "g", "steps": [step, {**llm, "tools": ["add"], "tier": "fast"}]})
    assert not _valid(schema, {"goal": "g", "steps": [{**llm, "tools": ["delete_everything"]}]})
    assert not _valid(schema, {"goal": "g", "steps": [{**llm, "tier": "huge"}]})
    assert not _valid(schema, {"goal": "g", "steps": [{**step, "id": "has space"}]})
    assert not _valid(schema, {"goal": "g", "steps": [{**step, "id": "x" * 65}]})  # PlanDraft's limit too
    without = {k: v for k, v in step.items() if k != "depends_on"}
    assert _valid(schema, {"goal": "g", "steps": [without]})  # no dependencies: may be left out


def test_every_plan_the_schema_allows_is_a_plan_the_model_accepts(catalog: ToolCatalog) -> None:
    """The schema is never looser than PlanDraft on what it states: what fits it parses."""
    step = {
        "kind": "llm",
        "id": "w",
        "title": "Write",
        "depends_on": [],
        "instructions": "Write.",
        "tools": ["greet"],
        "success_criteria": ["it greets"],
        "risk": "high",
        "output_format": "json",
        "output_schema": {"type": "object"},
        "approvers": ["dana"],
    }
    assert _valid(planner_schema(catalog, approvers=True), {"goal": "g", "steps": [step]})
    draft, problems = parse_plan_output(json.dumps({"goal": "g", "steps": [step]}))
    assert problems == [] and draft is not None


def test_planner_schema_is_small_enough_for_a_grammar(catalog: ToolCatalog) -> None:
    """No large counted repetitions (maxItems 10000 made llama.cpp's server build a rule per count
    and crash; the id's {0,63} and bounds up to 600 it holds) and `tool` or `kind` first in every
    member, so a grammar decides the member at once."""
    bounds: list[int] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            bounds.extend(v for k, v in node.items() if k in ("maxItems", "maxLength"))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(planner_schema(catalog))
    assert bounds and max(bounds) <= 600 and "10000" not in json.dumps(planner_schema(catalog))
    for member in planner_schema(catalog)["properties"]["steps"]["items"]["anyOf"]:
        assert next(iter(member["properties"])) in ("tool", "kind")


async def test_the_planner_asks_for_the_schema_built_from_the_catalogue(catalog: ToolCatalog) -> None:
    model = FakeModel([plan_json(GOOD)])
    await plan_with_repairs(model, "say hello", catalog)
    assert model.requests[0].response_schema == planner_schema(catalog, positional=True)
