"""Planning with small models (#44): ids and dependencies the engine mends, the output cap sized to
the catalogue, answers cut off at their cap or time limit repaired (streamed, over the real
openai SDK against a local server speaking its wire format), and timed-out calls repaired."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from support.wire_servers import FakeAnthropic, FakeOpenAI, Reply

from stratagem.io.plan_mending import close_cut_answer, mend_steps
from stratagem.io.planner import PlanningFailed, plan_with_repairs
from stratagem.io.planner_schema import planner_output_cap, planner_schema
from stratagem.models import ModelRequest, ModelResponse, Usage, load_model
from stratagem.models.base import ModelTimeout
from stratagem.tools import ToolCatalog, ToolRegistry

pytestmark = pytest.mark.unit


def greet(name: str) -> str:
    """Greet someone by name."""
    return f"Hello {name}"


def record(text: str) -> str:
    """Record a line of text."""
    return text


@pytest.fixture
def catalog() -> ToolCatalog:
    registry = ToolRegistry()
    registry.register(greet)
    registry.register(record)
    return registry.catalog()


def step(sid: Any, tool: str = "greet", depends_on: Any = None, **args: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"id": sid, "title": f"Step {sid}", "tool": tool, "args": args or {"name": "Ada"}}
    if depends_on is not None:
        entry["depends_on"] = depends_on
    return entry


class Answers:
    """Answers planner requests from a list of (text, stop reason) or exceptions."""

    def __init__(self, *answers: Any):
        self.name = "fake:planner"
        self.answers = list(answers)
        self.requests: list[ModelRequest] = []

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        answer = self.answers[len(self.requests) - 1]
        if isinstance(answer, Exception):
            raise answer
        text, stop = answer if isinstance(answer, tuple) else (answer, "stop")
        return ModelResponse(
            text=text, model=self.name, usage=Usage(input_tokens=10, output_tokens=3), stop_reason=stop
        )


# --- ids and dependencies, mended ---------------------------------------------------------------


def test_duplicate_and_invalid_ids_get_unique_valid_ones_and_references_follow() -> None:
    data = {
        "goal": "g",
        "steps": [
            step("greet"),
            step("greet", "record", text="${greet}"),
            step("write it down", "record", ["greet_2"], text="${write it down}"),
            {"title": "No id at all", "tool": "greet", "args": {"name": "Bo"}},
        ],
    }
    notes = mend_steps(data)
    assert [s["id"] for s in data["steps"]] == ["greet", "greet_2", "write_it_down", "no_id_at_all"]
    assert data["steps"][2]["depends_on"] == ["greet_2"]
    assert any("'greet_2'" in n for n in notes) and any("no id" in n for n in notes)


def test_dependencies_by_position_misspelling_tool_name_and_string_are_resolved() -> None:
    data = {
        "goal": "g",
        "steps": [
            step("fetch_page"),
            step("summarise", "record", ["fetch_pgae"]),
            step("third", "record", 1),
            step("fourth", "record", ["step 2", "greet", "nothing_like_it", "fourth"]),
        ],
    }
    mend_steps(data)
    assert data["steps"][1]["depends_on"] == ["fetch_page"]
    assert data["steps"][2]["depends_on"] == ["fetch_page"]
    # "greet" is the one step calling the tool greet; a self-dependency is dropped; what cannot
    # be told stays for validation to report.
    assert data["steps"][3]["depends_on"] == ["summarise", "fetch_page", "nothing_like_it"]


async def test_a_plan_with_careless_ids_is_valid_at_the_first_call(catalog: ToolCatalog) -> None:
    answer = json.dumps({"goal": "g", "steps": [step("a b"), step("a b", "record", ["1"], text="${a b}")]})
    model = Answers(answer)
    outcome = await plan_with_repairs(model, "g", catalog)
    assert outcome.calls == 1 and outcome.rejected_attempts == []
    assert outcome.draft.step_ids == ["a_b", "a_b_2"]
    assert outcome.draft.steps[1].depends_on == ["a_b"] and outcome.draft.steps[1].args == {"text": "${a_b}"}
    assert outcome.repairs  # what was mended is on record


async def test_an_unresolvable_dependency_still_gets_a_repair(catalog: ToolCatalog) -> None:
    bad = json.dumps({"goal": "g", "steps": [step("a"), step("b", depends_on=["zzz"])]})
    good = json.dumps({"goal": "g", "steps": [step("a"), step("b", depends_on=["a"])]})
    outcome = await plan_with_repairs(Answers(bad, good), "g", catalog)
    assert outcome.calls == 2 and "zzz" in " ".join(outcome.rejected_attempts[0])


# --- the output cap -----------------------------------------------------------------------------


def test_output_cap_grows_with_the_catalogue_and_stays_bounded(catalog: ToolCatalog) -> None:
    small = planner_output_cap(catalog)
    assert 768 <= small < 4096
    vendors = ToolRegistry.from_modules(["examples/vendor_onboarding/tools.py"]).catalog()
    assert small < planner_output_cap(vendors) <= 8192


async def test_planning_calls_ask_for_the_catalogue_cap(catalog: ToolCatalog) -> None:
    model = Answers(json.dumps({"goal": "g", "steps": [step("a")]}))
    await plan_with_repairs(model, "g", catalog)
    assert model.requests[0].max_output_tokens == planner_output_cap(catalog)


# --- cut-off answers ----------------------------------------------------------------------------


def test_close_cut_answer_keeps_whole_steps_once() -> None:
    whole = json.dumps({"goal": "g", "steps": [step("a"), step("b", "record", text="x"), step("b2", name="Bo")]})
    cut = whole[: whole.rindex('{"id": "b2"') + 20]
    plan, repeats = close_cut_answer(cut)
    assert plan is not None and [s["id"] for s in plan["steps"]] == ["a", "b"] and plan["goal"] == "g"
    # A step doing what an earlier one did (under another id and title) is a model running on.
    looping = json.dumps({"goal": "g", "steps": [step("a"), step("a1"), step("a2")]})[:-10]
    plan, repeats = close_cut_answer(looping)
    assert plan is not None and [s["id"] for s in plan["steps"]] == ["a"] and repeats == 1
    assert close_cut_answer('{"goal": "g", "ste') == (None, 0)


async def test_a_cut_answer_is_repaired_shown_only_its_whole_steps(catalog: ToolCatalog) -> None:
    whole = json.dumps({"goal": "g", "steps": [step("a"), step("b", "record", ["a"], text="x")]})
    cut = whole[:-30] + ' "and on and on'
    model = Answers((cut, "length"), whole)
    outcome = await plan_with_repairs(model, "g", catalog, max_output_tokens=900)
    assert outcome.calls == 2
    assert outcome.rejected_attempts[0] == [
        "the answer was cut off at 900 output tokens after the 1 step(s) written whole; reply with the whole plan, shorter"
    ]
    repair = model.requests[1].messages
    # The repair holds the question, the closed answer (not the text cut in two) and the problems.
    assert [m.role for m in repair] == ["system", "user", "assistant", "user"]
    assert json.loads(repair[2].content)["steps"] == [step("a")]


async def test_a_cut_answer_that_repeats_itself_is_taken_as_its_steps(catalog: ToolCatalog) -> None:
    looping = json.dumps({"goal": "g", "steps": [step("a"), step("b", "record", ["a"], text="x")] + [step("b")] * 3})
    outcome = await plan_with_repairs(Answers((looping[:-40], "length")), "g", catalog)
    assert outcome.calls == 1 and outcome.draft.step_ids == ["a", "b"]
    assert "cut off" in outcome.draft.reason and "repeating" in outcome.repairs[0]


async def test_the_last_cut_answer_is_taken_when_whole_steps_make_a_plan(catalog: ToolCatalog) -> None:
    cut = json.dumps({"goal": "g", "steps": [step("a"), step("b")]})[:-25]
    outcome = await plan_with_repairs(Answers((cut, "length"), (cut, "length")), "g", catalog, max_repairs=1)
    assert outcome.calls == 2 and outcome.draft.step_ids == ["a"]
    assert "check it reaches the goal" in outcome.draft.reason
    # Not taken while a repair was still possible: the first answer was sent back.
    assert len(outcome.rejected_attempts) == 1


async def test_a_cut_answer_with_no_whole_step_fails_with_the_reason(catalog: ToolCatalog) -> None:
    with pytest.raises(PlanningFailed) as failed:
        await plan_with_repairs(Answers(('{"goal": "g", "steps": [{"id": "a', "length")), "g", catalog, max_repairs=0)
    assert failed.value.attempts == [["the answer was cut off at 768 output tokens; write a shorter plan"]]


# --- timed-out calls ----------------------------------------------------------------------------


async def test_a_timed_out_call_is_an_attempt_that_gets_a_repair(catalog: ToolCatalog) -> None:
    good = json.dumps({"goal": "g", "steps": [step("a")]})
    model = Answers(ModelTimeout("openai did not answer: timed out after 60 s"), good)
    outcome = await plan_with_repairs(model, "g", catalog)
    assert outcome.calls == 2 and outcome.rejected_attempts == [["no answer arrived within the time limit"]]
    asked = model.requests[1].messages
    assert [m.role for m in asked] == ["system", "user", "user"] and "shorter plan" in asked[2].content


async def test_every_call_timing_out_stays_retryable(catalog: ToolCatalog) -> None:
    model = Answers(*[ModelTimeout("timed out after 60 s")] * 3)
    with pytest.raises(ModelTimeout):  # the server may be down: Temporal retries the activity
        await plan_with_repairs(model, "g", catalog)


# --- streamed over the wire ---------------------------------------------------------------------


@pytest.fixture(params=["openai", "anthropic"])
def fake(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI | FakeAnthropic]:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with FakeOpenAI() if request.param == "openai" else FakeAnthropic() as server:
        yield server


def provider(fake: FakeOpenAI | FakeAnthropic) -> str:
    return "openai" if isinstance(fake, FakeOpenAI) else "anthropic"


async def test_a_planning_call_streams_and_reads_text_and_usage(
    fake: FakeOpenAI | FakeAnthropic, catalog: ToolCatalog
) -> None:
    fake.enqueue(Reply.json({"goal": "g", "steps": [step("a")]}, usage=(321, 45)))
    outcome = await plan_with_repairs(load_model(f"{provider(fake)}:small@{fake.base_url}"), "g", catalog)
    assert outcome.draft.step_ids == ["a"]
    assert (outcome.usage.input_tokens, outcome.usage.output_tokens) == (321, 45)
    body = fake.requests[-1].body
    assert body["stream"] is True and body["max_tokens"] == planner_output_cap(catalog)
    if provider(fake) == "openai":
        assert body["stream_options"] == {"include_usage": True}


async def test_a_streamed_plan_still_being_written_at_the_time_limit_is_cut_and_repaired(
    fake: FakeOpenAI | FakeAnthropic, catalog: ToolCatalog
) -> None:
    plan = {"goal": "g", "steps": [step("a"), step("b", "record", ["a"], text="x")]}
    fake.enqueue(Reply.trickle(json.dumps(plan)[:-25] + " " * 1000, every=0.005), Reply.json(plan, usage=(50, 20)))
    model = load_model(f"{provider(fake)}:small@{fake.base_url}")
    started = time.monotonic()
    outcome = await plan_with_repairs(model, "g", catalog, request_timeout=lambda: 2.0)
    assert time.monotonic() - started < 4.5  # cut at 2 s, not waited out (the answer takes > 6 s)
    assert outcome.calls == 2 and outcome.draft.step_ids == ["a", "b"]
    assert "2 s time limit after the 1 step(s) written whole" in outcome.rejected_attempts[0][0]
    shown = [m for m in fake.requests[-1].body["messages"] if m["role"] == "assistant"][0]["content"]
    assert json.loads(shown)["steps"] == [step("a")]


# --- a first plan names steps by their places ---------------------------------------------------


def test_a_first_plans_schema_leaves_ids_to_the_engine_and_enumerates_places(catalog: ToolCatalog) -> None:
    from jsonschema import Draft202012Validator

    schema = planner_schema(catalog, positional=True)
    places = schema["$defs"]["ids"]["items"]["enum"]
    assert places[:2] == ["step1", "step2"] and len(places) == 4 * len(catalog.tools) + 8
    validator = Draft202012Validator(schema)
    good = {"goal": "g", "steps": [{"tool": "greet", "title": "Hi", "args": {"name": "A"}, "depends_on": ["step2"]}]}
    assert not list(validator.iter_errors(good))
    misspelt = {**good, "steps": [{**good["steps"][0], "depends_on": ["greet"]}]}
    assert list(validator.iter_errors(misspelt))  # a tool's name, or any id, is not a place
    with_id = {**good, "steps": [{**good["steps"][0], "id": "hi"}]}
    assert list(validator.iter_errors(with_id))  # no id: the engine makes it
    # A revision names steps by their ids, which it must keep.
    assert "id" in planner_schema(catalog)["$defs"] and "enum" not in planner_schema(catalog)["$defs"]["ids"]["items"]


async def test_a_positional_answer_gets_ids_from_titles_and_its_places_resolved(catalog: ToolCatalog) -> None:
    answer = {
        "goal": "g",
        "steps": [
            {"tool": "greet", "title": "Greet Ada warmly today please", "args": {"name": "Ada"}},
            {
                "tool": "record",
                "title": "Record it",
                "args": {"text": "${step1} / ${step1.x} / $${step1}"},
                "depends_on": ["step1"],
            },
            {"kind": "human", "title": "Record it", "instructions": "Check ${step2}", "depends_on": ["step2", "step1"]},
        ],
    }
    model = Answers(json.dumps(answer))
    outcome = await plan_with_repairs(model, "g", catalog)
    assert outcome.calls == 1 and outcome.repairs == []  # ids by design are not repairs
    assert outcome.draft.step_ids == ["greet_ada_warmly_today", "record_it", "record_it_2"]
    second, third = outcome.draft.steps[1], outcome.draft.steps[2]
    assert second.depends_on == ["greet_ada_warmly_today"]
    assert second.args == {"text": "${greet_ada_warmly_today} / ${greet_ada_warmly_today.x} / $${step1}"}
    assert third.depends_on == ["record_it", "greet_ada_warmly_today"] and third.instructions == "Check ${record_it}"
    assert model.requests[0].response_schema == planner_schema(catalog, positional=True)


async def test_a_place_past_the_last_step_is_sent_back(catalog: ToolCatalog) -> None:
    bad = {"goal": "g", "steps": [{"tool": "greet", "title": "Hi", "args": {"name": "A"}, "depends_on": ["step7"]}]}
    good = {"goal": "g", "steps": [{"tool": "greet", "title": "Hi", "args": {"name": "A"}}]}
    outcome = await plan_with_repairs(Answers(json.dumps(bad), json.dumps(good)), "g", catalog)
    assert outcome.calls == 2 and "step7" in " ".join(outcome.rejected_attempts[0])
