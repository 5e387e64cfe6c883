"""The human side of a run: tool-declared risk, per-call approvals in llm steps, repair instead
of failure, partial re-approval, changes while running, forks and per-step approvers. Every
test runs the real workflow on the time-skipping test server."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from support.plans import awaiting, step
from temporalio.client import WorkflowFailureError

from stratagem.common.errors import DecisionRefusedError
from stratagem.domain.forks import fork_carry
from stratagem.domain.ledger import DecisionAction, EventKind, StepStatus, ToolCallStatus
from stratagem.domain.plan import Author, AuthorKind, PlanDraft
from stratagem.domain.run_types import (
    ApproveInput,
    DecisionKind,
    Fork,
    Phase,
    RejectInput,
    RepairAction,
    RepairInput,
    ReviseInput,
    RunInput,
    RunOptions,
)


async def refused(coro) -> str:
    with pytest.raises(DecisionRefusedError) as info:
        await coro
    return str(info.value)


def phase(value: str):
    return lambda status: status.phase.value == value


def pending_kind(kind: str, step_id: str | None = None):
    return lambda status: any(
        p.kind.value == kind and (step_id is None or p.step_id == step_id) for p in status.pending
    )


def llm(id: str, tools: list[str], depends_on: list[str] | None = None) -> dict[str, Any]:
    return {
        "id": id,
        "title": id,
        "kind": "llm",
        "instructions": f"do {id}",
        "tools": tools,
        "depends_on": depends_on or [],
    }


# ------------------------------------------------------------------ risk declared by the tool


@pytest.mark.workflow
async def test_a_plan_cannot_lower_a_tools_risk(harness):
    """`pay` is @tool(risk="high"); the plan says low. The step still waits for its own approval."""
    plan = {"goal": "pay acme", "steps": [{**step("pay", "pay", amount=900, to="acme"), "risk": "low"}]}
    run = await harness.start(plan)
    await harness.wait_for(run, awaiting)
    catalog = await run.catalog()
    assert catalog is not None and catalog.get("pay").floor.value == "high"
    await run.approve(ApproveInput(by="bob", revision=1))
    status = await harness.wait_for(run, pending_kind("step_approval", "pay"))
    [waiting] = status.pending
    assert "risk high" in waiting.prompt
    await asyncio.sleep(0.5)
    assert harness.calls() == []  # nothing paid before the step's approval
    await run.approve(ApproveInput(by="dana", step_id="pay"))
    result = await run.result()
    assert result.status is Phase.succeeded
    assert [c["tool"] for c in harness.calls()] == ["pay"]


@pytest.mark.workflow
async def test_a_tool_that_requires_approval_gates_its_step(harness):
    run = await harness.start({"goal": "g", "steps": [step("wire", "wire_funds", amount=5, to="x")]})
    await harness.wait_for(run, awaiting)
    await run.approve(ApproveInput(by="bob", revision=1))
    await harness.wait_for(run, pending_kind("step_approval", "wire"))
    await run.reject(RejectInput(by="dana", step_id="wire", reason="not today"))
    await harness.wait_for(run, lambda s: s.phase is Phase.awaiting_repair)  # sent back (level 9)
    assert harness.calls() == []


# ------------------------------------------------------------------ per-call approval in llm steps


def wire_script(harness, calls: list[dict[str, Any]]) -> str:
    turns = [{"call": call} for call in calls] + [{"text": "done"}]
    return harness.script("wire.yaml", {"executor": {"settle": turns}})


@pytest.mark.workflow
async def test_an_llm_steps_call_to_a_gated_tool_waits_with_its_arguments(harness):
    model = wire_script(harness, [{"tool": "wire_funds", "args": {"amount": 900, "to": "acme"}}])
    run = await harness.start({"goal": "g", "steps": [llm("settle", ["wire_funds"])]}, executor=model)
    await harness.wait_for(run, awaiting)
    await run.approve(ApproveInput(by="bob", revision=1))
    status = await harness.wait_for(run, pending_kind("tool_call_approval", "settle"))
    [waiting] = status.pending
    assert waiting.call is not None and waiting.call.tool == "wire_funds" and waiting.call.call_id == "0"
    assert '"amount": 900' in waiting.call.arguments and '"acme"' in waiting.call.arguments
    assert harness.calls() == []  # nothing ran before the decision

    # A call id that is not waiting, and a call decision without its step, are refused.
    assert "has no tool call 7 waiting" in await refused(
        run.approve(ApproveInput(by="dana", step_id="settle", call_id="7"))
    )
    assert "give --step" in await refused(run.approve(ApproveInput(by="dana", call_id="0")))
    # An approval names the arguments it approves: without their digest, or with another, it is refused.
    assert "with the digest of the arguments you saw" in await refused(
        run.approve(ApproveInput(by="dana", step_id="settle", call_id="0"))
    )
    assert "differ from the ones approved" in await refused(
        run.approve(ApproveInput(by="dana", step_id="settle", call_id="0", digest="0" * 64))
    )

    shown = waiting.call.digest
    await run.approve(ApproveInput(by="dana", step_id="settle", call_id="0", digest=shown, comment="invoice 42"))
    result = await run.result()
    assert result.outputs == {"settle": "done"}
    [call] = harness.calls()
    assert call["tool"] == "wire_funds" and call["key"].endswith("/settle/r1/c0")
    ledger = await run.ledger()
    decision = ledger.decisions[-1]
    assert (decision.by, decision.step_id, decision.call_id) == ("dana", "settle", "0")
    kinds = [e.kind for e in ledger.events]
    assert kinds.index(EventKind.call_awaiting_approval) < kinds.index(EventKind.call_approved)
    # The model calls before and after the pause are each counted once.
    assert ledger.usage.calls == 2


@pytest.mark.workflow
async def test_a_rejected_call_is_told_to_the_model_and_never_runs(harness):
    model = wire_script(
        harness,
        [
            {"tool": "wire_funds", "args": {"amount": 900, "to": "acme"}},
            {"tool": "wire_funds", "args": {"amount": 90, "to": "acme"}},
        ],
    )
    run = await harness.start({"goal": "g", "steps": [llm("settle", ["wire_funds"])]}, executor=model)
    await harness.wait_for(run, awaiting)
    await run.approve(ApproveInput(by="bob", revision=1))
    await harness.wait_for(run, pending_kind("tool_call_approval", "settle"))
    await run.reject(RejectInput(by="dana", step_id="settle", call_id="0", reason="too much"))
    # The model tries a smaller amount: a new call, asked about again.
    status = await harness.wait_for(run, lambda s: any(p.call is not None and p.call.call_id == "1" for p in s.pending))
    assert '"amount": 90' in status.pending[0].call.arguments
    await run.approve(ApproveInput(by="dana", step_id="settle", call_id="1", digest=status.pending[0].call.digest))
    assert (await run.result()).status is Phase.succeeded
    assert [(c["tool"], c["amount"]) for c in harness.calls()] == [("wire_funds", 90)]
    record = (await run.ledger()).steps["settle"]
    assert [(t.call, t.status) for t in record.tool_calls] == [(0, ToolCallStatus.refused), (1, ToolCallStatus.ok)]
    assert "dana" in record.tool_calls[0].message


@pytest.mark.workflow
async def test_auto_approve_decides_calls_too(harness):
    model = wire_script(harness, [{"tool": "wire_funds", "args": {"amount": 1, "to": "x"}}])
    run = await harness.start(
        {"goal": "g", "steps": [llm("settle", ["wire_funds"])]}, executor=model, auto_approve=True
    )
    assert (await run.result()).status is Phase.succeeded
    assert [c["tool"] for c in harness.calls()] == ["wire_funds"]
    assert (await run.ledger()).decisions[-1].via == "auto"


# ------------------------------------------------------------------ repair instead of failure

FAILS_ONCE = {
    "goal": "two steps",
    "steps": [step("a", "fails_once", label="A"), step("b", "record", ["a"], label="after ${a}")],
}


async def approved(harness, plan: dict[str, Any], **options: Any):
    run = await harness.start(plan, **options)
    await harness.wait_for(run, awaiting)
    await run.approve(ApproveInput(by="bob", revision=1))
    return run


@pytest.mark.workflow
async def test_a_failed_step_without_a_planner_waits_for_repair_and_a_retry_finishes_the_run(harness):
    run = await approved(harness, FAILS_ONCE)
    status = await harness.wait_for(run, phase("awaiting_repair"))
    [waiting] = status.pending
    assert (waiting.kind, waiting.step_id) == (DecisionKind.repair, "a")
    assert "no planner model" in waiting.prompt or "the first try fails" in waiting.prompt

    assert "step 'b' did not fail" in await refused(
        run.repair(RepairInput(by="bob", action=RepairAction.retry, step_id="b"))
    )
    await run.repair(RepairInput(by="bob", action=RepairAction.retry, step_id="a", reason="upstream is back"))
    result = await run.result()
    assert result.status is Phase.succeeded and result.outputs == {"b": "after A"}
    calls = harness.calls()
    assert [c["tool"] for c in calls] == ["fails_once", "fails_once", "record"]
    assert calls[0]["key"] == calls[1]["key"]  # the same step of the same revision: the same key
    ledger = await run.ledger()
    assert ledger.decisions[-1].action is DecisionAction.retry
    assert EventKind.repair_requested in {e.kind for e in ledger.events}


@pytest.mark.workflow
async def test_skip_supplies_the_output_by_hand(harness):
    run = await approved(harness, FAILS_ONCE)
    await harness.wait_for(run, phase("awaiting_repair"))
    await run.repair(RepairInput(by="bob", action=RepairAction.skip, step_id="a", output="by hand"))
    result = await run.result()
    assert result.outputs == {"b": "after by hand"}
    assert [c["tool"] for c in harness.calls()] == ["fails_once", "record"]
    record = (await run.ledger()).steps["a"]
    assert (record.status, record.output) == (StepStatus.succeeded, "by hand")


@pytest.mark.workflow
async def test_retry_with_new_arguments_is_a_new_revision_the_repairer_approved(harness):
    run = await approved(harness, FAILS_ONCE)
    await harness.wait_for(run, phase("awaiting_repair"))
    message = await refused(
        run.repair(RepairInput(by="bob", action=RepairAction.retry, step_id="a", args={"labl": "typo"}))
    )
    assert "the new arguments are refused" in message
    await run.repair(RepairInput(by="bob", action=RepairAction.retry, step_id="a", args={"label": "A2"}))
    result = await run.result()
    assert result.status is Phase.succeeded and result.revision == 2
    assert result.outputs == {"b": "after A2"}
    calls = harness.calls()
    assert calls[1]["label"] == "A2" and calls[1]["key"].endswith("/a/r2")
    ledger = await run.ledger()
    approval = next(e for e in ledger.events if e.kind is EventKind.plan_approved and e.revision == 2)
    assert approval.data["covers"] == ["a"]


@pytest.mark.workflow
async def test_stop_ends_a_run_waiting_for_repair(harness):
    run = await approved(harness, FAILS_ONCE)
    await harness.wait_for(run, phase("awaiting_repair"))
    await run.repair(RepairInput(by="bob", action=RepairAction.stop, reason="give up"))
    status = await harness.wait_for(run, lambda s: s.phase.finished)
    assert status.phase is Phase.failed and "stopped by bob" in (status.reason or "")


@pytest.mark.workflow
async def test_unattended_runs_fail_as_before(harness):
    run = await harness.start(FAILS_ONCE, auto_approve=True)
    with pytest.raises(WorkflowFailureError):
        await run.result()
    assert (await run.status()).phase is Phase.failed


@pytest.mark.workflow
async def test_on_failure_fail_ends_an_attended_run(harness):
    run = await approved(harness, FAILS_ONCE, on_failure="fail")
    status = await harness.wait_for(run, lambda s: s.phase.finished)
    assert status.phase is Phase.failed


@pytest.mark.workflow
async def test_a_repair_is_not_open_to_someone_off_the_approver_list(harness):
    run = await approved(harness, FAILS_ONCE, approvers=["bob"])
    await harness.wait_for(run, phase("awaiting_repair"))
    message = await refused(run.repair(RepairInput(by="mallory", action=RepairAction.skip, step_id="a", output="x")))
    assert "not on this run's approver list" in message
    assert (await run.status()).phase is Phase.awaiting_repair


# ------------------------------------------------------------------ partial re-approval


@pytest.mark.workflow
async def test_a_revision_asks_only_about_what_changed_and_keeps_step_approvals(harness):
    """`gated` is approved at its gate but waits for the one parallel slot; a revision made
    meanwhile adds a step. The review asks about that step only, and `gated` runs on the
    approval it already has."""
    plan = {
        "goal": "g",
        "steps": [
            step("long", "slow", label="L", seconds=3),
            {**step("gated", "record", label="G"), "requires_approval": True},
        ],
    }
    run = await approved(harness, plan, max_parallel=1)
    await harness.wait_for(run, pending_kind("step_approval", "gated"))
    await run.approve(ApproveInput(by="dana", step_id="gated"))
    grown = PlanDraft.model_validate(
        {**plan, "steps": [*plan["steps"], step("notify", "record", ["gated"], label="N")]}
    )
    outcome = await run.revise(ReviseInput(by="erin", plan=grown, reason="tell them"))
    assert outcome.phase is Phase.awaiting_approval
    [review] = [p for p in (await run.status()).pending if p.kind is DecisionKind.plan_approval]
    assert review.changes == {"added": ["notify"], "changed": [], "removed": []}
    assert "added notify" in review.prompt
    await harness.wait_for(run, lambda s: s.steps.succeeded == 1)
    await run.approve(ApproveInput(by="bob", revision=2))
    result = await run.result()
    assert result.status is Phase.succeeded
    ledger = await run.ledger()
    assert [e.kind for e in ledger.events].count(EventKind.step_awaiting_approval) == 1
    assert ledger.decisions[-1].covers == ["notify"]
    assert [c["label"] for c in harness.calls() if c["tool"] == "record"] == ["G", "N"]


@pytest.mark.workflow
async def test_a_gated_step_that_failed_is_asked_again_before_it_runs_again(harness):
    """Its first run may have had effects: an unchanged revision does not carry its step approval."""
    plan = {
        "goal": "g",
        "steps": [
            {**step("gated", "fails_once", label="G"), "requires_approval": True},
            step("last", "record", ["gated"], label="L"),
        ],
    }
    run = await approved(harness, plan)
    await harness.wait_for(run, pending_kind("step_approval", "gated"))
    await run.approve(ApproveInput(by="dana", step_id="gated"))
    await harness.wait_for(run, phase("awaiting_repair"))
    edited = PlanDraft.model_validate(
        {**plan, "steps": [plan["steps"][0], step("last", "record", ["gated"], label="L2")]}
    )
    await run.revise(ReviseInput(by="erin", plan=edited))
    await run.approve(ApproveInput(by="bob", revision=2))
    await harness.wait_for(run, pending_kind("step_approval", "gated"))
    assert [c["tool"] for c in harness.calls()] == ["fails_once"]  # not run again before the approval
    await run.approve(ApproveInput(by="dana", step_id="gated"))
    assert (await run.result()).status is Phase.succeeded


@pytest.mark.workflow
async def test_a_revision_that_changes_nothing_keeps_the_approval(harness):
    run = await approved(harness, FAILS_ONCE)
    await harness.wait_for(run, phase("awaiting_repair"))
    outcome = await run.revise(ReviseInput(by="erin", plan=PlanDraft.model_validate(FAILS_ONCE), reason="try again"))
    assert outcome.phase is Phase.running and "keeps the approval" in outcome.message
    assert (await run.result()).status is Phase.succeeded
    ledger = await run.ledger()
    assert EventKind.approval_carried in {e.kind for e in ledger.events}


@pytest.mark.workflow
async def test_whole_plan_approval_asks_about_every_step(harness):
    run = await approved(harness, FAILS_ONCE, whole_plan_approval=True)
    await harness.wait_for(run, phase("awaiting_repair"))
    outcome = await run.revise(ReviseInput(by="erin", plan=PlanDraft.model_validate(FAILS_ONCE)))
    assert outcome.phase is Phase.awaiting_approval
    [review] = (await run.status()).pending
    assert review.changes is None


# ------------------------------------------------------------------ changes while running


@pytest.mark.workflow
async def test_a_plan_revised_while_running_holds_new_steps_until_approved(harness):
    plan = {"goal": "g", "steps": [step("long", "slow", label="L", seconds=3)]}
    run = await approved(harness, plan)
    await harness.wait_for(run, lambda s: s.steps.running == 1)
    changed = PlanDraft.model_validate({"goal": "g", "steps": [step("long", "slow", label="other", seconds=3)]})
    assert "is running and cannot be changed" in await refused(run.revise(ReviseInput(by="erin", plan=changed)))
    grown = PlanDraft.model_validate(
        {"goal": "g", "steps": [*plan["steps"], step("notify", "record", ["long"], label="done")]}
    )
    outcome = await run.revise(ReviseInput(by="erin", plan=grown, reason="tell them"))
    assert outcome.phase is Phase.awaiting_approval
    status = await harness.wait_for(run, lambda s: s.steps.succeeded == 1)
    assert status.phase is Phase.awaiting_approval
    assert [c["tool"] for c in harness.calls()] == ["slow"]  # notify waits for the approval
    [review] = status.pending
    assert review.changes == {"added": ["notify"], "changed": [], "removed": []}
    await run.approve(ApproveInput(by="bob", revision=2))
    result = await run.result()
    assert result.status is Phase.succeeded
    assert [c["tool"] for c in harness.calls()] == ["slow", "record"]


# ------------------------------------------------------------------ forks


@pytest.mark.workflow
async def test_a_fork_runs_again_only_what_changed(harness):
    plan = {
        "goal": "g",
        "steps": [
            step("a", "record", label="A"),
            step("b", "record", ["a"], label="B from ${a}"),
            step("c", "record", label="C"),
        ],
    }
    run = await harness.start(plan, auto_approve=True)
    assert (await run.result()).status is Phase.succeeded
    source = await run.ledger()

    edited = PlanDraft.model_validate({**plan, "steps": [step("a", "record", label="A2"), *plan["steps"][1:]]})
    carry = fork_carry(source, 1, edited)
    assert set(carry.outputs) == {"c"} and carry.rerun == ["a", "b"]  # b depends on a changed step

    fork = RunInput(
        plan=edited,
        author=Author(kind=AuthorKind.human, name="erin"),
        options=RunOptions(auto_approve=True),
        fork=Fork(run_id=run.id, revision=1),  # the fork reads what it carries from the run itself
    )
    forked = await harness.start_input(fork)
    result = await forked.result()
    assert result.status is Phase.succeeded
    calls = harness.calls()[3:]
    assert [c["label"] for c in calls] == ["A2", "B from A2"]
    # What ran again is a new call: the fork's keys are its own.
    assert all(c["key"].startswith(forked.id + "/") for c in calls)
    ledger = await forked.ledger()
    assert ledger.steps["c"].output == "C" and ledger.steps["c"].status is StepStatus.succeeded
    carried = [e for e in ledger.events if e.kind is EventKind.step_carried]
    assert carried[0].data["source"] == run.id and [e.step_id for e in carried[1:]] == ["c"]


# ------------------------------------------------------------------ who may decide what


@pytest.mark.workflow
async def test_a_step_names_who_may_approve_it(harness):
    plan = {"goal": "g", "steps": [{**step("pay", "record", label="P"), "approvers": ["finance"]}]}
    run = await approved(harness, plan, approver_groups={"finance": ["dana", "lee"]})
    await harness.wait_for(run, pending_kind("step_approval", "pay"))
    message = await refused(run.approve(ApproveInput(by="bob", step_id="pay")))
    assert "bob may not decide on step 'pay'" in message and "dana, lee" in message
    await run.approve(ApproveInput(by="lee", step_id="pay"))
    assert (await run.result()).status is Phase.succeeded


@pytest.mark.system
async def test_a_paused_call_survives_a_continue_as_new(dev_harness):
    """A step beside the paused one ends, the history is long enough, and the run continues as
    new while the call waits: the new execution picks the pause up, and the call runs once.
    On the dev server, in real time: the step beside sleeps 5 s for real, and the time-skipping
    server, asked to skip around a running activity, now and then stopped answering altogether
    and took the tests after this one down with it."""
    harness = dev_harness
    model = wire_script(harness, [{"tool": "wire_funds", "args": {"amount": 3, "to": "x"}}])
    plan = {
        "goal": "g",
        "steps": [
            llm("settle", ["wire_funds"]),
            step("other", "slow", label="o", seconds=5),
            step("after", "record", ["settle", "other"], label="${settle}"),
        ],
    }
    run = await harness.start(plan, executor=model, continue_as_new_after_events=10)
    await harness.wait_for(run, awaiting)
    await run.approve(ApproveInput(by="bob", revision=1))
    before = await harness.wait_for(run, pending_kind("tool_call_approval"))
    later = await harness.wait_for(
        run, lambda s: s.continued > before.continued and s.steps.succeeded == 1 and any(p.call for p in s.pending)
    )
    [call] = [p.call for p in later.pending if p.call is not None]
    await run.approve(ApproveInput(by="dana", step_id="settle", call_id="0", digest=call.digest))
    result = await run.result()
    assert result.outputs == {"after": "done"}
    assert sorted(c["tool"] for c in harness.calls()) == ["record", "slow", "wire_funds"]


@pytest.mark.unit
def test_validation_notes_what_a_tool_changes_about_a_plan():
    from support import FIXTURE_TOOLS

    from stratagem.domain.validation import plan_notes
    from stratagem.tools import ToolRegistry

    catalog = ToolRegistry.from_modules([FIXTURE_TOOLS]).catalog()
    plan = PlanDraft.model_validate(
        {
            "goal": "g",
            "steps": [
                step("p", "pay", amount=1, to="x"),
                step("w", "wire_funds", amount=1, to="x"),
                step("r", "record", label="x"),
            ],
        }
    )
    assert plan_notes(plan, catalog) == [
        "step 'p' runs at risk high, not low: tool 'pay' is risk high",
        "step 'w' waits for approval: tool 'wire_funds' requires it",
    ]


@pytest.mark.workflow
async def test_an_output_given_by_hand_must_match_the_tools_return_type(harness):
    plan = {"goal": "g", "steps": [{**step("a", "broken", reason="down")}, step("b", "record", ["a"], label="x")]}
    run = await approved(harness, plan)
    await harness.wait_for(run, phase("awaiting_repair"))
    # `broken` returns str: anything goes; a tool with a telling return type checks the output.
    message = await refused(run.repair(RepairInput(by="bob", action=RepairAction.retry, step_id="a", output="x")))
    assert "a retry takes new arguments, not an output" in message
    await run.repair(RepairInput(by="bob", action=RepairAction.skip, step_id="a", output={"any": "thing"}))
    assert (await run.result()).status is Phase.succeeded


@pytest.mark.workflow
async def test_a_replan_that_changes_one_step_asks_only_about_that_step(harness):
    first = {
        "goal": "ship",
        "steps": [
            step("pack", "record", label="packed"),
            step("book", "broken", ["pack"], reason="carrier refuses"),
            step("notify", "record", ["book"], label="shipped"),
        ],
    }
    second = {
        **first,
        "steps": [first["steps"][0], step("book", "record", ["pack"], label="other carrier"), first["steps"][2]],
    }
    planner = harness.script("replanner.yaml", {"planner": [{"plan": first}, {"plan": second}]})
    run = await harness.start(goal="ship it", planner=planner)
    await harness.wait_for(run, awaiting)
    await run.approve(ApproveInput(by="bob", revision=1))
    status = await harness.wait_for(run, lambda s: s.phase is Phase.awaiting_approval and s.revision == 2)
    [review] = status.pending
    assert review.changes == {"added": [], "changed": ["book"], "removed": []}
    assert review.prompt.startswith("approve revision 2: changed book")
    await run.approve(ApproveInput(by="bob", revision=2))
    assert (await run.result()).status is Phase.succeeded
    assert (await run.ledger()).decisions[-1].covers == ["book"]


@pytest.mark.workflow
async def test_a_revision_still_under_review_is_not_run_by_a_repair(harness):
    """Revised while a step runs; that step then fails and is retried by a person. The revision
    nobody approved yet is reviewed before anything of it runs."""
    plan = {"goal": "g", "steps": [step("work", "slow_fail", seconds=3)]}
    run = await approved(harness, plan)
    await harness.wait_for(run, lambda s: s.steps.running == 1)
    grown = PlanDraft.model_validate({**plan, "steps": [*plan["steps"], step("extra", "record", ["work"], label="E")]})
    await run.revise(ReviseInput(by="erin", plan=grown))
    await harness.wait_for(run, phase("awaiting_repair"))
    outcome = await run.repair(RepairInput(by="bob", action=RepairAction.retry, step_id="work"))
    assert outcome.phase is Phase.awaiting_approval
    [review] = (await run.status()).pending
    assert review.changes == {"added": ["extra"], "changed": [], "removed": []}
    assert [c["tool"] for c in harness.calls()] == ["slow_fail"]
    await run.approve(ApproveInput(by="bob", revision=2))
    assert (await run.result()).status is Phase.succeeded
    assert [c["tool"] for c in harness.calls()] == ["slow_fail", "slow_fail", "record"]


@pytest.mark.workflow
async def test_a_paused_call_outlives_a_repair_of_another_step(harness):
    """A sibling fails while an llm step waits on a call: the call stays open through the repair,
    and once decided the step goes on at the same call (one wire, key c0)."""
    model = wire_script(harness, [{"tool": "wire_funds", "args": {"amount": 4, "to": "x"}}])
    plan = {"goal": "g", "steps": [llm("settle", ["wire_funds"]), step("other", "slow_fail", seconds=5)]}
    run = await approved(harness, plan, executor=model)
    await harness.wait_for(run, pending_kind("tool_call_approval"))
    status = await harness.wait_for(run, phase("awaiting_repair"))
    assert {p.kind for p in status.pending} == {DecisionKind.tool_call_approval, DecisionKind.repair}
    [call] = [p.call for p in status.pending if p.call is not None]
    await run.approve(ApproveInput(by="dana", step_id="settle", call_id="0", digest=call.digest))
    await run.repair(RepairInput(by="bob", action=RepairAction.retry, step_id="other"))
    assert (await run.result()).status is Phase.succeeded
    wires = [c for c in harness.calls() if c["tool"] == "wire_funds"]
    assert len(wires) == 1 and wires[0]["key"].endswith("/settle/r1/c0")
