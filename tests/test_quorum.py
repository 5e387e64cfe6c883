"""Quorum and four eyes (issue #38, item 5), on the time-skipping server: a gated payment that
needs two different people is paid only at the second, once; the same person twice (by update,
by signal, in another spelling, or under another's name) counts once; four eyes keeps the run's
starter and a revision's author from approving. The fixture tools' own log (calls.jsonl, written
when the tool runs) proves what was paid.
"""

from __future__ import annotations

import pytest
from support.signing import send_signed

from stratagem.client import decision_signer
from stratagem.common.errors import DecisionRefusedError
from stratagem.domain.ledger import EventKind
from stratagem.domain.plan import Author, AuthorKind, PlanDraft
from stratagem.domain.run_types import (
    ApproveInput,
    DecisionKind,
    Phase,
    RejectInput,
    RepairAction,
    RepairInput,
    ReviseInput,
    RunInput,
    RunOptions,
)

pytestmark = pytest.mark.workflow

PAY = {
    "goal": "pay the supplier",
    "steps": [
        {"id": "pay", "title": "Pay the supplier", "tool": "pay", "args": {"amount": 1200, "to": "acme"}, "quorum": 2}
    ],
}
TEAM = ["dana", "lee", "kim"]


async def _at_the_payment(harness, approvers=TEAM, plan=PAY):
    run = await harness.start(plan, approvers=approvers)
    await harness.wait_for(run, lambda s: bool(s.pending))
    await run.approve(ApproveInput(by="dana", revision=1))
    status = await harness.wait_for(run, lambda s: [p.step_id for p in s.pending] == ["pay"])
    return run, status.pending[0]


def _paid(harness) -> list[dict]:
    """Each payment made: to whom, how much."""
    return [{"to": c["to"], "amount": c["amount"]} for c in harness.calls() if c.get("tool") == "pay"]


async def test_a_payment_that_needs_two_people_is_paid_at_the_second_once(harness):
    run, waiting = await _at_the_payment(harness)
    assert (waiting.quorum, waiting.approved_by, waiting.may_approve) == (2, [], TEAM)
    outcome = await run.approve(ApproveInput(by="dana", step_id="pay"))
    assert outcome.message == "approved by dana (1 of 2), waiting for one more of lee, kim"
    status = await run.status()
    [still] = status.pending
    assert (still.step_id, still.approved_by, still.may_approve) == ("pay", ["dana"], ["lee", "kim"])
    assert _paid(harness) == []
    with pytest.raises(DecisionRefusedError) as again:
        await run.approve(ApproveInput(by="dana", step_id="pay"))
    assert str(again.value).endswith("dana approved already: 1 of 2, waiting for one more of lee, kim")
    assert _paid(harness) == []
    await run.approve(ApproveInput(by="lee", step_id="pay"))
    assert (await run.result()).status is Phase.succeeded
    assert _paid(harness) == [{"to": "acme", "amount": 1200}]
    ledger = await run.ledger()
    counted = [e for e in ledger.events if e.kind is EventKind.approval_counted]
    assert [e.message for e in counted] == [
        "approved by dana (1 of 2), waiting for one more of lee, kim",
        "approved by dana, lee (2 of 2)",
    ]
    assert [(d.by, d.step_id, d.signed_by) for d in ledger.decisions if d.step_id == "pay"] == [
        ("dana", "pay", "dana"),
        ("lee", "pay", "lee"),
    ]


async def test_one_person_under_two_spellings_counts_once(harness):
    """Attack: nobody's list limits who approves, and `Dana` has a key of their own: still dana."""
    run, _ = await _at_the_payment(harness, approvers=None)
    await run.approve(ApproveInput(by="dana", step_id="pay"))
    for spelling in ("Dana", "DANA"):
        with pytest.raises(DecisionRefusedError, match=r"approved already: 1 of 2, waiting for one more from anyone"):
            await run.approve(ApproveInput(by=spelling, step_id="pay"))
    assert _paid(harness) == []
    assert (await run.status()).pending[0].approved_by == ["dana"]


async def test_a_duplicate_approval_sent_as_a_signal_is_recorded_as_ignored(harness):
    run, _ = await _at_the_payment(harness)
    await run.approve(ApproveInput(by="dana", step_id="pay"))
    await send_signed(run, "approve_signal", ApproveInput(by="dana", step_id="pay"))
    ledger = await run.ledger()
    for _ in range(100):
        ignored = [e for e in ledger.events if e.kind is EventKind.signal_ignored]
        if ignored:
            break
        await harness.time_skip(0.1)
        ledger = await run.ledger()
    assert [e.message for e in ignored] == ["dana approved already: 1 of 2, waiting for one more of lee, kim"]
    assert (await run.status()).pending[0].approved_by == ["dana"]
    assert _paid(harness) == []


async def test_a_forged_by_under_another_signer_is_not_a_second_person(harness):
    """Attack: dana signs an approval that says it is by lee. The worker verifies the signer, so
    it is refused, and lee has not approved."""
    run, _ = await _at_the_payment(harness)
    await run.approve(ApproveInput(by="dana", step_id="pay"))
    forged = decision_signer("dana").sign(
        run.id, "approve", ApproveInput(by="lee", step_id="pay"), await run.execution()
    )
    with pytest.raises(DecisionRefusedError, match="says it is by 'lee' but is signed by 'dana'"):
        await run.approve(forged)
    assert (await run.status()).pending[0].approved_by == ["dana"]
    assert _paid(harness) == []


async def test_a_rejection_by_any_one_person_stops_the_payment(harness):
    run, _ = await _at_the_payment(harness)
    await run.approve(ApproveInput(by="dana", step_id="pay"))
    await run.reject(RejectInput(by="kim", step_id="pay", reason="wrong supplier"))
    await harness.wait_for(run, lambda s: not any(p.kind is DecisionKind.step_approval for p in s.pending))
    assert _paid(harness) == []


async def test_the_plan_needs_the_run_quorum(harness):
    run = await harness.start(PAY | {"steps": [PAY["steps"][0] | {"quorum": None}]}, approvers=TEAM, quorum=2)
    status = await harness.wait_for(run, lambda s: bool(s.pending))
    assert (status.pending[0].kind, status.pending[0].quorum) == (DecisionKind.plan_approval, 2)
    outcome = await run.approve(ApproveInput(by="lee", revision=1))
    assert outcome.phase is Phase.awaiting_approval
    assert outcome.message == "approved by lee (1 of 2), waiting for one more of dana, kim"
    with pytest.raises(DecisionRefusedError, match="lee approved already"):
        await run.approve(ApproveInput(by="lee", revision=1))
    outcome = await run.approve(ApproveInput(by="kim", revision=1))
    assert outcome.phase is Phase.running


async def test_four_eyes_refuses_the_starter_and_the_author_and_takes_another(harness):
    draft = PlanDraft.model_validate(PAY | {"steps": [PAY["steps"][0] | {"quorum": None, "four_eyes": True}]})
    run = await harness.start_input(
        RunInput(
            plan=draft,
            author=Author(kind=AuthorKind.human, name="carol"),
            started_by="bob",
            options=RunOptions(four_eyes=True),
        )
    )
    status = await harness.wait_for(run, lambda s: bool(s.pending))
    assert status.pending[0].barred == {"bob": "started the run", "carol": "wrote this revision"}
    with pytest.raises(DecisionRefusedError) as starter:
        await run.approve(ApproveInput(by="bob", revision=1))
    assert str(starter.value).endswith("four eyes: bob started the run, so another person must approve revision 1")
    with pytest.raises(DecisionRefusedError, match="four eyes: carol wrote this revision"):
        await run.approve(ApproveInput(by="carol", revision=1))
    await run.approve(ApproveInput(by="dana", revision=1))
    # dana now rewrites the payment: she wrote the step, so she may not approve it; bob still may not.
    edited = PlanDraft.model_validate(PAY | {"steps": [PAY["steps"][0] | {"quorum": None, "four_eyes": True}]})
    edited.steps[0].args["amount"] = 900
    await harness.wait_for(run, lambda s: [p.step_id for p in s.pending] == ["pay"])
    await run.revise(ReviseInput(by="dana", plan=edited, reason="lower"))
    await harness.wait_for(run, lambda s: any(p.kind is DecisionKind.plan_approval for p in s.pending))
    await run.approve(ApproveInput(by="lee", revision=2))
    status = await harness.wait_for(run, lambda s: [p.step_id for p in s.pending] == ["pay"])
    assert status.pending[0].barred == {"bob": "started the run", "dana": "wrote this step"}
    for who, why in (("bob", "started the run"), ("dana", "wrote this step")):
        with pytest.raises(DecisionRefusedError, match=f"four eyes: {who} {why}, so another person must approve"):
            await run.approve(ApproveInput(by=who, step_id="pay"))
    assert _paid(harness) == []
    await run.approve(ApproveInput(by="lee", step_id="pay"))
    assert (await run.result()).status is Phase.succeeded
    assert _paid(harness) == [{"to": "acme", "amount": 900}]


async def test_a_retry_with_new_arguments_is_not_one_persons_approval_of_a_plan_that_needs_two(harness):
    """Attack: a retry with new arguments used to approve its revision as the person retrying.
    Under a plan quorum the revision is reviewed: nothing runs on one person's word."""
    plan = {"goal": "send", "steps": [{"id": "send", "title": "Send", "tool": "fails_once", "args": {"label": "x"}}]}
    run = await harness.start(plan, approvers=TEAM, quorum=2)
    await harness.wait_for(run, lambda s: bool(s.pending))
    await run.approve(ApproveInput(by="dana", revision=1))
    await run.approve(ApproveInput(by="lee", revision=1))
    await harness.wait_for(run, lambda s: any(p.kind is DecisionKind.repair for p in s.pending))
    await run.repair(RepairInput(by="dana", action=RepairAction.retry, step_id="send", args={"label": "y"}))
    status = await harness.wait_for(run, lambda s: any(p.kind is DecisionKind.plan_approval for p in s.pending))
    assert (status.phase, status.revision, status.pending[0].quorum) == (Phase.awaiting_approval, 2, 2)
    assert [c["label"] for c in harness.calls()] == ["x"]
    await run.approve(ApproveInput(by="dana", revision=2))
    await run.approve(ApproveInput(by="kim", revision=2))
    assert (await run.result()).status is Phase.succeeded
    assert [c["label"] for c in harness.calls()] == ["x", "y"]


async def test_a_revision_nobody_could_approve_under_four_eyes_is_refused_before_it_is_made(harness):
    """A retry with arguments, or a revise, is a revision its sender writes; under four eyes they
    may not approve it, nor may the starter. With a quorum of two among dana and lee, started by
    ops, dana's retry would leave only lee: a review nobody could finish, the run stuck for ever.
    Refused in one line, nothing made; the step waits for its repair, and a plain retry still works."""
    plan = {"goal": "send", "steps": [{"id": "send", "title": "Send", "tool": "fails_once", "args": {"label": "x"}}]}
    draft = PlanDraft.model_validate(plan)
    options = RunOptions(approvers=["dana", "lee"], quorum=2, four_eyes=True)
    run = await harness.start_input(
        RunInput(plan=draft, author=Author(kind=AuthorKind.human, name="ops"), started_by="ops", options=options)
    )
    await harness.wait_for(run, lambda s: bool(s.pending))
    await run.approve(ApproveInput(by="dana", revision=1))
    await run.approve(ApproveInput(by="lee", revision=1))
    await harness.wait_for(run, lambda s: any(p.kind is DecisionKind.repair for p in s.pending))
    with pytest.raises(DecisionRefusedError, match="only lee could approve it where 2 must"):
        await run.repair(RepairInput(by="dana", action=RepairAction.retry, step_id="send", args={"label": "y"}))
    edited = {**plan, "steps": [{**plan["steps"][0], "args": {"label": "z"}}]}
    with pytest.raises(DecisionRefusedError, match="only dana could approve it where 2 must"):
        await run.revise(ReviseInput(by="lee", plan=PlanDraft.model_validate(edited)))
    status = await run.status()
    assert (status.phase, status.revision) == (Phase.awaiting_repair, 1)
    await run.repair(RepairInput(by="dana", action=RepairAction.retry, step_id="send"))
    assert (await run.result()).status is Phase.succeeded
    assert [c["label"] for c in harness.calls()] == ["x", "x"]
