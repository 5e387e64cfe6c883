"""Escalation that reaches someone (issue #38 item 6): a review or an answer left past
escalate_after goes to the escalate_to group, whose members may then decide it (and not before),
are told, and a second deadline rejects or stops. Real workflows on the time-skipping server."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from support.plans import awaiting, step
from support.webhooks import Receiver

from stratagem.cli import render
from stratagem.common.errors import DecisionRefusedError
from stratagem.console import AuthMode, IdentityConfig, create_app
from stratagem.domain.ledger import EventKind, StepStatus
from stratagem.domain.run_types import (
    AnswerInput,
    ApproveInput,
    DecisionKind,
    EscalationTimeoutAction,
    Phase,
    RejectInput,
    RepairAction,
    RepairInput,
)

pytestmark = pytest.mark.workflow

GROUPS = {"finance": ["dana"], "finance-leads": ["erin", "farid"]}
ESCALATION: dict[str, Any] = {
    "approvers": ["bob", "dana"],
    "approver_groups": GROUPS,
    "escalate_after_seconds": 3600,
    "escalate_to": "finance-leads",
}
PAY = {
    "goal": "pay acme",
    "steps": [
        step("check", "record", label="checked"),
        {**step("pay", "record", ["check"], label="paid"), "requires_approval": True, "approvers": ["finance"]},
    ],
}


async def refused(coro: Any) -> str:
    with pytest.raises(DecisionRefusedError) as info:
        await coro
    return str(info.value)


def asked(status: Any) -> bool:
    return [(p.kind, p.step_id) for p in status.pending] == [(DecisionKind.human_answer, "payee")]


def escalated(status: Any) -> bool:
    return any(p.escalated_to == "finance-leads" for p in status.pending)


async def test_a_plan_left_past_escalate_after_may_be_approved_by_the_group_and_not_before(harness):
    run = await harness.start(PAY, **ESCALATION)
    await harness.wait_for(run, awaiting)
    # Before the deadline erin is nobody here: refused, and nothing ran.
    why = await refused(run.approve(ApproveInput(by="erin", revision=1)))
    assert "erin is not on this run's approver list (bob, dana)" in why
    await harness.time_skip(1800)
    assert not escalated(await run.status())
    assert "not on this run's approver list" in await refused(run.approve(ApproveInput(by="erin", revision=1)))
    assert harness.calls() == []

    await harness.time_skip(1900)
    status = await harness.wait_for(run, escalated)
    assert status.pending[0].escalated and status.phase is Phase.awaiting_approval
    ledger = await run.ledger()
    [event] = [e for e in ledger.events if e.kind is EventKind.decision_escalated]
    assert event.data == {"kind": "plan_approval", "group": "finance-leads", "people": ["erin", "farid"]}
    assert "escalated to finance-leads (erin, farid), who may now decide" in event.message
    # Someone outside both lists is still refused; erin now decides.
    assert "mallory is not on" in await refused(run.approve(ApproveInput(by="mallory", revision=1)))
    await run.approve(ApproveInput(by="erin", revision=1))
    await harness.wait_for(run, lambda s: any(p.step_id == "pay" for p in s.pending))
    # The step's own escalation clock starts when it is asked; dana (its approver) approves it.
    await run.approve(ApproveInput(by="dana", step_id="pay"))
    assert (await run.result()).status is Phase.succeeded
    ledger = await run.ledger()
    assert [(d.by, d.step_id) for d in ledger.decisions] == [("erin", None), ("dana", "pay")]


async def test_a_gated_step_escalates_on_top_of_its_own_approvers(harness):
    run = await harness.start(PAY, **ESCALATION)
    await harness.wait_for(run, awaiting)
    await run.approve(ApproveInput(by="bob", revision=1))
    await harness.wait_for(run, lambda s: any(p.step_id == "pay" for p in s.pending))
    # The attack: a finance lead approves the payment before it was escalated to them.
    why = await refused(run.approve(ApproveInput(by="erin", step_id="pay")))
    assert "erin is not on this run's approver list" in why
    assert [c["label"] for c in harness.calls()] == ["checked"]

    await harness.time_skip(3700)
    status = await harness.wait_for(run, escalated)
    assert [p.step_id for p in status.pending] == ["pay"]
    # `status` and the console's run page say where it went.
    with render.console.capture() as shown:
        render.status_view(status, await run.ledger(), None)
    assert "escalated to finance-leads: its members may decide this too" in shown.get()
    identity = IdentityConfig(mode=AuthMode.local, secret=b"s" * 32, local_user="farid")
    app = create_app(harness.client, identity, store=harness.store)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://console.test") as http:
        page = await http.get(f"/runs/{run.id}")
    assert "escalated to finance-leads: its members may decide this too" in page.text
    await run.approve(ApproveInput(by="farid", step_id="pay", comment="dana is away"))
    assert (await run.result()).status is Phase.succeeded
    assert [c["label"] for c in harness.calls()] == ["checked", "paid"]
    ledger = await run.ledger()
    [event] = [e for e in ledger.events if e.kind is EventKind.decision_escalated]
    assert (event.step_id, event.data["kind"]) == ("pay", "step_approval")


async def test_a_plan_still_undecided_past_the_escalation_timeout_is_rejected(harness):
    run = await harness.start(PAY, **ESCALATION, escalation_timeout_seconds=600)
    result = await run.result()  # the server skips both deadlines
    assert result.status is Phase.rejected
    assert "within 600 s of its escalation to finance-leads: rejected" in (result.reason or "")
    ledger = await run.ledger()
    kinds = [e.kind for e in ledger.events]
    assert kinds.index(EventKind.decision_escalated) < kinds.index(EventKind.escalation_expired)
    [expired] = [e for e in ledger.events if e.kind is EventKind.escalation_expired]
    assert expired.data == {"kind": "plan_approval", "group": "finance-leads", "then": "reject"}
    assert expired.actor == "escalation"
    assert harness.calls() == [] and ledger.decisions == []


async def test_a_gated_step_undecided_past_the_escalation_timeout_can_stop_the_run(harness):
    options = {**ESCALATION, "escalation_timeout_seconds": 600, "on_escalation_timeout": EscalationTimeoutAction.stop}
    run = await harness.start(PAY, **options)
    await harness.wait_for(run, awaiting)
    await run.approve(ApproveInput(by="bob", revision=1))
    with pytest.raises(Exception) as info:
        await run.result()
    assert "no decision on step 'pay' within 600 s of its escalation to finance-leads" in str(info.value.cause)
    ledger = await run.ledger()
    assert ledger.steps["pay"].status is StepStatus.skipped
    assert [c["label"] for c in harness.calls()] == ["checked"]
    [expired] = [e for e in ledger.events if e.kind is EventKind.escalation_expired]
    assert (expired.step_id, expired.data["then"]) == ("pay", "stop")


async def test_a_gated_step_undecided_past_the_escalation_timeout_is_rejected_and_sent_back(harness):
    """Rejected at the second deadline as a person's rejection would be: from level 9 the step is
    sent back (item 3), so the run waits for a repair instead of ending, and nothing is paid."""
    run = await harness.start(PAY, **ESCALATION, escalation_timeout_seconds=600)
    await harness.wait_for(run, awaiting)
    await run.approve(ApproveInput(by="bob", revision=1))
    await harness.wait_for(run, lambda s: any(p.kind is DecisionKind.step_approval for p in s.pending))
    await harness.time_skip(3700)
    await harness.wait_for(run, escalated)
    await harness.time_skip(700)
    status = await harness.wait_for(run, lambda s: any(p.kind is DecisionKind.repair for p in s.pending))
    assert status.phase is Phase.awaiting_repair and "rejected by escalation" in status.pending[0].prompt
    assert [c["label"] for c in harness.calls()] == ["checked"]
    ledger = await run.ledger()
    assert [(d.by, d.step_id, d.action.value) for d in ledger.decisions][-1] == ("escalation", "pay", "reject")
    await run.repair(RepairInput(by="bob", action=RepairAction.stop, reason="not this week"))
    assert (await harness.wait_for(run, lambda s: s.phase.finished)).phase is Phase.failed
    assert [c["label"] for c in harness.calls()] == ["checked"]


QUESTION = {
    "goal": "pay who the finance lead names",
    "steps": [
        {"id": "payee", "title": "Who is paid?", "kind": "human", "instructions": "Name the payee."},
        step("pay", "record", ["payee"], label="pay ${payee}"),
    ],
}


async def test_a_question_escalates_and_its_group_may_answer(harness):
    run = await harness.start(QUESTION, **ESCALATION)
    await harness.wait_for(run, awaiting)
    await run.approve(ApproveInput(by="bob", revision=1))
    await harness.wait_for(run, asked)
    why = await refused(run.answer(AnswerInput(step_id="payee", answer="erin's friend", by="erin")))
    assert "erin is not on this run's approver list" in why
    await harness.time_skip(3700)
    await harness.wait_for(run, escalated)
    await run.answer(AnswerInput(step_id="payee", answer="acme", by="erin"))
    assert (await run.result()).status is Phase.succeeded
    assert [c["label"] for c in harness.calls()] == ["pay acme"]
    ledger = await run.ledger()
    [event] = [e for e in ledger.events if e.kind is EventKind.decision_escalated]
    assert (event.step_id, event.data["kind"]) == ("payee", "human_answer")


async def test_a_question_unanswered_past_the_escalation_timeout_is_rejected(harness):
    run = await harness.start(QUESTION, **ESCALATION, escalation_timeout_seconds=600)
    await harness.wait_for(run, awaiting)
    await run.approve(ApproveInput(by="bob", revision=1))
    await harness.wait_for(run, asked)
    await harness.time_skip(3700 + 700)
    status = await harness.wait_for(run, lambda s: s.phase is Phase.awaiting_repair)
    ledger = await run.ledger()
    assert ledger.steps["payee"].status is StepStatus.failed
    assert "within 600 s of its escalation to finance-leads: rejected" in (ledger.steps["payee"].error or "")
    assert [p.kind for p in status.pending] == [DecisionKind.repair]
    assert status.pending[0].ask_again == ["payee"]
    assert harness.calls() == []
    # A repair asks the question again, on a fresh clock: not escalated, and answered by bob.
    await run.repair(RepairInput(by="bob", action=RepairAction.ask_again, step_id="payee"))
    status = await harness.wait_for(run, asked)
    assert status.pending[0].escalated_to is None
    assert "not on this run's approver list" in await refused(
        run.answer(AnswerInput(step_id="payee", answer="mallory", by="erin"))
    )
    await run.answer(AnswerInput(step_id="payee", answer="acme", by="bob"))
    assert (await run.result()).status is Phase.succeeded
    assert [c["label"] for c in harness.calls()] == ["pay acme"]


async def test_an_escalation_is_notified_to_the_channels_naming_the_group_and_its_people(harness, monkeypatch):
    hook = Receiver()
    try:
        monkeypatch.setenv("STRATAGEM_NOTIFY_SLACK_URL", hook.url + "/slack")
        monkeypatch.setenv("STRATAGEM_NOTIFY_WEBHOOK_URL", hook.url + "/hook")
        run = await harness.start(PAY, **ESCALATION)
        await harness.wait_for(run, awaiting)
        await until(harness, hook, 2)
        await harness.time_skip(3700)
        await until(harness, hook, 4)
        hooks = [r["body"] for r in hook.received if r["path"] == "/hook"]
        slack = [r["body"] for r in hook.received if r["path"] == "/slack"]
        assert "escalated_to" not in hooks[0] and "people" not in hooks[0]
        assert (hooks[1]["escalated_to"], hooks[1]["people"]) == ("finance-leads", ["erin", "farid"])
        assert hooks[1]["kind"] == "plan_approval"
        assert "escalated to finance-leads (erin, farid), who may now decide" in slack[1]["text"]
        assert "escalated" not in slack[0]["text"]
        await run.reject(RejectInput(by="erin", reason="not this vendor"))
        assert (await run.result()).status is Phase.rejected
    finally:
        hook.close()


async def until(harness: Any, hook: Receiver, count: int) -> None:
    for _ in range(200):
        if len(hook.received) >= count:
            return
        await harness.time_skip(0.1)
    raise AssertionError(f"only {len(hook.received)} notifications arrived: {hook.received}")
