"""Representative runs whose histories are kept as golden files (tests/golden/*.json).

`python tests/capture_golden.py` runs each scenario on the time-skipping server and writes
its histories; tests/test_golden_replay.py replays every file with the current workflow
code, so a change that would break runs already in flight fails CI. See RELIABILITY.md.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from conftest import Harness

from stratagem.domain.plan import Author, AuthorKind, PlanDraft
from stratagem.domain.process import ProcessRun, ProcessSpec
from stratagem.domain.run_types import (
    AnswerInput,
    ApproveInput,
    BudgetInput,
    DecisionKind,
    Fork,
    RejectInput,
    RepairAction,
    RepairInput,
    ReviseInput,
    RunInput,
    RunOptions,
)
from support.plans import GREETING, SIDE_EFFECT, awaiting, diamond, step
from support.signing import send_signed


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
    await send_signed(run, "answer_signal", AnswerInput(step_id="ask", answer="1200", by="finance"))
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


async def repair(h: Harness) -> list:
    """Level 4: a failed step waits for a repair; one retried with new arguments (a new revision),
    then a second failure skipped with an output given by hand."""
    plan = {
        "goal": "repair",
        "steps": [
            step("a", "fails_once", label="A"),
            step("b", "broken", ["a"], reason="down"),
            step("c", "record", ["b"], label="${b}"),
        ],
    }
    run = await h.start(plan)
    await h.wait_for(run, awaiting)
    await run.approve(ApproveInput(by="alice", revision=1))
    await h.wait_for(run, lambda s: any(p.kind is DecisionKind.repair for p in s.pending))
    await run.repair(RepairInput(by="alice", action=RepairAction.retry, step_id="a", args={"label": "A2"}))
    await h.wait_for(run, lambda s: any(p.kind is DecisionKind.repair and p.step_id == "b" for p in s.pending))
    await send_signed(
        run, "repair_signal", RepairInput(by="bob", action=RepairAction.skip, step_id="b", output="manual")
    )
    await run.result()
    return [run]


async def call_approval(h: Harness) -> list:
    """Level 4: an llm step pauses on a gated tool call twice; one call is rejected, one approved."""
    model = h.script(
        "golden-wire.yaml",
        {
            "executor": {
                "settle": [
                    {"call": {"tool": "wire_funds", "args": {"amount": 900, "to": "acme"}}},
                    {"call": {"tool": "wire_funds", "args": {"amount": 90, "to": "acme"}}},
                    {"text": "settled"},
                ]
            }
        },
    )
    plan = {
        "goal": "settle",
        "steps": [{"id": "settle", "title": "Settle", "kind": "llm", "instructions": "pay", "tools": ["wire_funds"]}],
    }
    run = await h.start(plan, executor=model)
    await h.wait_for(run, awaiting)
    await run.approve(ApproveInput(by="alice", revision=1))
    await h.wait_for(run, lambda s: any(p.call is not None and p.call.call_id == "0" for p in s.pending))
    await run.reject(RejectInput(by="dana", step_id="settle", call_id="0", reason="too much"))
    status = await h.wait_for(run, lambda s: any(p.call is not None and p.call.call_id == "1" for p in s.pending))
    [call] = [p.call for p in status.pending if p.call is not None]
    await run.approve(ApproveInput(by="dana", step_id="settle", call_id="1", digest=call.digest))
    await run.result()
    return [run]


async def partial_review(h: Harness) -> list:
    """Level 4: revised while it runs; the review asks about the added step only, and a gated step
    approved before the revision runs on that approval."""
    plan = {
        "goal": "partial",
        "steps": [
            step("long", "slow", label="L", seconds=5),
            {**step("gated", "record", label="G"), "requires_approval": True},
        ],
    }
    run = await h.start(plan, max_parallel=1)
    await h.wait_for(run, awaiting)
    await run.approve(ApproveInput(by="alice", revision=1))
    await h.wait_for(run, lambda s: any(p.kind is DecisionKind.step_approval for p in s.pending))
    await run.approve(ApproveInput(by="dana", step_id="gated"))
    grown = {**plan, "steps": [*plan["steps"], step("notify", "record", ["gated"], label="N")]}
    await run.revise(ReviseInput(by="bob", plan=PlanDraft.model_validate(grown)))
    await run.approve(ApproveInput(by="alice", revision=2))
    await run.result()
    return [run]


async def fork(h: Harness) -> list:
    """Level 4: a run forked from another carries a step's output over (level 7: read from the
    source run's own ledger by an activity)."""
    source = await h.start(SIDE_EFFECT, auto_approve=True)
    await source.result()
    edited = PlanDraft.model_validate(
        {
            **SIDE_EFFECT,
            "steps": [step("first", "record", label="one"), step("second", "record", ["first"], label="deux")],
        }
    )
    forked = await h.start_input(
        RunInput(
            plan=edited,
            author=Author(kind=AuthorKind.human, name="erin"),
            options=RunOptions(auto_approve=True),
            fork=Fork(run_id=source.id, revision=1),
        )
    )
    await forked.result()
    return [forked]


async def checked(h: Harness) -> list:
    """Level 6: an llm step sent back for unmet criteria, a final check that finds the goal not
    reached (a replan), and a step escalated to a stronger model after a failure."""
    greet = {
        "id": "greet",
        "title": "Greet",
        "kind": "llm",
        "instructions": "Greet Ada and record it with record.",
        "tools": ["record"],
        "success_criteria": ["the greeting is recorded with record"],
    }
    first = {"goal": "greet ada", "steps": [greet]}
    second = {"goal": "greet ada", "steps": [greet, step("note", "record", ["greet"], label="noted")]}
    models = h.script(
        "golden-checked.yaml",
        {
            "planner": [{"plan": first}, {"plan": second}],
            "executor": {
                "greet": [
                    {"text": "Hello Ada."},
                    {"call": {"tool": "record", "args": {"label": "greeted"}}},
                    {"text": "Hello Ada, recorded."},
                ]
            },
            "verifier": {"goal": [{"met": False, "reason": "no note"}, {"met": True, "reason": "noted"}]},
        },
    )
    run = await h.start(goal="greet ada", planner=models, executor=models, auto_approve=True, final_check=True)
    await run.result()
    cheap = h.script("golden-cheap.yaml", {"executor": {"sum": [{"fail": "too hard"}]}})
    strong = h.script("golden-strong.yaml", {"executor": {"sum": "done"}})
    summary = {"id": "sum", "title": "Sum", "kind": "llm", "instructions": "Sum up."}
    escalated = await h.start(
        {"goal": "sum", "steps": [summary]},
        auto_approve=True,
        executor=cheap,
        escalate={cheap: strong},
        step_max_attempts=1,
    )
    await escalated.result()
    return [run, escalated]


async def ask_again(h: Harness) -> list:
    """Level 7: a step that failed on a person's answer asks the question again (a repair), and
    runs with the new answer; a typed answer's fields are read by the step after it."""
    schema = {"type": "object", "properties": {"vendor": {"type": "string"}}, "required": ["vendor"]}
    plan = {
        "goal": "onboard",
        "steps": [
            {"id": "ask", "title": "Vendor?", "kind": "human", "instructions": "Name it.", "answer_schema": schema},
            step("register", "fails_once", ["ask"], label="${ask.vendor}"),
        ],
    }
    run = await h.start(plan)
    await h.wait_for(run, awaiting)
    await run.approve(ApproveInput(by="dana", revision=1))
    await h.wait_for(run, lambda s: any(p.kind is DecisionKind.human_answer for p in s.pending))
    await run.answer(AnswerInput(step_id="ask", answer={"vendor": "old name"}, by="dana"))
    await h.wait_for(run, lambda s: any(p.kind is DecisionKind.repair for p in s.pending))
    await run.repair(RepairInput(by="dana", action=RepairAction.ask_again, step_id="ask"))
    await h.wait_for(run, lambda s: any(p.kind is DecisionKind.human_answer for p in s.pending))
    await run.answer(AnswerInput(step_id="ask", answer={"vendor": "ACME"}, by="dana"))
    await run.result()
    return [run]


async def resolved_gate(h: Harness) -> list:
    """Level 8: a gated step is asked once its input is answered, with its arguments resolved, and
    approved with the digest of what was shown."""
    plan = {
        "goal": "pay who is named",
        "steps": [
            {"id": "payee", "title": "Who is paid?", "kind": "human", "instructions": "Name the payee."},
            {**step("pay", "record", ["payee"], label="pay ${payee}"), "risk": "high"},
        ],
    }
    run = await h.start(plan)
    await h.wait_for(run, awaiting)
    await run.approve(ApproveInput(by="alice", revision=1))
    await h.wait_for(run, lambda s: any(p.kind is DecisionKind.human_answer for p in s.pending))
    await run.answer(AnswerInput(step_id="payee", answer="acme", by="alice"))
    status = await h.wait_for(run, lambda s: any(p.kind is DecisionKind.step_approval for p in s.pending))
    [shown] = [p.preview for p in status.pending if p.preview is not None]
    await run.approve(ApproveInput(by="dana", step_id="pay", digest=shown.digest))
    await run.result()
    return [run]


async def repaired_gate(h: Harness) -> list:
    """Level 8: a gated step approved for one input fails; a repair asks that input again, and the
    step is asked again at dispatch with what it would now run, not run on the old approval."""
    plan = {
        "goal": "pay who is named",
        "steps": [
            {"id": "payee", "title": "Who is paid?", "kind": "human", "instructions": "Name the payee."},
            {**step("pay", "fails_once", ["payee"], label="pay ${payee}"), "requires_approval": True},
        ],
    }
    run = await h.start(plan)
    await h.wait_for(run, awaiting)
    await run.approve(ApproveInput(by="alice", revision=1))
    for answer in ("acme", "globex"):
        await h.wait_for(run, lambda s: any(p.kind is DecisionKind.human_answer for p in s.pending))
        await run.answer(AnswerInput(step_id="payee", answer=answer, by="alice"))
        status = await h.wait_for(run, lambda s: any(p.kind is DecisionKind.step_approval for p in s.pending))
        [shown] = [p.preview for p in status.pending if p.preview is not None]
        await run.approve(ApproveInput(by="dana", step_id="pay", digest=shown.digest))
        if answer == "acme":
            await h.wait_for(run, lambda s: any(p.kind is DecisionKind.repair for p in s.pending))
            await run.repair(RepairInput(by="dana", action=RepairAction.ask_again, step_id="payee"))
    await run.result()
    return [run]


async def edited_gate(h: Harness) -> list:
    """Level 9: a gated step's approver changes an argument in approving it: a revision by them,
    approved by the same decision, and the step runs with the edited value."""
    plan = {
        "goal": "pay who is named",
        "steps": [
            {"id": "payee", "title": "Who is paid?", "kind": "human", "instructions": "Name the payee."},
            {**step("pay", "record", ["payee"], label="pay ${payee}"), "risk": "high"},
        ],
    }
    run = await h.start(plan)
    await h.wait_for(run, awaiting)
    await run.approve(ApproveInput(by="alice", revision=1))
    await h.wait_for(run, lambda s: any(p.kind is DecisionKind.human_answer for p in s.pending))
    await run.answer(AnswerInput(step_id="payee", answer="acme", by="alice"))
    status = await h.wait_for(run, lambda s: any(p.kind is DecisionKind.step_approval for p in s.pending))
    [shown] = [p.preview for p in status.pending if p.preview is not None]
    await run.approve(ApproveInput(by="dana", step_id="pay", digest=shown.digest, args={"label": "pay acme 90 EUR"}))
    await run.result()
    return [run]


async def rejected_step(h: Harness) -> list:
    """Level 9: a rejected gated step is sent back while the step beside it runs; the run waits
    for a repair, a retry changes one argument (merged into the others), and the step is asked
    again before it runs."""
    plan = {
        "goal": "pay and file",
        "steps": [
            {**step("pay", "greet", name="acme", greeting="Pay"), "risk": "high"},
            step("file", "record", label="filed"),
        ],
    }
    run = await h.start(plan)
    await h.wait_for(run, awaiting)
    await run.approve(ApproveInput(by="alice", revision=1))
    await h.wait_for(run, lambda s: any(p.kind is DecisionKind.step_approval for p in s.pending))
    await run.reject(RejectInput(by="dana", step_id="pay", reason="wrong payee"))
    await h.wait_for(run, lambda s: any(p.kind is DecisionKind.repair for p in s.pending))
    await run.repair(RepairInput(by="dana", action=RepairAction.retry, step_id="pay", args={"name": "globex"}))
    await h.wait_for(run, lambda s: any(p.kind is DecisionKind.step_approval for p in s.pending))
    await run.approve(ApproveInput(by="dana", step_id="pay"))
    await run.result()
    return [run]


async def quorum(h: Harness) -> list:
    """Level 9: a plan that needs two people and a step that needs two (and four eyes): the first
    approval of each is counted and waits, a duplicate sent as a signal is recorded as ignored, the
    second approves."""
    plan = {
        "goal": "pay with two approvals",
        "steps": [{**step("pay", "record", label="pay acme"), "quorum": 2, "four_eyes": True}],
    }
    draft = PlanDraft.model_validate(plan)
    author = Author(kind=AuthorKind.human, name="alice")
    run = await h.start_input(RunInput(plan=draft, author=author, started_by="alice", options=RunOptions(quorum=2)))
    await h.wait_for(run, awaiting)
    await run.approve(ApproveInput(by="dana", revision=1))
    await run.approve(ApproveInput(by="lee", revision=1))
    await h.wait_for(run, lambda s: any(p.kind is DecisionKind.step_approval for p in s.pending))
    await run.approve(ApproveInput(by="dana", step_id="pay"))
    await send_signed(run, "approve_signal", ApproveInput(by="dana", step_id="pay"))
    await h.wait_for(run, lambda s: bool(s.pending) and s.pending[0].approved_by == ["dana"])
    await run.approve(ApproveInput(by="lee", step_id="pay"))
    await run.result()
    return [run]


async def escalation(h: Harness) -> list:
    """Level 9: a plan left past escalate_after goes to the escalate_to group, one of whom approves
    it; a gated step then left past the escalation's own deadline too is rejected, sent back, and
    the run stopped."""
    plan = {
        "goal": "pay acme",
        "steps": [
            step("check", "record", label="checked"),
            {**step("pay", "record", ["check"], label="paid"), "risk": "high"},
        ],
    }
    escalating = {"escalate_after_seconds": 600, "escalate_to": "leads", "escalation_timeout_seconds": 600}
    run = await h.start(plan, approvers=["alice"], approver_groups={"leads": ["erin"]}, **escalating)
    await h.wait_for(run, awaiting)
    await h.time_skip(700)
    await h.wait_for(run, lambda s: any(p.escalated_to for p in s.pending))
    await run.approve(ApproveInput(by="erin", revision=1))
    await h.wait_for(run, lambda s: any(p.kind is DecisionKind.step_approval for p in s.pending))
    await h.time_skip(700)
    await h.wait_for(run, lambda s: any(p.escalated_to for p in s.pending))
    await h.time_skip(700)  # the escalation's own deadline: rejected, the step is sent back
    await h.wait_for(run, lambda s: any(p.kind is DecisionKind.repair for p in s.pending))
    await run.repair(RepairInput(by="alice", action=RepairAction.stop, reason="not this week"))
    await h.wait_for(run, lambda s: s.phase.finished)
    return [run]


async def process_run(h: Harness) -> list:
    """A run of a process: its plan rendered at the start from typed inputs and the nominal time
    (an activity), recorded in the ledger and the memo, then approved by a person (no grant)."""
    spec = ProcessSpec(
        name="payout",
        inputs={"payee": {"type": "string"}, "month": {"type": "string", "default": "${nominal.previous_month}"}},
        goal="Pay ${inputs.payee} for ${inputs.month}",
        steps=[step("pay", "record", label="pay ${inputs.payee}")],
    )
    run = await h.start_input(RunInput(process=ProcessRun(spec=spec, inputs={"payee": "ada"})))
    status = await h.wait_for(run, awaiting)
    await run.approve(ApproveInput(by="alice", revision=status.revision))
    await run.result()
    return [run]


def _undone(sid: str, tool: str, depends_on: list[str], undo: dict, **args: object) -> dict:
    """A step with its own compensation (the fixture tools declare none)."""
    return {**step(sid, tool, depends_on, **args), "compensate": undo}


async def compensated_after_failure(h: Harness) -> list:
    """Level 10: a diamond whose last step fails for good (on_failure: compensate, no planner):
    the undos of its two branches run side by side, then the first step's, after a person
    approves the compensation; the run ends compensated."""
    plan = {
        "goal": "compensate",
        "steps": [
            _undone("a", "record", [], {"tool": "record", "args": {"label": "undo ${a}"}}, label="A"),
            _undone("b", "record", ["a"], {"tool": "record", "args": {"label": "undo ${b}"}}, label="B"),
            _undone("c", "record", ["a"], {"tool": "record", "args": {"label": "undo ${c}"}}, label="C"),
            step("d", "broken", ["b", "c"], reason="down"),
        ],
    }
    run = await h.start(plan, on_failure="compensate")
    await h.wait_for(run, awaiting)
    await run.approve(ApproveInput(by="alice", revision=1))
    await h.wait_for(run, lambda s: awaiting(s) and s.revision == 2)
    await run.approve(ApproveInput(by="alice", revision=2))
    await run.result()
    return [run]


async def compensation_failed(h: Harness) -> list:
    """Level 10: an auto-approved compensation whose undo fails for good waits for a repair; a
    person stops it and the run ends compensation_failed, naming the effect that remains."""
    plan = {
        "goal": "compensate",
        "steps": [
            _undone("a", "record", [], {"tool": "broken", "args": {"reason": "cannot undo ${a}"}}, label="A"),
            step("d", "broken", ["a"], reason="down"),
        ],
    }
    run = await h.start(plan, on_failure="compensate", auto_approve=True)
    await h.wait_for(run, lambda s: any(p.kind is DecisionKind.repair for p in s.pending))
    await run.repair(RepairInput(by="alice", action=RepairAction.stop, reason="call them"))
    await h.wait_for(run, lambda s: s.phase.finished)
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
    "repair": repair,
    "call_approval": call_approval,
    "partial_review": partial_review,
    "fork": fork,
    "checked": checked,
    "ask_again": ask_again,
    "resolved_gate": resolved_gate,
    "repaired_gate": repaired_gate,
    "edited_gate": edited_gate,
    "rejected_step": rejected_step,
    "quorum": quorum,
    "escalation": escalation,
    "process_run": process_run,
    "compensated_after_failure": compensated_after_failure,
    "compensation_failed": compensation_failed,
}
