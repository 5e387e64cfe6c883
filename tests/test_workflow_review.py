"""The review gate: nothing runs before approval; approve, reject, revise, stale decisions, signals, timeouts."""

from __future__ import annotations

import asyncio

import pytest
from support.plans import GREETING, SIDE_EFFECT, awaiting, step
from support.signing import send_signed
from temporalio.api.enums.v1 import EventType

from stratagem.common.errors import DecisionRefusedError
from stratagem.domain.ledger import DecisionAction, EventKind, StepStatus
from stratagem.domain.plan import AuthorKind, PlanDraft
from stratagem.domain.run_types import ApproveInput, Phase, RejectInput, ReviewTimeoutAction, ReviseInput

pytestmark = pytest.mark.workflow


async def refused(coro) -> str:
    with pytest.raises(DecisionRefusedError) as info:
        await coro
    return str(info.value)


async def update_events(run) -> int:
    count = 0
    async for event in run.handle.fetch_history_events():
        if event.event_type in (
            EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED,
            EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED,
        ):
            count += 1
    return count


async def test_no_step_runs_before_approval(harness):
    run = await harness.start(SIDE_EFFECT)
    await harness.wait_for(run, awaiting)
    # Give a misbehaving workflow every chance to run steps early.
    await asyncio.sleep(1)
    assert harness.calls() == []
    status = await run.status()
    assert status.steps.pending == 2 and status.steps.running == 0
    assert [p.kind.value for p in status.pending] == ["plan_approval"]

    await run.approve(ApproveInput(by="bob", revision=1, comment="looks right"))
    result = await run.result()
    assert result.status is Phase.succeeded
    assert [c["label"] for c in harness.calls()] == ["one", "two"]

    ledger = await run.ledger()
    [decision] = ledger.decisions
    assert (decision.action, decision.by, decision.revision, decision.comment) == (
        DecisionAction.approve,
        "bob",
        1,
        "looks right",
    )
    assert ledger.auto_approved is False
    kinds = [e.kind for e in ledger.events]
    assert kinds.index(EventKind.plan_approved) < kinds.index(EventKind.step_started)


async def test_references_resolve_from_ancestors(harness):
    run = await harness.start(GREETING, auto_approve=True)
    result = await run.result()
    assert result.outputs == {"note": "sent: Hello, Ada! to ada@example.com"}
    ledger = await run.ledger()
    assert ledger.steps["fetch_profile"].output["tags"] == ["new", "vip"]
    assert ledger.auto_approved is True
    assert ledger.decisions[0].via == "auto"


async def test_reject_ends_the_run(harness):
    run = await harness.start(SIDE_EFFECT)
    await harness.wait_for(run, awaiting)
    outcome = await run.reject(RejectInput(by="carol", reason="wrong vendor"))
    assert outcome.phase is Phase.rejected
    result = await run.result()
    assert result.status is Phase.rejected
    assert result.reason == "rejected by carol: wrong vendor"
    assert harness.calls() == []
    ledger = await run.ledger()
    assert {r.status for r in ledger.steps.values()} == {StepStatus.skipped}
    assert ledger.decisions[-1].action is DecisionAction.reject


async def test_revise_then_approve_runs_the_revised_plan(harness):
    run = await harness.start(SIDE_EFFECT)
    await harness.wait_for(run, awaiting)
    edited = PlanDraft.model_validate(
        {
            "goal": "write something else",
            "steps": [step("first", "record", label="uno"), step("third", "record", ["first"], label="tres")],
        }
    )
    outcome = await run.revise(ReviseInput(by="dave", plan=edited, reason="use Spanish"))
    assert outcome.revision == 2 and outcome.phase is Phase.awaiting_approval

    # Approving the old revision is refused: the reviewer has not seen revision 2.
    message = await refused(run.approve(ApproveInput(by="bob", revision=1)))
    assert "revision 1 is stale: the current plan is revision 2" in message

    await run.approve(ApproveInput(by="bob", revision=2))
    result = await run.result()
    assert result.status is Phase.succeeded and result.revision == 2
    assert [c["label"] for c in harness.calls()] == ["uno", "tres"]
    assert {c["revision"] for c in harness.calls()} == {2}

    ledger = await run.ledger()
    assert [p.revision for p in ledger.revisions] == [1, 2]
    assert ledger.revisions[1].author.kind is AuthorKind.human and ledger.revisions[1].author.name == "dave"
    assert ledger.revisions[1].reason == "use Spanish"
    assert ledger.steps["second"].status is StepStatus.skipped  # dropped by the revision, never run
    assert [d.action for d in ledger.decisions] == [DecisionAction.revise, DecisionAction.approve]


async def test_refused_decisions_leave_no_trace_in_history(harness):
    run = await harness.start(SIDE_EFFECT)
    await harness.wait_for(run, awaiting)
    assert "there is no revision 7: the current plan is revision 1" in await refused(
        run.approve(ApproveInput(by="bob", revision=7))
    )
    assert "step 'first' is not waiting for approval" in await refused(
        run.approve(ApproveInput(by="bob", step_id="first"))
    )
    assert await update_events(run) == 0
    ledger = await run.ledger()
    assert ledger.decisions == []

    await run.approve(ApproveInput(by="bob", revision=1))
    await run.result()
    # Once finished, decisions are refused too.
    assert "has ended (completed); it takes no decisions" in await refused(run.approve(ApproveInput(by="bob")))


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        ([step("a", "record", label="x"), step("a", "record", label="y")], "duplicate step id 'a'"),
        ([step("a", "recrod", label="x")], "step 'a' uses unknown tool 'recrod' (did you mean 'record'?)"),
        ([step("a", "add", a="one", b=2)], "argument 'a' of tool 'add' is invalid"),
        ([step("a", "record", ["ghost"], label="x")], "step 'a' depends on missing step 'ghost'"),
        (
            [
                step("a", "record", ["c"], label="x"),
                step("b", "record", ["a"], label="x"),
                step("c", "record", ["b"], label="x"),
            ],
            "dependency cycle: a -> c -> b -> a",
        ),
        (
            [step("a", "record", label="x"), step("b", "record", label="${a}")],
            "step 'b' references ${a}, but 'a' is not among its dependencies",
        ),
    ],
    ids=["duplicate", "unknown-tool", "bad-args", "missing-dependency", "cycle", "non-ancestor-reference"],
)
async def test_each_kind_of_invalid_plan_is_refused(harness, steps, expected):
    run = await harness.start(SIDE_EFFECT)
    await harness.wait_for(run, awaiting)
    bad = PlanDraft.model_validate({"goal": "bad", "steps": steps})
    message = await refused(run.revise(ReviseInput(by="eve", plan=bad)))
    assert expected in message
    assert await update_events(run) == 0
    plan = await run.plan()
    assert plan is not None and plan.revision == 1  # the invalid plan never became a revision


async def test_invalid_supplied_plan_fails_before_anything_runs(harness):
    bad = {"goal": "bad", "steps": [step("a", "record", ["b"], label="x"), step("b", "record", ["a"], label="x")]}
    run = await harness.start(bad, auto_approve=True)
    with pytest.raises(Exception) as info:
        await run.result()
    assert "dependency cycle: a -> b -> a" in str(info.value.cause)
    assert harness.calls() == []


async def test_decisions_arrive_as_signals_too(harness):
    run = await harness.start(SIDE_EFFECT)
    await harness.wait_for(run, awaiting)
    await send_signed(run, "approve_signal", ApproveInput(by="bob", revision=9))  # stale: ignored, recorded
    await send_signed(run, "approve_signal", ApproveInput(by="bob", revision=1))
    result = await run.result()
    assert result.status is Phase.succeeded
    ledger = await run.ledger()
    ignored = [e for e in ledger.events if e.kind is EventKind.signal_ignored]
    assert len(ignored) == 1 and "there is no revision 9" in ignored[0].message
    assert [(d.by, d.via) for d in ledger.decisions] == [("bob", "signal")]


async def test_review_timeout_fails_the_run(harness):
    run = await harness.start(SIDE_EFFECT, review_timeout_seconds=3600)
    with pytest.raises(Exception) as info:
        await run.result()  # the time-skipping server jumps over the hour
    assert "no decision on revision 1 within 3600 seconds" in str(info.value.cause)
    ledger = await run.ledger()
    assert any(e.kind is EventKind.review_timed_out for e in ledger.events)
    assert harness.calls() == []


async def test_review_timeout_can_escalate_and_keep_waiting(harness):
    run = await harness.start(SIDE_EFFECT, review_timeout_seconds=60, on_review_timeout=ReviewTimeoutAction.escalate)
    await harness.wait_for(run, awaiting)
    await harness.time_skip(120)
    await harness.wait_for(run, lambda s: bool(s.pending) and s.pending[0].escalated)
    await harness.time_skip(3600)
    status = await run.status()
    assert status.phase is Phase.awaiting_approval
    await run.approve(ApproveInput(by="boss"))
    assert (await run.result()).status is Phase.succeeded
    ledger = await run.ledger()
    assert [e.kind for e in ledger.events].count(EventKind.review_escalated) == 1


async def test_gated_step_waits_for_its_own_approval(harness):
    plan = {
        "goal": "pay a vendor",
        "steps": [
            step("check", "record", label="checked"),
            {**step("pay", "record", ["check"], label="paid"), "risk": "high"},
        ],
    }
    run = await harness.start(plan)
    await harness.wait_for(run, awaiting)
    await run.approve(ApproveInput(by="bob", revision=1))
    status = await harness.wait_for(run, lambda s: any(p.step_id == "pay" for p in s.pending))
    assert status.steps.succeeded == 1
    assert [c["label"] for c in harness.calls()] == ["checked"]
    await run.approve(ApproveInput(by="cfo", step_id="pay", comment="within budget"))
    assert (await run.result()).status is Phase.succeeded
    assert [c["label"] for c in harness.calls()] == ["checked", "paid"]
    ledger = await run.ledger()
    assert [(d.by, d.step_id) for d in ledger.decisions] == [("bob", None), ("cfo", "pay")]


async def test_rejecting_a_gated_step_sends_it_back_without_running_it(harness):
    # From level 9 the step, not the run, is rejected: with no planner it waits for a repair
    # (tests/test_rejected_steps.py has the rest; a level-8 run still ends there).
    plan = {"goal": "pay", "steps": [{**step("pay", "record", label="paid"), "requires_approval": True}]}
    run = await harness.start(plan)
    await harness.wait_for(run, awaiting)
    await run.approve(ApproveInput(by="bob"))
    await harness.wait_for(run, lambda s: any(p.step_id == "pay" for p in s.pending))
    await run.reject(RejectInput(by="cfo", reason="over budget", step_id="pay"))
    await harness.wait_for(run, lambda s: s.phase is Phase.awaiting_repair)
    assert harness.calls() == []
    record = (await run.ledger()).steps["pay"]
    assert (record.status, record.error) == (StepStatus.failed, "rejected by cfo: over budget")


async def test_the_temporal_ui_shows_summary_and_progress(harness):
    from temporalio.api.sdk.v1 import WorkflowMetadata

    async def details() -> str:
        # The query the Temporal UI itself uses for a workflow's current details.
        metadata = await run.handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
        return metadata.current_details

    run = await harness.start(SIDE_EFFECT)
    await harness.wait_for(run, awaiting)
    description = await run.handle.describe()
    assert await description.static_summary() == "Stratagem: write something"
    shown = await details()
    assert shown.startswith("**awaiting_approval** · revision 1")
    assert "waiting on a person: approve revision 1 (2 steps)" in shown
    await run.approve(ApproveInput(by="bob", revision=1))
    await run.result()
    shown = await details()
    assert shown.startswith("**succeeded**")
    assert "| second | record | succeeded | 1 |" in shown


async def test_only_listed_approvers_decide(harness):
    gated = {**SIDE_EFFECT, "steps": [{**SIDE_EFFECT["steps"][0], "risk": "high"}, SIDE_EFFECT["steps"][1]]}
    run = await harness.start(gated, approvers=["bob", "carol"])
    status = await harness.wait_for(run, awaiting)
    message = await refused(run.approve(ApproveInput(by="mallory", revision=status.revision)))
    assert message.endswith("mallory is not on this run's approver list (bob, carol)")
    assert "not on this run's approver list" in await refused(run.reject(RejectInput(by="mallory", reason="no")))
    draft = PlanDraft.model_validate(SIDE_EFFECT)
    assert "not on this run's approver list" in await refused(run.revise(ReviseInput(by="mallory", plan=draft)))
    await send_signed(run, "approve_signal", ApproveInput(by="mallory"))
    assert await update_events(run) == 0  # refused updates leave no trace in history

    await run.approve(ApproveInput(by="bob", revision=status.revision))
    # The gated step's own approval is held to the same list.
    await harness.wait_for(run, lambda s: any(p.step_id == "first" for p in s.pending))
    assert "not on this run's approver list" in await refused(run.approve(ApproveInput(by="mallory", step_id="first")))
    await run.approve(ApproveInput(by="carol", step_id="first"))
    await run.result()
    ledger = await run.ledger()
    assert [(d.by, d.action) for d in ledger.decisions] == [
        ("bob", DecisionAction.approve),
        ("carol", DecisionAction.approve),
    ]
    ignored = [e for e in ledger.events if e.kind is EventKind.signal_ignored]
    assert len(ignored) == 1 and ignored[0].actor == "mallory"
    assert [c["label"] for c in harness.calls()] == ["one", "two"]
