"""Traces of real runs: the span tree, model and tool spans, the replan's link, and replay safety.

conftest installs Temporal's replay-safe tracer provider for the whole session and keeps the
spans in memory (tests/support/spans.py); these tests read back the trace of each run.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from opentelemetry.trace import StatusCode
from support import FIXTURE_TOOLS
from support.plans import step
from support.spans import CAPTURE, Trace
from temporalio.worker import Replayer

from stratagem.client import execution_histories
from stratagem.domain.run_types import ApproveInput, Phase
from stratagem.domain.usage import Price
from stratagem.temporal.plugin import StratagemPlugin
from stratagem.tools import ToolRegistry
from stratagem.worker import build_worker
from stratagem.workflows import StratagemRun


def awaiting(status) -> bool:
    return status.phase is Phase.awaiting_approval


def tree(trace: Trace) -> str:
    """The trace as indented names, for failure messages."""
    lines: list[str] = []

    def walk(span, depth):
        lines.append("  " * depth + span.name)
        for child in sorted(trace.children(span), key=lambda s: s.start_time or 0):
            walk(child, depth + 1)

    walk(trace.check_tree(), 0)
    return "\n".join(lines)


@pytest.mark.workflow
async def test_span_tree_of_a_run_with_a_replan(harness):
    first = {
        "goal": "onboard",
        "steps": [
            step("profile", "fetch_profile", user="ada"),
            step("charge", "broken", ["profile"], reason="card declined"),
        ],
        "reason": "first try",
    }
    second = {
        "goal": "onboard",
        "steps": [step("invoice", "record", label="invoice instead")],
        "reason": "invoice instead",
    }
    planner = harness.script("planner.yaml", {"planner": [{"plan": first}, {"plan": second}]})
    price = Price(input_per_mtok=2.0, output_per_mtok=8.0)
    run = await harness.start(goal="onboard ada", planner=planner, prices={planner: price})
    await harness.wait_for(run, awaiting)
    await run.approve(ApproveInput(by="bob", revision=1))
    await harness.wait_for(run, lambda s: awaiting(s) and s.revision == 2)
    await run.approve(ApproveInput(by="bob", revision=2))
    assert (await run.result()).status is Phase.succeeded

    trace = CAPTURE.trace_of(run.id)
    shape = tree(trace)
    root = trace.check_tree()
    assert root.name == f"run {run.id}", shape
    assert root.attributes["stratagem.phase"] == "succeeded" and root.attributes["stratagem.replans"] == 1

    def under(name: str, parent) -> object:
        span = trace.one(name)
        assert trace.parent_of(span) is parent, f"{name} is not under {parent.name}:\n{shape}"
        return span

    plan1 = under("plan revision 1", root)
    assert plan1.attributes["stratagem.steps"] == 2 and plan1.attributes["stratagem.author"] == planner
    review1 = under("review revision 1", root)
    assert review1.attributes["stratagem.outcome"] == "running" and review1.attributes["stratagem.decided_by"] == "bob"
    # A step's span holds its attempts; a tool step's attempt holds the tool call.
    profile = under("step profile", root)
    attempt = under("step profile attempt 1", profile)
    call = under("execute_tool fetch_profile", attempt)
    assert call.attributes["gen_ai.tool.name"] == "fetch_profile"
    assert call.attributes["stratagem.idempotency_key"].endswith("/profile/r1")

    charge = under("step charge", root)
    assert charge.status.status_code is StatusCode.ERROR and "card declined" in charge.status.description
    assert charge.attributes["stratagem.step.status"] == "failed"
    # The replan links to the failure that triggered it, and holds the planner's new revision.
    replan = under("replan 1", root)
    assert [link.context.span_id for link in replan.links] == [charge.context.span_id]
    plan2 = under("plan revision 2", replan)
    [planner_attempt] = trace.children(plan2)
    assert planner_attempt.name == "planner attempt 1"
    chats = [s for s in trace.children(planner_attempt) if s.name.startswith("chat ")]
    assert len(chats) == 1, shape
    chat = chats[0]
    attributes = chat.attributes
    assert attributes["gen_ai.operation.name"] == "chat" and attributes["gen_ai.provider.name"] == "scripted"
    assert attributes["gen_ai.usage.input_tokens"] > 0 and attributes["gen_ai.usage.output_tokens"] > 0
    expected = price.cost(attributes["gen_ai.usage.input_tokens"], attributes["gen_ai.usage.output_tokens"])
    assert attributes["stratagem.cost_usd"] == expected
    under("review revision 2", root)
    under("step invoice", root)
    # Nothing was exported twice, although the harness replayed the workflow during the test.
    assert len(trace.named("plan revision 1")) == 1


def llm_plan() -> dict:
    return {
        "goal": "welcome ada",
        "steps": [
            step("profile", "fetch_profile", user="ada"),
            {
                "id": "draft",
                "title": "Draft the welcome",
                "kind": "llm",
                "depends_on": ["profile"],
                "instructions": "Write to ${profile.name}; record it.",
                "tools": ["record"],
            },
        ],
    }


@pytest.mark.system
async def test_a_worker_restart_exports_every_span_once(dev_env, tmp_path):
    """The run waits for approval on one worker, which stops; another replays its history and
    finishes it. Spans the first worker ended are not exported again, and the spans the second
    one ends (the review, the run) keep the ids the first one gave them: one tree."""
    from conftest import Harness

    from stratagem.io.store import FileStore

    registry = ToolRegistry.from_modules([FIXTURE_TOOLS])
    workspace, store = tmp_path / "ws", FileStore(tmp_path / "store")
    harness = Harness(dev_env, workspace, f"restart-{uuid.uuid4().hex[:8]}", store)
    executor = harness.script(
        "executor.yaml",
        {
            "executor": {
                "draft": [
                    {
                        "call": {"tool": "record", "args": {"label": "welcome sent"}},
                        "usage": {"input_tokens": 120, "output_tokens": 30},
                    },
                    {"text": "Welcome aboard, Ada.", "usage": {"input_tokens": 160, "output_tokens": 12}},
                ]
            }
        },
    )

    def worker():
        return build_worker(
            dev_env.client, task_queue=harness.task_queue, registry=registry, workspace=workspace, store=store
        )

    async with worker():
        run = await harness.start(llm_plan(), executor=executor)
        await harness.wait_for(run, awaiting)
    ended_before = {s.context.span_id for s in CAPTURE.trace_of(run.id).spans}
    assert "plan revision 1" in {s.name for s in CAPTURE.trace_of(run.id).spans}

    async with worker():
        await run.approve(ApproveInput(by="bob", revision=1))
        result = await asyncio.wait_for(run.result(), timeout=60)
    assert result.outputs == {"draft": "Welcome aboard, Ada."}

    trace = CAPTURE.trace_of(run.id)
    shape = tree(trace)  # also checks: one root, unique ids, every parent present
    for name in ("plan revision 1", "review revision 1", "step profile", "step draft", f"run {run.id}"):
        trace.one(name)
    assert ended_before <= {s.context.span_id for s in trace.spans}
    # The llm step's attempt holds both model calls and, between them, the tool call.
    draft_attempt = trace.one("step draft attempt 1")
    assert trace.parent_of(draft_attempt) is trace.one("step draft")
    children = sorted(trace.children(draft_attempt), key=lambda s: s.start_time)
    assert [c.name.split(" ")[0] for c in children] == ["chat", "execute_tool", "chat"], shape
    assert [c.attributes["gen_ai.usage.input_tokens"] for c in children if c.name.startswith("chat")] == [120, 160]
    assert children[1].attributes["stratagem.idempotency_key"].endswith("/draft/r1/c0")

    # Replaying the finished history emits nothing at all.
    before = len(CAPTURE.spans)
    replayer = Replayer(workflows=[StratagemRun], plugins=[StratagemPlugin(dev_env.client.data_converter)])
    for history in await execution_histories(dev_env.client, run.id):
        await replayer.replay_workflow(history)
    assert len(CAPTURE.spans) == before


@pytest.mark.workflow
async def test_a_continued_run_stays_one_trace(harness):
    plan = {
        "goal": "many",
        "steps": [step(f"s{i}", "record", [f"s{i - 1}"] if i else [], label=str(i)) for i in range(8)],
    }
    run = await harness.start(plan, auto_approve=True, continue_as_new_after_events=40)
    result = await run.result()
    assert result.status is Phase.succeeded
    trace = CAPTURE.trace_of(run.id)
    shape = tree(trace)
    continued = [s for s in trace.spans if s.name.startswith(f"run {run.id} (continued")]
    assert continued, f"the run did not continue as new:\n{shape}"
    # Each continued execution's span is the child of the one before; every step ran once.
    chain = [trace.check_tree()]
    while kids := [c for c in trace.children(chain[-1]) if c.name.startswith("run ")]:
        chain.extend(kids)
    assert len(chain) == len(continued) + 1
    assert sorted(s.name for s in trace.spans if s.name.startswith("step ") and "attempt" not in s.name) == [
        f"step s{i}" for i in range(8)
    ]
