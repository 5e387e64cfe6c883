"""Representative runs whose histories are kept as golden files (tests/golden/*.json).

`python tests/capture_golden.py` runs each scenario on the time-skipping server and writes
its histories; tests/test_golden_replay.py replays every file with the current workflow
code, so a change that would break runs already in flight fails CI. See RELIABILITY.md.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from conftest import Harness

from stratagem.plan import PlanDraft
from stratagem.run_types import AnswerInput, ApproveInput, BudgetInput, DecisionKind, ReviseInput
from support.plans import GREETING, SIDE_EFFECT, awaiting, diamond, step


async def approval(h: Harness) -> list:
    run = await h.start(GREETING)
    status = await h.wait_for(run, awaiting)
    await run.approve(ApproveInput(by="alice", revision=status.revision, comment="looks right"))
    await run.result()
    return [run]


async def revise(h: Harness) -> list:
    run = await h.start(SIDE_EFFECT)
    await h.wait_for(run, awaiting)
    edited = PlanDraft.model_validate({**SIDE_EFFECT, "steps": [step("first", "record", label="edited")]})
    await run.revise(ReviseInput(by="bob", plan=edited, revision=1, reason="one step is enough"))
    await run.approve(ApproveInput(by="alice", revision=2))
    await run.result()
    return [run]


async def replan(h: Harness) -> list:
    first = {
        "goal": "onboard",
        "steps": [
            step("profile", "fetch_profile", user="ada"),
            step("charge", "broken", ["profile"], reason="card declined"),
        ],
    }
    second = {"goal": "onboard", "steps": [step("invoice", "record", label="invoice")], "reason": "invoice instead"}
    planner = h.script("golden-planner.yaml", {"planner": [{"plan": first}, {"plan": second}]})
    run = await h.start(goal="onboard ada", planner=planner, auto_approve=True)
    await run.result()
    return [run]


async def parallel(h: Harness) -> list:
    run = await h.start(diamond(seconds=0.2), auto_approve=True, max_parallel=4)
    await run.result()
    return [run]


async def continue_as_new(h: Harness) -> list:
    steps = [step(f"s{i}", "record", [f"s{i - 1}"] if i else [], label=f"step {i}") for i in range(8)]
    run = await h.start({"goal": "a long chain", "steps": steps}, auto_approve=True, continue_as_new_after_events=30)
    await run.result()
    return [run]


async def archive(h: Harness) -> list:
    """A run that continues as new with enough routine events to archive them first."""
    steps = [step(f"w{i}", "record", label=f"wide {i}") for i in range(160)]
    run = await h.start(
        {"goal": "a wide plan", "steps": steps}, auto_approve=True, max_parallel=40, continue_as_new_after_events=400
    )
    await run.result()
    return [run]


async def human(h: Harness) -> list:
    plan = {
        "goal": "ask",
        "steps": [
            {"id": "ask", "title": "Ask", "kind": "human", "instructions": "Budget?"},
            step("done", "record", ["ask"], label="${ask}"),
        ],
    }
    run = await h.start(plan, auto_approve=True)
    await h.wait_for(run, lambda s: bool(s.pending))
    await run.handle.signal("answer_signal", AnswerInput(step_id="ask", answer="1200", by="finance"))
    await run.result()
    return [run]


async def budget_pause(h: Harness) -> list:
    plan = {
        "goal": "write",
        "steps": [
            {"id": "draft", "title": "Draft", "kind": "llm", "instructions": "draft it", "tools": ["record"]},
            {
                "id": "polish",
                "title": "Polish",
                "kind": "llm",
                "instructions": "polish ${draft}",
                "depends_on": ["draft"],
            },
        ],
    }
    model_calls = {
        "executor": {
            "draft": [
                {
                    "call": {"tool": "record", "args": {"label": "drafted"}},
                    "usage": {"input_tokens": 60, "output_tokens": 40},
                },
                {"text": "draft", "usage": {"input_tokens": 60, "output_tokens": 40}},
            ],
            "polish": {"text": "polished", "usage": {"input_tokens": 60, "output_tokens": 40}},
        }
    }
    model = h.script("golden-exec.yaml", model_calls)
    run = await h.start(plan, auto_approve=True, executor=model, budget={"model_calls": 2})
    await h.wait_for(run, lambda s: any(p.kind is DecisionKind.budget for p in s.pending))
    await run.budget(BudgetInput(by="alice", model_calls=10))
    await run.result()
    return [run]


SCENARIOS: dict[str, Callable[[Harness], Awaitable[list]]] = {
    "approval": approval,
    "revise": revise,
    "replan": replan,
    "parallel": parallel,
    "continue_as_new": continue_as_new,
    "archive": archive,
    "human": human,
    "budget_pause": budget_pause,
}
