"""A rejected step is sent back, not the run (issue #38, item 3), on the time-skipping server.

From level 9 a person who rejects a gated step sends that step back: it is recorded failed
("rejected by X: reason") and never runs, the steps beside it go on, and then the planner revises
with the reason or a person repairs it, as after a failure. A retry of a gated step is asked
again, and a retry's arguments merge into the step's current ones. A run below level 9 still
ends on a rejected step. The fixture tools' own log (calls.jsonl, written when a tool runs)
proves what ran.
"""

from __future__ import annotations

import pytest
from support.plans import step

from stratagem.common.errors import DecisionRefusedError
from stratagem.domain.ledger import EventKind, StepStatus
from stratagem.domain.ledger_events import ReplanRequested, StepFailed
from stratagem.domain.plan import Author, AuthorKind, PlanDraft
from stratagem.domain.run_levels import RUN_LEVEL, Change
from stratagem.domain.run_types import (
    AnswerInput,
    ApproveInput,
    DecisionKind,
    Phase,
    RejectInput,
    RepairAction,
    RepairInput,
    RunInput,
    RunOptions,
)

pytestmark = pytest.mark.workflow

PAY = {
    "goal": "pay the vendor and file the invoice",
    "steps": [
        {
            "id": "pay",
            "title": "Pay the vendor",
            "tool": "slow",
            "args": {"label": "pay acme 1200 EUR from CC-1", "seconds": 0.01},
            "risk": "high",
        },
        step("notify", "record", ["pay"], label="paid: ${pay.label}"),
        # Another branch, which does not depend on the payment: a question, then a step after it.
        {"id": "filer", "title": "Who files it?", "kind": "human", "instructions": "Name who files the invoice."},
        step("file", "record", ["filer"], label="filed by ${filer}"),
    ],
}


def _waits_for(kind: DecisionKind, step_id: str):
    return lambda s: any(p.kind is kind and p.step_id == step_id for p in s.pending)


async def _at_the_gate(harness, plan=PAY, **options):
    run = await harness.start(plan, approvers=["dana", "lee"], **options)
    await harness.wait_for(run, lambda s: s.phase is Phase.awaiting_approval)
    await run.approve(ApproveInput(by="dana", revision=1))
    status = await harness.wait_for(run, _waits_for(DecisionKind.step_approval, "pay"))
    assert _waits_for(DecisionKind.human_answer, "filer")(status)
    return run


async def test_a_rejected_step_waits_for_a_repair_while_the_other_branch_finishes_and_a_retry_merges_and_asks_again(
    harness,
):
    assert RUN_LEVEL >= Change.REJECTED_STEP_REPAIRS.level
    run = await _at_the_gate(harness)
    outcome = await run.reject(RejectInput(by="dana", step_id="pay", reason="wrong cost centre, use CC-9"))
    assert outcome.message.startswith("step 'pay' sent back: the run waits for a repair")
    # The run goes on: the other branch's question is still open, and its answer runs the step after it.
    await harness.wait_for(
        run, lambda s: s.phase is Phase.running and _waits_for(DecisionKind.human_answer, "filer")(s)
    )
    await run.answer(AnswerInput(step_id="filer", answer="lee", by="lee"))
    status = await harness.wait_for(run, lambda s: s.phase is Phase.awaiting_repair)
    assert [(p.kind, p.step_id) for p in status.pending] == [(DecisionKind.repair, "pay")]
    assert status.pending[0].prompt.startswith(
        "step 'pay' was sent back, rejected by dana: wrong cost centre, use CC-9."
    )
    ledger = await run.ledger()
    assert ledger.steps["file"].status is StepStatus.succeeded
    assert ledger.steps["notify"].status is StepStatus.pending
    pay = ledger.steps["pay"]
    assert (pay.status, pay.error) == (StepStatus.failed, "rejected by dana: wrong cost centre, use CC-9")
    assert not [e for e in ledger.events if e.kind is EventKind.step_started and e.step_id == "pay"]  # never ran
    failed = next(e for e in ledger.events if e.kind is EventKind.step_failed)
    assert failed.details_as(StepFailed).trigger == "step_rejected"
    assert [c["label"] for c in harness.calls()] == ["filed by lee"]

    # One argument changed; the others are kept. Nothing runs until it is asked again and approved.
    retried = await run.repair(
        RepairInput(by="dana", action=RepairAction.retry, step_id="pay", args={"label": "pay acme 1200 EUR from CC-9"})
    )
    assert "asked again before it runs" in retried.message
    status = await harness.wait_for(run, _waits_for(DecisionKind.step_approval, "pay"))
    preview = status.pending[0].preview
    assert preview is not None and preview.args == {"label": "pay acme 1200 EUR from CC-9", "seconds": 0.01}
    assert [c["label"] for c in harness.calls()] == ["filed by lee"]
    await run.approve(ApproveInput(by="lee", step_id="pay", digest=preview.digest))
    result = await run.result()
    assert result.status is Phase.succeeded
    assert [c["label"] for c in harness.calls()] == [
        "filed by lee",
        "pay acme 1200 EUR from CC-9",
        "paid: pay acme 1200 EUR from CC-9",
    ]
    plan = await run.plan()
    assert plan is not None and plan.step("pay").args == {"label": "pay acme 1200 EUR from CC-9", "seconds": 0.01}


async def test_a_retry_without_arguments_of_a_rejected_or_failed_gated_step_is_asked_again(harness):
    run = await _at_the_gate(harness)
    await run.answer(AnswerInput(step_id="filer", answer="lee", by="lee"))
    await run.reject(RejectInput(by="dana", step_id="pay", reason="not today"))
    await harness.wait_for(run, lambda s: s.phase is Phase.awaiting_repair)
    # Its rejection does not hold it back for ever, nor let it run: it is asked again.
    await run.repair(RepairInput(by="dana", action=RepairAction.retry, step_id="pay"))
    await harness.wait_for(run, _waits_for(DecisionKind.step_approval, "pay"))
    assert [c["label"] for c in harness.calls()] == ["filed by lee"]
    await run.reject(RejectInput(by="lee", step_id="pay", reason="still not today"))
    await harness.wait_for(run, lambda s: s.phase is Phase.awaiting_repair)

    # A gated step that was approved and failed is asked again too: its first approval let it run once.
    broken = {
        "goal": "charge",
        "steps": [{**step("charge", "broken", reason="card declined"), "risk": "high"}],
    }
    other = await _approved_then_failed(harness, broken)
    await other.repair(RepairInput(by="dana", action=RepairAction.retry, step_id="charge"))
    await harness.wait_for(other, _waits_for(DecisionKind.step_approval, "charge"))
    assert len([c for c in harness.calls() if c["tool"] == "broken"]) == 1
    await other.approve(ApproveInput(by="dana", step_id="charge"))
    await harness.wait_for(other, lambda s: s.phase is Phase.awaiting_repair)
    assert len([c for c in harness.calls() if c["tool"] == "broken"]) == 2


async def _approved_then_failed(harness, plan):
    run = await harness.start(plan, approvers=["dana"], step_max_attempts=1)
    await harness.wait_for(run, lambda s: s.phase is Phase.awaiting_approval)
    await run.approve(ApproveInput(by="dana", revision=1))
    await harness.wait_for(run, _waits_for(DecisionKind.step_approval, "charge"))
    await run.approve(ApproveInput(by="dana", step_id="charge"))
    await harness.wait_for(run, lambda s: s.phase is Phase.awaiting_repair)
    return run


async def test_stop_ends_a_run_whose_step_was_sent_back(harness):
    run = await _at_the_gate(harness)
    await run.answer(AnswerInput(step_id="filer", answer="lee", by="lee"))
    await run.reject(RejectInput(by="dana", step_id="pay", reason="vendor under review"))
    await harness.wait_for(run, lambda s: s.phase is Phase.awaiting_repair)
    await run.repair(RepairInput(by="dana", action=RepairAction.stop, reason="vendor under review"))
    status = await harness.wait_for(run, lambda s: s.phase.finished)
    assert status.phase is Phase.failed
    assert [c["label"] for c in harness.calls()] == ["filed by lee"]


async def test_a_run_that_waits_for_nobody_ends_rejected(harness):
    # on_failure: fail says a run never waits for a repair; a person's no that no replan can
    # answer then ends it, as a rejection always did.
    run = await _at_the_gate(harness, on_failure="fail")
    outcome = await run.reject(RejectInput(by="dana", step_id="pay", reason="no"))
    assert "the run ends" in outcome.message
    await run.answer(AnswerInput(step_id="filer", answer="lee", by="lee"))
    status = await harness.wait_for(run, lambda s: s.phase.finished)
    assert status.phase is Phase.rejected
    assert "step 'pay' rejected by dana: no" in (status.reason or "")


async def test_a_level_8_run_still_ends_on_a_rejected_step(harness):
    run = await harness.start_input(
        RunInput(
            plan=PlanDraft.model_validate(PAY),
            author=Author(kind=AuthorKind.human, name="alice"),
            options=RunOptions(approvers=["dana"]),
            level=Change.RESOLVED_GATES.level,
        )
    )
    await harness.wait_for(run, lambda s: s.phase is Phase.awaiting_approval)
    await run.approve(ApproveInput(by="dana", revision=1))
    await harness.wait_for(run, _waits_for(DecisionKind.step_approval, "pay"))
    outcome = await run.reject(RejectInput(by="dana", step_id="pay", reason="wrong cost centre"))
    assert outcome.message == "step rejected; the run ends once running steps finish"
    result = await run.result()
    assert result.status is Phase.rejected and result.reason == "step 'pay' rejected by dana: wrong cost centre"
    assert harness.calls() == []


async def test_retry_arguments_that_break_the_tool_schema_are_refused_and_nothing_runs(harness):
    run = await _at_the_gate(harness)
    await run.answer(AnswerInput(step_id="filer", answer="lee", by="lee"))
    await run.reject(RejectInput(by="dana", step_id="pay", reason="wrong cost centre"))
    await harness.wait_for(run, lambda s: s.phase is Phase.awaiting_repair)
    with pytest.raises(DecisionRefusedError) as refused:
        await run.repair(RepairInput(by="dana", action=RepairAction.retry, step_id="pay", args={"seconds": "soon"}))
    message = str(refused.value)
    assert "\n" not in message
    assert "the new arguments are refused: step 'pay': argument 'seconds' of tool 'slow' is invalid" in message
    status = await run.status()
    assert status.phase is Phase.awaiting_repair and status.revision == 1
    assert [c["label"] for c in harness.calls()] == ["filed by lee"]
    ledger = await run.ledger()
    assert ledger.steps["pay"].status is StepStatus.failed


async def test_only_an_approver_may_send_a_step_back(harness):
    plan = {"goal": PAY["goal"], "steps": [{**PAY["steps"][0], "approvers": ["finance"]}, *PAY["steps"][1:]]}
    run = await _at_the_gate(harness, plan, approver_groups={"finance": ["lee"]})
    with pytest.raises(DecisionRefusedError, match="mallory is not on this run.s approver list"):
        await run.reject(RejectInput(by="mallory", step_id="pay", reason="I say so"))
    # dana may approve the run, but the step names its own approvers (finance: lee).
    with pytest.raises(DecisionRefusedError, match="dana may not decide on step 'pay'"):
        await run.reject(RejectInput(by="dana", step_id="pay", reason="I say so"))
    status = await run.status()
    assert _waits_for(DecisionKind.step_approval, "pay")(status)
    ledger = await run.ledger()
    assert ledger.steps["pay"].status is StepStatus.pending and not ledger.decisions[1:]
    await run.approve(ApproveInput(by="lee", step_id="pay"))
    await run.answer(AnswerInput(step_id="filer", answer="lee", by="lee"))
    assert (await run.result()).status is Phase.succeeded


async def test_with_a_planner_a_rejected_step_is_revised_with_the_reason_and_the_run_goes_on(harness):
    first = {"goal": "pay the vendor", "steps": [PAY["steps"][0], PAY["steps"][1]]}
    fixed = {**PAY["steps"][0], "args": {"label": "pay acme 1200 EUR from CC-9", "seconds": 0.01}}
    second = {"goal": "pay the vendor", "steps": [fixed, PAY["steps"][1]], "reason": "cost centre CC-9"}
    planner = harness.script("planner.yaml", {"planner": [{"plan": first}, {"plan": second}]})
    run = await harness.start(goal="pay the vendor", planner=planner, approvers=["dana"])
    await harness.wait_for(run, lambda s: s.phase is Phase.awaiting_approval)
    await run.approve(ApproveInput(by="dana", revision=1))
    await harness.wait_for(run, _waits_for(DecisionKind.step_approval, "pay"))
    outcome = await run.reject(RejectInput(by="dana", step_id="pay", reason="wrong cost centre, use CC-9"))
    assert outcome.message == "step 'pay' sent back: the planner revises the plan with the reason"
    await harness.wait_for(run, lambda s: s.phase is Phase.awaiting_approval and s.revision == 2)
    ledger = await run.ledger()
    replan = next(e for e in ledger.events if e.kind is EventKind.replan_requested)
    assert replan.details_as(ReplanRequested).trigger == "step_rejected"
    assert replan.message == "step 'pay' rejected by dana: wrong cost centre, use CC-9"
    # What the planner was sent: the failure it answers names who rejected the step and why.
    assert "wrong cost centre, use CC-9" in await _planner_input(run, 2)
    await run.approve(ApproveInput(by="dana", revision=2))
    # The revised step is asked again, with its new arguments, before it runs.
    status = await harness.wait_for(run, _waits_for(DecisionKind.step_approval, "pay"))
    preview = status.pending[0].preview
    assert preview is not None and preview.args["label"] == "pay acme 1200 EUR from CC-9"
    assert harness.calls() == []
    await run.approve(ApproveInput(by="dana", step_id="pay", digest=preview.digest))
    result = await run.result()
    assert result.status is Phase.succeeded and result.replans == 1
    assert [c["label"] for c in harness.calls()] == ["pay acme 1200 EUR from CC-9", "paid: pay acme 1200 EUR from CC-9"]


async def _planner_input(run, nth: int) -> str:
    """The input of the run's `nth` planner activity, as the history holds it."""
    from stratagem.domain import activity_io

    history = await run.handle.fetch_history()
    inputs = [
        e.activity_task_scheduled_event_attributes.input
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
        and e.activity_task_scheduled_event_attributes.activity_type.name == activity_io.PLAN
    ]
    return b"".join(p.data for p in inputs[nth - 1].payloads).decode()
