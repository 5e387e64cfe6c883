"""Results that are checked: output schemas, success criteria judged after a step runs, and the
`criteria_unmet` replan when an executor keeps missing them. Real workflows, scripted models."""

from __future__ import annotations

import json
from typing import Any

import pytest
from temporalio.client import WorkflowFailureError

from stratagem.domain.ledger import EventKind, StepStatus, ToolCallRecord, ToolCallStatus
from stratagem.domain.plan import Step
from stratagem.io.executor import Executor, ExecutorProgress
from stratagem.io.store import hydrate
from stratagem.io.verifier import missing_tool_calls


def llm(id: str, instructions: str = "do it", **fields: Any) -> dict[str, Any]:
    return {"id": id, "title": id, "kind": "llm", "instructions": instructions, "depends_on": [], **fields}


GREET = llm(
    "greet",
    "Greet Ada, then record that she was greeted with the record tool.",
    tools=["record"],
    success_criteria=["the greeting is recorded with record"],
)


@pytest.mark.workflow
async def test_a_step_that_skips_its_required_tool_is_sent_back_and_then_calls_it(harness) -> None:
    model = harness.script(
        "exec.yaml",
        {
            "executor": {
                "greet": [
                    {"text": "Hello Ada! I recorded the greeting."},  # it did not
                    {"call": {"tool": "record", "args": {"label": "greeted Ada"}}},
                    {"text": "Hello Ada! Recorded."},
                ]
            }
        },
    )
    run = await harness.start({"goal": "g", "steps": [GREET]}, auto_approve=True, executor=model)
    result = await run.result()
    assert result.outputs == {"greet": "Hello Ada! Recorded."}
    assert [c["tool"] for c in harness.calls()] == ["record"]  # the call really ran, once
    # The record settled the one criterion: no verifier model was asked (the executor's 3 calls only).
    assert len((await run.ledger()).calls) == 3
    ledger = await run.ledger()
    # The executor was told why it was sent back, from the record, not from its claim.
    transcript = hydrate(harness.store, ledger.steps["greet"].transcript)
    sent_back = [m["content"] for m in transcript if m["role"] == "user" and "not done" in m["content"]]
    assert len(sent_back) == 1 and "needs a call of record" in sent_back[0]


@pytest.mark.workflow
async def test_a_step_that_never_meets_its_criteria_triggers_a_criteria_unmet_replan(harness) -> None:
    model = harness.script("exec.yaml", {"executor": {"greet": [{"text": "Hello Ada! I recorded it."}]}})
    first = {"goal": "g", "steps": [GREET]}
    planner = harness.script(
        "planner.yaml",
        {
            "planner": [
                {"plan": first},
                {
                    "plan": {
                        "goal": "g",
                        "steps": [{"id": "note", "title": "Note", "tool": "record", "args": {"label": "Ada"}}],
                    }
                },
            ]
        },
    )
    run = await harness.start(goal="g", planner=planner, executor=model, auto_approve=True, max_replans=1)
    result = await run.result()
    assert result.outputs == {"note": "Ada"}
    ledger = await run.ledger()
    assert ledger.steps["greet"].status is StepStatus.failed
    assert "did not meet its success criteria" in (ledger.steps["greet"].error or "")
    failed = [e for e in ledger.events if e.kind is EventKind.step_failed]
    assert failed[0].data["trigger"] == "criteria_unmet"
    [replan] = [e for e in ledger.events if e.kind is EventKind.replan_requested]
    assert replan.data["trigger"] == "criteria_unmet"
    assert replan.message.startswith("step 'greet' did not meet its success criteria")
    # Sent back twice (the limit), then failed without another attempt of the activity.
    assert ledger.steps["greet"].attempts == 1
    assert [c["tool"] for c in harness.calls()] == ["record"]  # only the replanned step's call


@pytest.mark.workflow
async def test_the_verifier_model_judges_and_its_reason_reaches_the_executor(harness) -> None:
    step = llm("summary", "Summarise the quarter in one line.", success_criteria=["mentions revenue"])
    executor = harness.script(
        "exec.yaml", {"executor": {"summary": [{"text": "A fine quarter."}, {"text": "Revenue rose 4%."}]}}
    )
    verifier = harness.script(
        "verifier.yaml",
        {"verifier": {"summary": [{"met": False, "reason": "no word on revenue"}, {"met": True, "reason": "ok"}]}},
    )
    run = await harness.start({"goal": "g", "steps": [step]}, auto_approve=True, executor=executor, verifier=verifier)
    result = await run.result()
    assert result.outputs == {"summary": "Revenue rose 4%."}
    ledger = await run.ledger()
    models = [c.model for c in ledger.calls]
    # executor, verifier (unmet), executor, verifier (met): the verifier's calls are usage too.
    assert models == [executor, verifier, executor, verifier]
    transcript = hydrate(harness.store, ledger.steps["summary"].transcript)
    assert any("no word on revenue" in m["content"] for m in transcript if m["role"] == "user")


@pytest.mark.workflow
async def test_an_answer_that_breaks_the_output_schema_is_sent_back(harness) -> None:
    schema = {"type": "object", "properties": {"total": {"type": "number"}}, "required": ["total"]}
    step = llm("sum", "Add up the invoices.", output_schema=schema)
    model = harness.script(
        "exec.yaml", {"executor": {"sum": [{"json": {"total": "lots"}}, {"json": {"total": 1200.5}}]}}
    )
    run = await harness.start({"goal": "g", "steps": [step]}, auto_approve=True, executor=model)
    result = await run.result()
    assert result.outputs == {"sum": {"total": 1200.5}}


@pytest.mark.workflow
async def test_an_output_schema_that_is_never_met_fails_the_step(harness) -> None:
    schema = {"type": "object", "properties": {"total": {"type": "number"}}, "required": ["total"]}
    step = llm("sum", "Add up the invoices.", output_schema=schema)
    model = harness.script("exec.yaml", {"executor": {"sum": [{"json": {"sum": 3}}]}})
    run = await harness.start({"goal": "g", "steps": [step]}, executor=model, auto_approve=True)
    with pytest.raises(WorkflowFailureError):
        await run.result()
    ledger = await run.ledger()
    assert "still wrong after 2 corrections (the answer lacks field 'total')" in (ledger.steps["sum"].error or "")


@pytest.mark.unit
def test_an_output_schema_on_the_wrong_kind_of_step_or_with_refs_is_refused() -> None:
    from stratagem.domain.catalog import ToolCatalog
    from stratagem.domain.plan import PlanDraft
    from stratagem.domain.validation import plan_problems

    human = {"id": "ask", "title": "Ask", "kind": "human", "instructions": "?", "output_schema": {"type": "object"}}
    reffed = llm("w", output_schema={"$ref": "https://example.com/schema.json"})
    bad = llm("x", output_schema={"type": "no-such-type"})
    draft = PlanDraft.model_validate({"goal": "g", "steps": [human, reffed, bad]})
    problems = plan_problems(draft, ToolCatalog())
    assert "step 'ask' has an output_schema, but only llm steps have their answer checked against one" in problems
    assert "step 'w': output_schema may not use $ref; write the schema out in full" in problems
    assert any(p.startswith("step 'x': output_schema") and "is not a valid schema" in p for p in problems)


@pytest.mark.unit
def test_criteria_naming_a_tool_need_a_successful_call_of_it() -> None:
    step = Step.model_validate({**GREET, "tools": ["record", "read_note"]})
    failed = ToolCallRecord(call=0, tool="record", status=ToolCallStatus.error, message="boom")
    assert "needs a call of record" in (missing_tool_calls(step, [failed]) or "")
    done = ToolCallRecord(call=1, tool="record", status=ToolCallStatus.ok)
    assert missing_tool_calls(step, [failed, done]) is None
    # A tool name inside a longer word is not a mention of it.
    other = Step.model_validate({**GREET, "success_criteria": ["the recorder was told"]})
    assert missing_tool_calls(other, []) is None


@pytest.mark.unit
def test_progress_from_before_verification_still_loads() -> None:
    """A checkpoint written by a worker without the verifier resumes on one with it."""
    old = {"messages": [], "calls": [], "tool_calls": [], "json_repairs": 1}
    progress = ExecutorProgress.model_validate(json.loads(json.dumps(old)))
    assert progress.verifications == 0 and progress.negotiated == []
    assert Executor  # the executor reads it (tests/test_executor.py covers the resume)


# --- the final check ----------------------------------------------------------------------------


@pytest.mark.workflow
async def test_the_final_check_sends_a_run_that_missed_its_goal_back_to_the_planner(harness) -> None:
    first = {"goal": "g", "steps": [{"id": "draft", "title": "Draft", "tool": "record", "args": {"label": "draft"}}]}
    second = {
        "goal": "g",
        "steps": [
            {"id": "draft", "title": "Draft", "tool": "record", "args": {"label": "draft"}},
            {"id": "send", "title": "Send", "tool": "record", "args": {"label": "sent"}, "depends_on": ["draft"]},
        ],
    }
    planner = harness.script(
        "planner.yaml",
        {
            "planner": [{"plan": first}, {"plan": second}],
            "verifier": {"goal": [{"met": False, "reason": "nothing was sent"}, {"met": True, "reason": "sent"}]},
        },
    )
    run = await harness.start(goal="g", planner=planner, auto_approve=True, final_check=True)
    result = await run.result()
    assert result.outputs == {"send": "sent"}
    assert [c["tool"] for c in harness.calls()] == ["record", "record"]  # draft ran once, then send
    ledger = await run.ledger()
    checks = [(e.data["met"], e.message) for e in ledger.events if e.kind is EventKind.goal_checked]
    assert checks == [(False, "nothing was sent"), (True, "sent")]
    [replan] = [e for e in ledger.events if e.kind is EventKind.replan_requested]
    assert replan.data["trigger"] == "goal_unmet"
    assert replan.message == "the final check found the goal not reached: nothing was sent"
    assert [c.purpose for c in ledger.calls].count("verify") == 2  # usage like any other


@pytest.mark.workflow
async def test_without_the_option_no_final_check_is_made(harness) -> None:
    plan = {"goal": "g", "steps": [{"id": "a", "title": "A", "tool": "record", "args": {"label": "a"}}]}
    planner = harness.script("planner.yaml", {"planner": [{"plan": plan}]})
    run = await harness.start(goal="g", planner=planner, auto_approve=True)
    await run.result()
    ledger = await run.ledger()
    assert not [e for e in ledger.events if e.kind is EventKind.goal_checked]
    assert [c.purpose for c in ledger.calls] == ["plan"]
