"""Edit, then approve (issue #38, item 2), on the time-skipping server: an approver changes an
argument of a gated tool step and approves it in one decision; that is a new revision by them,
checked against the tool's schema and the same who-may-decide rule as the approval, and what
runs is exactly the edited call. The fixture tools' own counter (calls.jsonl, written when the
tool runs) proves what ran, and what did not.
"""

from __future__ import annotations

import asyncio

import pytest
from support.signing import send_signed

from stratagem.common.errors import DecisionRefusedError
from stratagem.domain.ledger import DecisionAction, EventKind
from stratagem.domain.plan import AuthorKind
from stratagem.domain.run_types import AnswerInput, ApproveInput, Phase

pytestmark = pytest.mark.workflow

KEY = "sk-live" + "1234567890abcdefgh"  # shaped like a provider key; split so no scanner flags the file

PAY = {
    "goal": "pay the supplier the finance lead names",
    "steps": [
        {"id": "payee", "title": "Who is paid?", "kind": "human", "instructions": "Name the payee."},
        {
            "id": "pay",
            "title": "Pay the supplier",
            "tool": "pay",  # risk high whatever the plan says: gated
            "args": {"amount": 100, "to": "${payee}"},
            "depends_on": ["payee"],
            "approvers": ["dana"],
        },
    ],
}


async def _at_the_gate(harness, plan=PAY):
    run = await harness.start(plan, approvers=["dana", "erin"])
    await harness.wait_for(run, lambda s: bool(s.pending))
    await run.approve(ApproveInput(by="erin", revision=1))
    await harness.wait_for(run, lambda s: [p.step_id for p in s.pending] == ["payee"])
    await run.answer(AnswerInput(step_id="payee", answer="acme", by="erin"))
    status = await harness.wait_for(run, lambda s: [p.step_id for p in s.pending] == [plan["steps"][1]["id"]])
    return run, status.pending[0].preview


async def test_an_edited_amount_is_a_revision_by_its_approver_and_is_what_runs(harness):
    run, shown = await _at_the_gate(harness)
    assert shown is not None and shown.args == {"amount": 100, "to": "acme"}
    outcome = await run.approve(
        ApproveInput(by="dana", step_id="pay", digest=shown.digest, args={"amount": 90}, comment="agreed discount")
    )
    assert "amount changed" in outcome.message and outcome.revision == 2
    assert (await run.result()).status is Phase.succeeded
    assert [(c["tool"], c["amount"], c["to"], c["revision"]) for c in harness.calls()] == [("pay", 90, "acme", 2)]

    ledger = await run.ledger()
    revision = ledger.revisions[-1]
    assert (revision.revision, revision.author.kind, revision.author.name) == (2, AuthorKind.human, "dana")
    # Only the changed value is written as a literal; the payee still reads the answer.
    assert revision.step("pay").args == {"amount": 90, "to": "${payee}"}
    [edit] = [d for d in ledger.decisions if d.edited]
    assert (edit.action, edit.by, edit.step_id, edit.revision) == (DecisionAction.approve, "dana", "pay", 2)
    assert {k: (e.before, e.after) for k, e in edit.edited.items()} == {"amount": (100, 90)}
    assert edit.comment == "agreed discount"
    [approved] = [e for e in ledger.events if e.kind is EventKind.step_approved]
    assert approved.actor == "dana" and approved.data["edited"] == {"amount": {"before": 100, "after": 90}}
    # The revision was approved by the same decision, covering only that step; nobody else reviewed it.
    plan_approvals = [e for e in ledger.events if e.kind is EventKind.plan_approved]
    assert [(e.revision, e.actor, e.data.get("covers")) for e in plan_approvals] == [
        (1, "erin", None),
        (2, "dana", ["pay"]),
    ]
    assert "100 -> 90" in plan_approvals[-1].message


async def test_edits_that_break_the_rules_are_refused_and_the_tool_never_runs_with_them(harness):
    """Attacks, each refused with one line and nothing applied: arguments the tool's schema refuses,
    an argument it does not take, a template, someone not allowed to decide on the step, an edit
    that names no digest or a stale one, and one sent as a signal (recorded as ignored)."""
    run, shown = await _at_the_gate(harness)
    assert shown is not None
    attempts = [
        (ApproveInput(by="dana", step_id="pay", digest=shown.digest, args={"amount": "ninety"}), "argument 'amount'"),
        (ApproveInput(by="dana", step_id="pay", digest=shown.digest, args={"amout": 90}), 'argument "amout" is not'),
        (ApproveInput(by="dana", step_id="pay", digest=shown.digest, args={"to": "${payee}s"}), "not references"),
        (ApproveInput(by="dana", step_id="pay", digest=shown.digest, args={"amount": 100}), "those step 'pay' was"),
        (ApproveInput(by="dana", step_id="pay", args={"amount": 90}), "must name the digest"),
        (ApproveInput(by="dana", step_id="pay", digest="0" * 64, args={"amount": 90}), "changed since it was shown"),
        (ApproveInput(by="erin", step_id="pay", digest=shown.digest, args={"amount": 1}), "erin may not decide"),
        (ApproveInput(by="mallory", step_id="pay", digest=shown.digest, args={"amount": 1}), "not on this run's"),
        (ApproveInput(by="dana", revision=1, digest=shown.digest, args={"amount": 1}), "no plan is waiting"),
    ]
    for decision, refusal in attempts:
        with pytest.raises(DecisionRefusedError, match=refusal) as refused:
            await run.approve(decision)
        assert "\n" not in str(refused.value)
    forged = ApproveInput(by="dana", step_id="pay", digest=shown.digest, args={"amount": -5, "to": 7})
    await send_signed(run, "approve_signal", forged)
    for _ in range(100):
        ledger = await run.ledger()
        if any(e.kind is EventKind.signal_ignored for e in ledger.events):
            break
        await asyncio.sleep(0.05)
    [ignored] = [e for e in ledger.events if e.kind is EventKind.signal_ignored]
    assert "argument 'to' of tool 'pay' is invalid" in ignored.message
    assert harness.calls() == []
    assert len(ledger.revisions) == 1 and not any(d.step_id == "pay" for d in ledger.decisions)
    # Still waiting, as it was shown: approved as it is, it pays what the plan said.
    status = await run.status()
    assert [p.preview.digest for p in status.pending if p.preview] == [shown.digest]
    await run.approve(ApproveInput(by="dana", step_id="pay", digest=shown.digest))
    assert (await run.result()).status is Phase.succeeded
    assert [(c["amount"], c["to"]) for c in harness.calls()] == [(100, "acme")]


async def test_an_edit_sent_as_a_signal_runs_and_the_ledger_masks_a_credential(harness):
    plan = {
        "goal": "note the payment",
        "steps": [
            PAY["steps"][0],
            {
                "id": "note",
                "title": "Note",
                "tool": "record",
                "args": {"label": "for ${payee}"},
                "risk": "high",
                "depends_on": ["payee"],
            },
        ],
    }
    run, shown = await _at_the_gate(harness, plan)
    assert shown is not None and shown.args == {"label": "for acme"}
    decision = ApproveInput(by="dana", step_id="note", digest=shown.digest, args={"label": f"for acme, key {KEY}"})
    await send_signed(run, "approve_signal", decision)
    assert (await run.result()).status is Phase.succeeded
    assert [c["label"] for c in harness.calls()] == [f"for acme, key {KEY}"]
    ledger = await run.ledger()
    [edit] = [d for d in ledger.decisions if d.edited]
    assert edit.via == "signal" and edit.edited["label"].before == "for acme"
    assert KEY not in ledger.model_dump_json(include={"decisions", "events"})
    assert edit.edited["label"].after == "for acme, key [redacted]"


async def test_an_llm_step_takes_no_changed_arguments(harness):
    model = harness.script("edit-llm.yaml", {"executor": {"write": [{"text": "written"}]}})
    plan = {
        "goal": "write to the payee",
        "steps": [
            PAY["steps"][0],
            {
                "id": "write",
                "title": "Write",
                "kind": "llm",
                "instructions": "Write to ${payee}.",
                "tools": ["record"],
                "depends_on": ["payee"],
                "requires_approval": True,
            },
        ],
    }
    run = await harness.start(plan, approvers=["dana"], executor=model)
    await harness.wait_for(run, lambda s: bool(s.pending))
    await run.approve(ApproveInput(by="dana", revision=1))
    await harness.wait_for(run, lambda s: [p.step_id for p in s.pending] == ["payee"])
    await run.answer(AnswerInput(step_id="payee", answer="acme", by="dana"))
    status = await harness.wait_for(run, lambda s: [p.step_id for p in s.pending] == ["write"])
    shown = status.pending[0].preview
    assert shown is not None
    with pytest.raises(DecisionRefusedError, match="is an llm step: an approval changes a tool step's arguments"):
        await run.approve(ApproveInput(by="dana", step_id="write", digest=shown.digest, args={"label": "x"}))
    assert len((await run.ledger()).revisions) == 1
    await run.approve(ApproveInput(by="dana", step_id="write", digest=shown.digest))
    assert (await run.result()).status is Phase.succeeded


async def test_an_edit_while_other_steps_run_and_wait_lets_them_finish_once_and_runs_the_edit(harness):
    """The edited step waits in the execution of the revision before; that one winds up (a running
    step finishes, and is not run again; a question waiting is asked again under the new revision)
    and the run goes on with the edit."""
    plan = {
        "goal": "pay, while other work goes on",
        "steps": [
            *PAY["steps"],
            {"id": "slow", "title": "slow", "tool": "slow", "args": {"label": "busy", "seconds": 2}},
            {"id": "terms", "title": "Terms?", "kind": "human", "instructions": "Payment terms?"},
        ],
    }
    run = await harness.start(plan, approvers=["dana"])
    await harness.wait_for(run, lambda s: bool(s.pending))
    await run.approve(ApproveInput(by="dana", revision=1))
    await harness.wait_for(run, lambda s: "payee" in [p.step_id for p in s.pending])
    await run.answer(AnswerInput(step_id="payee", answer="acme", by="dana"))
    status = await harness.wait_for(run, lambda s: "pay" in [p.step_id for p in s.pending])
    assert status.steps.running >= 1  # slow still runs (and terms waits for its answer)
    [shown] = [p.preview for p in status.pending if p.step_id == "pay"]
    assert shown is not None
    await run.approve(ApproveInput(by="dana", step_id="pay", digest=shown.digest, args={"amount": 75}))
    status = await harness.wait_for(run, lambda s: "terms" in [p.step_id for p in s.pending] and s.revision == 2, 60)
    await run.answer(AnswerInput(step_id="terms", answer="30 days", by="dana"))
    assert (await run.result()).status is Phase.succeeded
    calls = harness.calls()
    assert [c["tool"] for c in calls].count("slow") == 1
    assert [(c["amount"], c["revision"]) for c in calls if c["tool"] == "pay"] == [(75, 2)]


async def test_an_edit_cannot_stand_in_for_a_second_person_or_for_someone_else(harness):
    """An edit is a revision its approver writes and approves in one decision. Where a step needs
    two people (quorum) or four eyes, that would let one person both change and release the
    payment: refused, nothing counted, nothing paid, no revision; the step still waits for two."""
    plan = {**PAY, "steps": [PAY["steps"][0], {**PAY["steps"][1], "approvers": ["dana", "erin"], "quorum": 2}]}
    run, shown = await _at_the_gate(harness, plan)
    with pytest.raises(DecisionRefusedError, match="needs more than one person or four eyes"):
        await run.approve(ApproveInput(by="dana", step_id="pay", digest=shown.digest, args={"amount": 1}))
    status = await run.status()
    [waiting] = status.pending
    assert (waiting.step_id, waiting.approved_by, status.revision) == ("pay", [], 1)
    # The two approvals it asks for, unedited, release exactly what was shown.
    await run.approve(ApproveInput(by="dana", step_id="pay", digest=shown.digest))
    assert harness.calls() == []
    await run.approve(ApproveInput(by="erin", step_id="pay", digest=shown.digest))
    assert (await run.result()).status is Phase.succeeded
    assert [(c["amount"], c["revision"]) for c in harness.calls()] == [(100, 1)]
