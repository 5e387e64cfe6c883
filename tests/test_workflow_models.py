"""Executors with tools, usage and cost, budgets, tiers and joint mode, on real workflows.

The models here are scripted (offline); tests/test_workflow_wire.py runs the same machinery
through the real OpenAI and Anthropic SDK clients against local servers.
"""

from __future__ import annotations

import pytest
from support.plans import awaiting, step
from support.signing import send_signed
from temporalio.client import WorkflowFailureError

from stratagem.common.errors import DecisionRefusedError
from stratagem.domain.ledger import EventKind, StepStatus, ToolCallStatus
from stratagem.domain.run_types import ApproveInput, BudgetInput, DecisionKind, Phase
from stratagem.domain.usage import Price
from stratagem.models import ModelRequest, ModelResponse, ScriptedModel, register_provider

# Requests the `recording:` provider saw, by step id: what the executor model was told.
SEEN: dict[str, list[ModelRequest]] = {}


class RecordingScripted(ScriptedModel):
    async def complete(self, request: ModelRequest) -> ModelResponse:
        SEEN.setdefault(request.step_id or request.purpose.value, []).append(request)
        return await super().complete(request)


register_provider("recording", RecordingScripted)


def llm(id: str, instructions: str = "do it", depends_on: list[str] | None = None, **fields) -> dict:
    return {
        "id": id,
        "title": id,
        "kind": "llm",
        "instructions": instructions,
        "depends_on": depends_on or [],
        **fields,
    }


def usage(i: int, o: int) -> dict:
    return {"usage": {"input_tokens": i, "output_tokens": o}}


@pytest.mark.workflow
async def test_executor_calls_allowed_tools_and_is_refused_the_rest(harness):
    model = harness.script(
        "exec.yaml",
        {
            "executor": {
                "research": [
                    {"call": {"tool": "read_note", "args": {"name": "a"}}},
                    # The note told it to delete; the step does not allow that.
                    {
                        "calls": [
                            {"tool": "delete_records", "args": {"table": "customers"}},
                            {"tool": "record", "args": {"label": "checked"}},
                        ]
                    },
                    {"text": "checked the note"},
                ]
            }
        },
    ).replace("scripted:", "recording:")
    plan = {"goal": "g", "steps": [llm("research", "read note a", tools=["read_note", "record"])]}
    run = await harness.start(plan, auto_approve=True, executor=model)
    result = await run.result()
    assert result.outputs == {"research": "checked the note"}

    # The refused call never ran; the allowed one did, with its own idempotency key.
    assert [c["tool"] for c in harness.calls()] == ["record"]
    assert harness.calls()[0]["key"].endswith("/research/r1/c2")

    ledger = await run.ledger()
    calls = ledger.steps["research"].tool_calls
    assert [(c.tool, c.status) for c in calls] == [
        ("read_note", ToolCallStatus.ok),
        ("delete_records", ToolCallStatus.refused),
        ("record", ToolCallStatus.ok),
    ]
    refused = [e for e in ledger.events if e.kind is EventKind.tool_call_refused]
    assert len(refused) == 1 and refused[0].data["tool"] == "delete_records" and refused[0].step_id == "research"

    requests = SEEN["research"]
    # Only the allowed tools are offered, on every round.
    assert all(sorted(t.name for t in r.tools) == ["read_note", "record"] for r in requests)
    # The model is told about the refusal, as a tool result marked as an error.
    told = [m for m in requests[-1].messages if m.role == "tool" and m.is_error]
    assert len(told) == 1 and "not authorized" in told[0].content and "It was not run" in told[0].content


@pytest.mark.workflow
async def test_usage_and_cost_are_kept_per_call_step_and_run(harness):
    path = harness.script(
        "priced.yaml",
        {
            "executor": {"a": {"text": "A", **usage(1000, 500)}, "b": {"json": [1, 2], **usage(3000, 1000)}},
            "synthesis": {"text": "done", **usage(200, 100)},
        },
    )
    plan = {"goal": "g", "steps": [llm("a"), llm("b", output_format="json"), step("t", "record", label="x")]}
    prices = {path: Price(input_per_mtok=1.0, output_per_mtok=2.0)}
    run = await harness.start(plan, auto_approve=True, executor=path, synthesizer=path, prices=prices)
    assert (await run.result()).outputs["b"] == [1, 2]

    ledger = await run.ledger()
    assert [(c.purpose, c.step_id, c.input_tokens, c.output_tokens) for c in ledger.calls] in (
        [("execute", "a", 1000, 500), ("execute", "b", 3000, 1000), ("synthesize", None, 200, 100)],
        [("execute", "b", 3000, 1000), ("execute", "a", 1000, 500), ("synthesize", None, 200, 100)],
    )
    assert ledger.steps["a"].usage.cost_usd == pytest.approx(0.002)
    assert ledger.steps["b"].usage.input_tokens == 3000
    assert ledger.steps["t"].usage is None  # tool steps call no model
    assert (ledger.usage.calls, ledger.usage.input_tokens, ledger.usage.output_tokens) == (3, 4200, 1600)
    assert ledger.usage.cost_usd == pytest.approx((4200 * 1 + 1600 * 2) / 1e6)
    status = await run.status()
    assert status.usage == ledger.usage


@pytest.mark.workflow
async def test_an_unpriced_model_is_counted_but_not_costed(harness):
    path = harness.script("unpriced.yaml", {"executor": {"a": {"text": "A", **usage(10, 5)}}})
    model = path.replace("scripted:", "recording:")  # not free like scripted:, and no price given
    run = await harness.start({"goal": "g", "steps": [llm("a")]}, auto_approve=True, executor=model)
    await run.result()
    totals = (await run.ledger()).usage
    assert (totals.calls, totals.tokens, totals.unpriced_calls, totals.cost_usd) == (1, 15, 1, 0.0)


async def resumes_after_a_failed_attempt(harness) -> None:
    model = harness.script(
        "resume.yaml",
        {
            "executor": {
                "work": [
                    {"call": {"tool": "record", "args": {"label": "side effect"}}, **usage(100, 10)},
                    {"fail": "upstream 503"},
                    {"text": "finished", **usage(150, 20)},
                ]
            }
        },
    )
    run = await harness.start(
        {"goal": "g", "steps": [llm("work", tools=["record"])]}, auto_approve=True, executor=model
    )
    assert (await run.result()).outputs == {"work": "finished"}
    # The tool ran once: the second attempt resumed after it instead of starting over.
    assert [c["label"] for c in harness.calls()] == ["side effect"]
    record = (await run.ledger()).steps["work"]
    assert record.attempts == 2
    assert [(c.attempt, c.input_tokens) for c in (await run.ledger()).calls] == [(1, 100), (2, 150)]
    assert [t.attempt for t in record.tool_calls] == [1]


@pytest.mark.workflow
async def test_a_cost_limit_is_refused_while_a_model_has_no_price(harness):
    path = harness.script("unpriced2.yaml", {"executor": {"a": "A"}})
    run = await harness.start({"goal": "g", "steps": [llm("a")]}, executor=path.replace("scripted:", "recording:"))
    await harness.wait_for(run, awaiting)
    with pytest.raises(DecisionRefusedError, match=r"a cost limit cannot hold: recording:.* has no price in this run"):
        await run.budget(BudgetInput(by="x", cost_usd=1))
    await run.budget(BudgetInput(by="x", tokens=1000))  # tokens can always be counted


@pytest.mark.workflow
async def test_a_retry_resumes_the_conversation_and_counts_every_attempt(harness):
    await resumes_after_a_failed_attempt(harness)


@pytest.mark.system
async def test_the_dev_server_hands_the_checkpoint_to_the_next_attempt(dev_harness):
    # The time-skipping server does not promise to keep heartbeat details across a failure; the
    # real server does. Same scenario, on the server production uses.
    await resumes_after_a_failed_attempt(dev_harness)


@pytest.mark.system
async def test_a_timed_out_step_still_counts_the_calls_it_paid_for(dev_harness):
    model = dev_harness.script(
        "hang.yaml",
        {"executor": {"hang": {"call": {"tool": "slow", "args": {"label": "x", "seconds": 6}}, **usage(50, 5)}}},
    )
    plan = {"goal": "g", "steps": [llm("hang", tools=["slow"], timeout_seconds=2, max_attempts=1)]}
    run = await dev_harness.start(plan, auto_approve=True, executor=model)
    with pytest.raises(WorkflowFailureError):
        await run.result()
    ledger = await run.ledger()
    assert (
        ledger.steps["hang"].status is StepStatus.failed
        and ledger.steps["hang"].error == "timed out: an attempt took longer than its time limit"
    )
    # The model call was checkpointed before the tool hung, and reached the workflow with the timeout.
    assert (ledger.usage.calls, ledger.usage.tokens) == (1, 55)


@pytest.mark.workflow
async def test_a_step_that_never_finishes_fails_with_its_usage_counted(harness):
    model = harness.script(
        "loop.yaml", {"executor": {"spin": {"call": {"tool": "record", "args": {"label": "again"}}, **usage(10, 1)}}}
    )
    run = await harness.start(
        {"goal": "g", "steps": [llm("spin", tools=["record"])]}, auto_approve=True, executor=model, max_tool_rounds=3
    )
    with pytest.raises(WorkflowFailureError):
        await run.result()
    ledger = await run.ledger()
    record = ledger.steps["spin"]
    assert record.status is StepStatus.failed
    assert "made 3 model calls without finishing" in record.error
    assert record.attempts == 1  # the limit is not worth retrying
    assert ledger.usage.calls == 3 and len(record.tool_calls) == 3


@pytest.mark.workflow
async def test_tiers_route_steps_to_their_models(harness):
    default = harness.script("default.yaml", {"executor": {"plain": "from default"}})
    fast = harness.script("fast.yaml", {"executor": {"quick": "from fast"}})
    plan = {"goal": "g", "steps": [llm("plain"), llm("quick", tier="fast")]}
    run = await harness.start(plan, auto_approve=True, executor=default, tiers={"fast": fast})
    assert (await run.result()).outputs == {"plain": "from default", "quick": "from fast"}
    models = {c.step_id: c.model for c in (await run.ledger()).calls}
    assert models == {"plain": default, "quick": fast}


@pytest.mark.workflow
async def test_a_step_naming_an_unrouted_tier_is_refused_before_it_runs(harness):
    run = await harness.start(
        {"goal": "g", "steps": [llm("x", tier="huge")]}, auto_approve=True, executor="scripted:none.yaml"
    )
    with pytest.raises(Exception) as caught:
        await run.result()
    assert "names model tier 'huge', which the run does not route (configured tiers: none)" in str(caught.value.cause)


@pytest.mark.workflow
async def test_the_same_model_plans_and_executes(harness):
    both = harness.script(
        "both.yaml",
        {
            "planner": [{"plan": {"goal": "g", "steps": [llm("summarise", "summarise the goal")]}}],
            "executor": {"summarise": "a summary"},
        },
    )
    run = await harness.start(goal="g", planner=both, executor=both, auto_approve=True)
    assert (await run.result()).outputs == {"summarise": "a summary"}
    assert {c.purpose for c in (await run.ledger()).calls} == {"plan", "execute"}


@pytest.mark.workflow
async def test_joint_mode_is_one_reviewed_loop(harness):
    model = harness.script(
        "joint.yaml",
        {"executor": {"task": [{"call": {"tool": "record", "args": {"label": "acted"}}}, {"text": "goal reached"}]}},
    )
    run = await harness.start(goal="record that we acted", mode="joint", executor=model, joint_tools=["record"])
    status = await harness.wait_for(run, awaiting)
    assert harness.calls() == []  # nothing runs before a person approves
    plan = await run.plan()
    assert [(s.id, s.kind.value, s.tools) for s in plan.steps] == [("task", "llm", ["record"])]
    assert plan.author.name == model and plan.steps[0].instructions == "record that we acted"
    await run.approve(ApproveInput(by="alice", revision=status.revision))
    assert (await run.result()).outputs == {"task": "goal reached"}
    assert [c["label"] for c in harness.calls()] == ["acted"]


@pytest.mark.workflow
async def test_joint_mode_does_not_replan(harness):
    model = harness.script(
        "joint_fail.yaml", {"executor": {"task": {"call": {"tool": "broken", "args": {"reason": "x"}}}}}
    )
    run = await harness.start(
        goal="g", mode="joint", executor=model, joint_tools=["broken"], auto_approve=True, max_tool_rounds=1
    )
    with pytest.raises(Exception) as caught:
        await run.result()
    assert "a joint run does not replan" in str(caught.value.cause)


# ------------------------------------------------------------------ budgets


def four_steps(harness, name: str, delay: float = 0.0) -> tuple[str, dict]:
    path = harness.script(name, {"executor": {s: {"text": s, **usage(60, 40)} for s in "abcd"}})
    model = f"slow:{delay}:{path.removeprefix('scripted:')}" if delay else path
    return model, {"goal": "g", "steps": [llm(s) for s in "abcd"]}


@pytest.mark.workflow
async def test_the_budget_pauses_the_run_before_a_step_would_cross_the_line(harness):
    model, plan = four_steps(harness, "budget.yaml")
    run = await harness.start(plan, auto_approve=True, executor=model, budget={"tokens": 250})
    status = await harness.wait_for(run, lambda s: any(p.kind is DecisionKind.budget for p in s.pending))
    assert status.phase is Phase.running
    assert "the token budget has 50 left, less than one model call takes (100)" in status.pending[0].prompt
    ledger = await run.ledger()
    # Two steps ran, one at a time; the third would cross the line, so it waits with the fourth.
    assert [ledger.steps[s].status for s in "abcd"] == [StepStatus.succeeded] * 2 + [StepStatus.pending] * 2
    assert ledger.usage.tokens == 200
    spans = sorted((ledger.steps[s].started_at, ledger.steps[s].ended_at) for s in "ab")
    assert all(earlier[1] <= later[0] for earlier, later in zip(spans, spans[1:], strict=False))

    with pytest.raises(
        DecisionRefusedError, match="a tokens limit of 200 leaves no room: the run has used 200 already"
    ):
        await run.budget(BudgetInput(by="bob", tokens=200))
    outcome = await run.budget(BudgetInput(by="bob", tokens=1000, reason="worth it"))
    assert outcome.accepted
    result = await run.result()
    assert result.outputs["d"] == "d"
    ledger = await run.ledger()
    kinds = [e.kind for e in ledger.events]
    assert kinds.count(EventKind.budget_exhausted) == 1
    warned = [e for e in ledger.events if e.kind is EventKind.budget_warning]
    assert [w.message for w in warned] == ["the token budget is 80% used (200 of 250)"]  # once, before it ran out
    assert kinds.index(EventKind.budget_warning) < kinds.index(EventKind.budget_exhausted)
    assert kinds.index(EventKind.budget_changed) < max(i for i, e in enumerate(ledger.events) if e.step_id == "d")
    assert ledger.decisions[-1].by == "bob" and ledger.decisions[-1].comment == "tokens 250 -> 1000. worth it"


@pytest.mark.workflow
async def test_a_person_may_stop_a_run_at_its_budget(harness):
    model, plan = four_steps(harness, "stop.yaml")
    run = await harness.start(plan, auto_approve=True, executor=model, budget={"model_calls": 2})
    await harness.wait_for(run, lambda s: bool(s.pending))
    with pytest.raises(DecisionRefusedError, match="a stop takes no limits"):
        await run.budget(BudgetInput(by="carol", stop=True, model_calls=10))
    await send_signed(run, "budget_signal", BudgetInput(by="carol", stop=True, reason="enough"))
    result = await run.result()
    assert result.status is Phase.rejected
    assert result.reason == "stopped by carol when the budget ran out: enough"
    ledger = await run.ledger()
    assert sum(r.status is StepStatus.succeeded for r in ledger.steps.values()) == 2
    assert ledger.usage.calls == 2


@pytest.mark.workflow
async def test_budget_decisions_are_checked(harness):
    model, plan = four_steps(harness, "checked.yaml")
    run = await harness.start(plan, executor=model)
    await harness.wait_for(run, awaiting)
    with pytest.raises(DecisionRefusedError, match="not waiting on its budget"):
        await run.budget(BudgetInput(by="x", stop=True))
    with pytest.raises(DecisionRefusedError, match="give at least one limit"):
        await run.budget(BudgetInput(by="x"))
    # Set ahead of time, a budget applies from the first dispatch.
    await run.budget(BudgetInput(by="x", model_calls=1))
    await run.approve(ApproveInput(by="x"))
    status = await harness.wait_for(run, lambda s: bool(s.pending))
    assert status.steps.succeeded == 1 and "model-call budget is used up (1 of 1)" in status.pending[0].prompt


@pytest.mark.system
async def test_an_ample_budget_keeps_steps_parallel(dev_harness):
    model, plan = four_steps(dev_harness, "ample.yaml", delay=0.5)
    run = await dev_harness.start(plan, auto_approve=True, executor=model, budget={"tokens": 100_000})
    await run.result()
    ledger = await run.ledger()
    # The first step runs alone (nothing is known of a step's cost yet); the other three together.
    first = min("abcd", key=lambda s: ledger.steps[s].started_at)
    rest = [ledger.steps[s] for s in "abcd" if s != first]
    assert all(r.started_at >= ledger.steps[first].ended_at for r in rest)
    assert max(r.started_at for r in rest) < min(r.ended_at for r in rest)


@pytest.mark.workflow
async def test_the_wall_clock_budget_holds_the_next_dispatch(harness):
    model = harness.script("wall.yaml", {"executor": {"later": "late"}})
    plan = {
        "goal": "g",
        "steps": [
            {"id": "wait", "title": "wait", "kind": "human", "instructions": "ok?"},
            llm("later", depends_on=["wait"]),
        ],
    }
    run = await harness.start(plan, auto_approve=True, executor=model, budget={"wall_clock_seconds": 3600})
    await harness.wait_for(run, lambda s: bool(s.pending))
    await harness.time_skip(2 * 3600)
    from stratagem.domain.run_types import AnswerInput

    await run.answer(AnswerInput(step_id="wait", answer="yes", by="x"))
    status = await harness.wait_for(run, lambda s: any(p.kind is DecisionKind.budget for p in s.pending))
    assert "wall-clock budget is used up" in status.pending[0].prompt
    await run.budget(BudgetInput(by="x", wall_clock_seconds=5 * 3600))
    assert (await run.result()).outputs == {"later": "late"}


@pytest.mark.workflow
async def test_a_used_up_budget_holds_a_human_step_too(harness):
    model = harness.script("big.yaml", {"executor": {"draft": {"text": "draft", **usage(700, 103)}}})
    plan = {
        "goal": "g",
        "steps": [
            llm("draft"),
            {
                "id": "ok",
                "title": "ok?",
                "kind": "human",
                "instructions": "Is the draft fine?",
                "depends_on": ["draft"],
            },
        ],
    }
    run = await harness.start(plan, auto_approve=True, executor=model, budget={"tokens": 500})
    status = await harness.wait_for(run, lambda s: bool(s.pending))
    assert [p.kind for p in status.pending] == [DecisionKind.budget] and status.phase is Phase.running
    ledger = await run.ledger()
    assert not any(e.kind is EventKind.step_awaiting_answer for e in ledger.events)  # nobody was asked yet
    await run.budget(BudgetInput(by="bob", tokens=5000))
    status = await harness.wait_for(run, lambda s: any(p.kind is DecisionKind.human_answer for p in s.pending))
    assert status.pending[0].prompt == "Is the draft fine?"
