"""Edges found in review: cancel at every phase, reused run ids, continue-as-new while people decide,
stale edits, attempt counts, and output limits."""

from __future__ import annotations

import uuid

import pytest
from conftest import payload_sizes
from support.plans import awaiting, step
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError

from stratagem.client import start_run
from stratagem.common.errors import DecisionRefusedError
from stratagem.domain.ledger import EventKind, StepStatus
from stratagem.domain.plan import Author, AuthorKind, PlanDraft
from stratagem.domain.run_types import AnswerInput, ApproveInput, Phase, ReviseInput, RunInput, RunOptions
from stratagem.io.store import is_stored, load_value


async def ends_cancelled(run) -> None:
    with pytest.raises(WorkflowFailureError):
        await run.result()
    assert (await run.handle.describe()).status == WorkflowExecutionStatus.CANCELED


@pytest.mark.system
async def test_cancel_while_planning_ends_cancelled_not_failed(dev_harness):
    good = {"goal": "g", "steps": [step("only", "record", label="x")]}
    script = dev_harness.script("p.yaml", {"planner": [{"plan": good}]})
    run = await dev_harness.start(goal="g", planner=f"slow:30:{script.removeprefix('scripted:')}")
    await dev_harness.wait_for(run, lambda s: s.phase is Phase.planning)
    await run.cancel()
    await ends_cancelled(run)
    ledger = await run.ledger()
    assert ledger.events[-1].kind is EventKind.run_cancelled
    assert not any(e.kind is EventKind.run_failed for e in ledger.events)


@pytest.mark.workflow
async def test_cancel_while_awaiting_review(harness):
    run = await harness.start({"goal": "g", "steps": [step("a", "record", label="a")]})
    await harness.wait_for(run, awaiting)
    await run.cancel()
    await ends_cancelled(run)
    ledger = await run.ledger()
    assert ledger.steps["a"].status is StepStatus.cancelled and harness.calls() == []


@pytest.mark.workflow
async def test_a_reused_run_id_gets_fresh_idempotency_keys(harness):
    plan = PlanDraft.model_validate(
        {"goal": "log", "steps": [step("log", "append_csv_row", path="log.csv", row={"event": "onboarded"})]}
    )
    run_id = f"reused-{uuid.uuid4().hex[:6]}"
    outputs = []
    for _ in range(2):
        run = await start_run(
            harness.client,
            RunInput(
                plan=plan, author=Author(kind=AuthorKind.human, name="ops"), options=RunOptions(auto_approve=True)
            ),
            task_queue=harness.task_queue,
            run_id=run_id,
            signed_at=await harness.env.get_current_time(),  # the time-skipping server's clock runs ahead
        )
        harness.runs.append(run)
        outputs.append((await run.result()).outputs["log"])
    assert [o["repeated"] for o in outputs] == [False, False]
    assert (harness.workspace / "log.csv").read_text().splitlines() == ["event", "onboarded", "onboarded"]


@pytest.mark.system
async def test_continue_as_new_never_withdraws_a_question(dev_harness):
    steps = [step(f"q{i}", "add", a=i, b=1) for i in range(4)]
    steps += [
        step("long", "slow", label="long", seconds=4),
        {"id": "ask", "title": "Ask", "kind": "human", "instructions": "Proceed?", "timeout_seconds": 3600},
    ]
    run = await dev_harness.start({"goal": "g", "steps": steps}, auto_approve=True, continue_as_new_after_events=20)
    await dev_harness.wait_for(run, lambda s: s.steps.succeeded == 4 and s.steps.running == 2)
    # The run is winding down for a continue-as-new while `long` runs; the question stays open.
    status = await run.status()
    assert [p.step_id for p in status.pending] == ["ask"]
    await run.answer(AnswerInput(step_id="ask", answer="yes", by="ops"))
    result = await run.result()
    assert result.outputs["ask"] == "yes"
    ledger = await run.ledger()
    assert ledger.steps["ask"].output == "yes"
    assert [e.kind for e in ledger.events if e.step_id == "ask"].count(EventKind.step_awaiting_answer) == 1
    assert any(e.kind is EventKind.continued_as_new for e in ledger.events)


@pytest.mark.system
async def test_a_question_carried_by_continue_as_new_can_be_answered_later(dev_harness):
    # On the dev server: this polls the status while the run continues as new, and the
    # time-skipping test server can lose a query that races a continue-as-new, leaving its
    # clock locked for every later test of the session.
    steps = [step(f"q{i}", "add", a=i, b=1) for i in range(6)]
    steps.append({"id": "ask", "title": "Ask", "kind": "human", "instructions": "Proceed?"})
    run = await dev_harness.start(
        {"goal": "g", "steps": steps}, auto_approve=True, continue_as_new_after_events=20, max_parallel=1
    )
    status = await dev_harness.wait_for(run, lambda s: s.continued >= 1 and s.steps.succeeded == 6)
    assert [p.step_id for p in status.pending] == ["ask"]
    await run.answer(AnswerInput(step_id="ask", answer="later", by="ops"))
    assert (await run.result()).outputs["ask"] == "later"
    ledger = await run.ledger()
    assert [e.kind for e in ledger.events if e.step_id == "ask"].count(EventKind.step_awaiting_answer) == 1


@pytest.mark.workflow
async def test_an_edit_of_a_stale_revision_is_refused(harness):
    run = await harness.start({"goal": "g", "steps": [step("a", "record", label="a")]})
    await harness.wait_for(run, awaiting)
    first = PlanDraft.model_validate({"goal": "g", "steps": [step("a", "record", label="by A")]})
    second = PlanDraft.model_validate({"goal": "g", "steps": [step("a", "record", label="by B")]})
    await run.revise(ReviseInput(by="A", plan=first, revision=1))
    with pytest.raises(DecisionRefusedError, match="revision 1 is stale: the current plan is revision 2"):
        await run.revise(ReviseInput(by="B", plan=second, revision=1))
    assert (await run.plan()).steps[0].args["label"] == "by A"


@pytest.mark.workflow
async def test_replan_approved_by_policy_is_not_recorded_as_auto_approve(harness):
    failing = {"goal": "g", "steps": [step("charge", "broken", reason="declined")]}
    fixed = {"goal": "g", "steps": [step("invoice", "record", label="invoice")]}
    planner = harness.script("p.yaml", {"planner": [{"plan": fixed}]})
    run = await harness.start(failing, planner=planner, replan_requires_approval=False)
    await harness.wait_for(run, awaiting)
    await run.approve(ApproveInput(by="bob", revision=1))
    assert (await run.result()).status is Phase.succeeded
    ledger = await run.ledger()
    assert [(d.by, d.via) for d in ledger.decisions] == [("bob", "update"), ("policy", "policy")]
    assert ledger.auto_approved is False


@pytest.mark.workflow
async def test_attempts_are_counted_exactly(harness):
    plan = {
        "goal": "g",
        "steps": [step("closed", "refuse_itself"), step("wobbly", "flaky", label="w", failures=5)],
    }
    run = await harness.start(plan, auto_approve=True, step_max_attempts=2)
    with pytest.raises(WorkflowFailureError):
        await run.result()
    ledger = await run.ledger()
    assert (ledger.steps["closed"].attempts, ledger.steps["closed"].error) == (1, "account closed")
    wobbly = ledger.steps["wobbly"]
    assert wobbly.attempts == 2 and wobbly.status is StepStatus.failed
    assert wobbly.error == "RuntimeError: transient trouble on attempt 2"


@pytest.mark.workflow
async def test_large_outputs_live_in_the_store_and_still_feed_later_steps(harness):
    plan = {
        "goal": "g",
        "steps": [
            step("huge", "big_output", kib=300),
            step("small", "big_output", kib=1),
            step("whole", "record", ["huge"], label="${huge}"),
            step("inside", "record", ["huge", "small"], label="head ${huge} and ${small}"),
        ],
    }
    run = await harness.start(plan, auto_approve=True)
    await run.result()
    ledger = await run.ledger()
    stored = ledger.steps["huge"].output
    assert is_stored(stored) and stored["bytes"] == 300 * 1024 + 2 and stored["preview"] == "x" * 300
    assert ledger.steps["small"].output == "x" * 1024  # small outputs stay inline
    assert load_value(harness.store, stored) == "x" * 300 * 1024
    labels = {c["step"]: c["label"] for c in harness.calls()}
    assert labels["whole"] == "x" * 300 * 1024  # a whole-value reference gets the stored value
    assert labels["inside"] == f"head {'x' * 300 * 1024} and {'x' * 1024}"  # resolved in the activity
    assert max(payload_sizes(await run.handle.fetch_history())) < 64 * 1024


@pytest.mark.system
async def test_a_hanging_tool_times_out_each_attempt_and_fails_its_step(dev_harness):
    plan = {
        "goal": "g",
        "steps": [{**step("stuck", "slow", label="stuck", seconds=60), "timeout_seconds": 1.5, "max_attempts": 2}],
    }
    run = await dev_harness.start(plan, auto_approve=True)
    with pytest.raises(WorkflowFailureError) as info:
        await run.result()
    assert "step 'stuck' failed: timed out: an attempt took longer than its time limit" in str(info.value.cause)
    record = (await run.ledger()).steps["stuck"]
    assert record.status is StepStatus.failed and record.attempts == 2
    assert [c for c in dev_harness.calls() if c["tool"] == "slow"] == []  # no attempt ever finished


@pytest.mark.workflow
async def test_a_decision_for_an_ended_or_unknown_run_says_which(harness):
    from stratagem.client import get_run

    run = await harness.start(
        {"goal": "g", "steps": [{"id": "a", "title": "a", "tool": "add", "args": {"a": 1, "b": 2}}]}, auto_approve=True
    )
    await run.result()
    with pytest.raises(DecisionRefusedError, match=r"has ended \(completed\); it takes no decisions"):
        await run.approve(ApproveInput(by="x"))
    with pytest.raises(DecisionRefusedError, match="there is no run no-such-run"):
        await get_run(harness.client, "no-such-run").approve(ApproveInput(by="x"))
