"""Resolved arguments at every gate (issue #38, item 1), on the time-skipping server: a gated step
is asked with what it will run (references filled, credentials masked), an approval is bound to
the digest of what was shown, and one shown something else is refused as stale. The fixture
tools' own counter (calls.jsonl, written when the tool runs) proves what ran.
"""

from __future__ import annotations

import pytest
from support.plans import step
from support.webhooks import Receiver
from test_examples import Example, example_harness, read_csv

from stratagem.common.errors import DecisionRefusedError
from stratagem.domain.plan import PlanDraft
from stratagem.domain.run_levels import RUN_LEVEL
from stratagem.domain.run_types import (
    AnswerInput,
    ApproveInput,
    DecisionKind,
    Phase,
    RepairAction,
    RepairInput,
    ReviseInput,
)

pytestmark = pytest.mark.workflow

KEY = "sk-live" + "1234567890abcdefgh"  # shaped like a provider key; split so no scanner flags the file

PAY = {
    "goal": "pay who the finance lead names",
    "steps": [
        {"id": "payee", "title": "Who is paid?", "kind": "human", "instructions": "Name the payee."},
        {
            "id": "pay",
            "title": "Pay the vendor",
            "tool": "record",
            "args": {"label": "pay ${payee} 1200 EUR"},
            "depends_on": ["payee"],
            "risk": "high",
        },
    ],
}


async def _at_the_gate(harness, plan=PAY):
    run = await harness.start(plan, approvers=["dana"])
    await harness.wait_for(run, lambda s: bool(s.pending))
    await run.approve(ApproveInput(by="dana", revision=1))
    await harness.wait_for(run, lambda s: [p.step_id for p in s.pending] == ["payee"])
    await run.answer(AnswerInput(step_id="payee", answer="acme", by="dana"))
    status = await harness.wait_for(run, lambda s: [p.step_id for p in s.pending] == ["pay"])
    return run, status.pending[0]


async def test_a_gated_step_is_asked_with_its_resolved_arguments_and_runs_exactly_them(harness):
    run, waiting = await _at_the_gate(harness)
    assert RUN_LEVEL >= 8
    assert waiting.preview is not None
    assert waiting.preview.tool == "record"
    assert waiting.preview.args == {"label": "pay acme 1200 EUR"}  # not "${payee}"
    assert "record(" in waiting.preview.lines()[0] and '"pay acme 1200 EUR"' in waiting.preview.lines()[1]
    assert len(waiting.preview.digest) == 64
    await run.approve(ApproveInput(by="dana", step_id="pay", digest=waiting.preview.digest))
    assert (await run.result()).status is Phase.succeeded
    assert [c["label"] for c in harness.calls()] == ["pay acme 1200 EUR"]


async def test_an_approval_shown_other_arguments_is_refused_as_stale_and_nothing_runs(harness):
    run, waiting = await _at_the_gate(harness)
    assert waiting.preview is not None
    shown = waiting.preview.digest
    # While the approver looks, someone revises the amount.
    draft = PlanDraft.model_validate(
        PAY | {"steps": [PAY["steps"][0], PAY["steps"][1] | {"args": {"label": "pay ${payee} 9900 EUR"}}]}
    )
    await run.revise(ReviseInput(by="dana", plan=draft, reason="more"))
    await harness.wait_for(run, lambda s: any(p.kind.value == "plan_approval" for p in s.pending))
    await run.approve(ApproveInput(by="dana", revision=2))
    status = await harness.wait_for(run, lambda s: [p.step_id for p in s.pending] == ["pay"])
    now = status.pending[0].preview
    assert now is not None and now.args == {"label": "pay acme 9900 EUR"} and now.digest != shown
    with pytest.raises(DecisionRefusedError, match="changed since it was shown") as refused:
        await run.approve(ApproveInput(by="dana", step_id="pay", digest=shown))
    assert "\n" not in str(refused.value)
    assert harness.calls() == []  # nothing ran with arguments nobody was shown
    await run.approve(ApproveInput(by="dana", step_id="pay", digest=now.digest))
    assert (await run.result()).status is Phase.succeeded
    assert [c["label"] for c in harness.calls()] == ["pay acme 9900 EUR"]


async def test_credentials_are_masked_in_what_is_shown_but_bound_in_the_digest(harness):
    plan = PAY | {"steps": [PAY["steps"][0], PAY["steps"][1] | {"args": {"label": f"pay ${{payee}} key {KEY}"}}]}
    run, waiting = await _at_the_gate(harness, plan)
    assert waiting.preview is not None and waiting.preview.args is not None
    assert KEY not in waiting.preview.model_dump_json()
    assert waiting.preview.args == {"label": "pay acme key [redacted]"}
    await run.approve(ApproveInput(by="dana", step_id="pay", digest=waiting.preview.digest))
    assert (await run.result()).status is Phase.succeeded
    assert [c["label"] for c in harness.calls()] == [f"pay acme key {KEY}"]


async def test_a_notification_shows_what_the_gated_step_will_run_in_full(harness, monkeypatch):
    hook = Receiver()
    monkeypatch.setenv("STRATAGEM_NOTIFY_SLACK_URL", hook.url + "/slack")
    monkeypatch.setenv("STRATAGEM_NOTIFY_WEBHOOK_URL", hook.url + "/hook")
    memo = "for the October retainer, invoice 2026-118; " * 20  # past the 500 characters a prompt is cut to
    plan = PAY | {"steps": [PAY["steps"][0], PAY["steps"][1] | {"args": {"label": "pay ${payee} " + memo}}]}
    try:
        run, waiting = await _at_the_gate(harness, plan)
        for _ in range(200):
            if any(r["body"].get("kind") == "step_approval" for r in hook.received if r["path"] == "/hook"):
                break
            await harness.time_skip(0.1)
        [body] = [r["body"] for r in hook.received if r["path"] == "/hook" and r["body"]["kind"] == "step_approval"]
        [slack] = [
            r["body"]["text"]
            for r in hook.received
            if r["path"] == "/slack" and "waits for approval of step pay" in r["body"]["text"]
        ]
    finally:
        hook.close()
    assert waiting.preview is not None
    assert body["shows"] == waiting.preview.lines()
    assert " ".join(slack.split()).count("invoice 2026-118;") == 20  # never cut
    assert "pay acme for the October retainer" in slack


async def test_an_approval_does_not_carry_over_to_a_repaired_input(harness):
    """Attack: the payee was approved as 'acme'; the step fails, a repair asks the payee again and
    'mallory' is answered. The approval of 'pay acme' must not let 'pay mallory' run: the step is
    asked again with what it would now run (Waits.approved_as_shown, at dispatch)."""
    plan = {
        "goal": "pay who is named",
        "steps": [
            PAY["steps"][0],
            {
                "id": "pay",
                "title": "Pay",
                "tool": "fails_once",
                "args": {"label": "pay ${payee}"},
                "depends_on": ["payee"],
                "requires_approval": True,
            },
        ],
    }
    run, waiting = await _at_the_gate(harness, plan)
    assert waiting.preview is not None and waiting.preview.args == {"label": "pay acme"}
    await run.approve(ApproveInput(by="dana", step_id="pay", digest=waiting.preview.digest))
    await harness.wait_for(run, lambda s: any(p.kind is DecisionKind.repair for p in s.pending))
    assert [c["label"] for c in harness.calls()] == ["pay acme"]  # it ran once, as approved, and failed
    await run.repair(RepairInput(by="dana", action=RepairAction.ask_again, step_id="payee"))
    await harness.wait_for(run, lambda s: any(p.kind is DecisionKind.human_answer for p in s.pending))
    await run.answer(AnswerInput(step_id="payee", answer="mallory", by="dana"))
    status = await harness.wait_for(run, lambda s: [p.step_id for p in s.pending] == ["pay"])
    again = status.pending[0].preview
    assert again is not None and again.args == {"label": "pay mallory"}
    assert [c["label"] for c in harness.calls()] == ["pay acme"]  # 'pay mallory' did not run on the old approval
    with pytest.raises(DecisionRefusedError, match="changed since it was shown"):
        await run.approve(ApproveInput(by="dana", step_id="pay", digest=waiting.preview.digest))
    await run.approve(ApproveInput(by="dana", step_id="pay", digest=again.digest))
    assert (await run.result()).status is Phase.succeeded
    assert [c["label"] for c in harness.calls()] == ["pay acme", "pay mallory"]


async def test_a_reference_into_a_stored_output_is_shown_with_what_it_reads_and_bound_to_its_content(harness):
    """The workflow cannot read the store: the reference is shown as written, beside the stored
    output it reads (size, address), and the digest covers that output's sha256, so the content
    the activity fills in is the one the approver was shown the address and hash of."""
    plan = {
        "goal": "g",
        "steps": [
            step("huge", "big_output", kib=300),
            {**step("pay", "record", ["huge"], label="head ${huge}"), "requires_approval": True},
        ],
    }
    run = await harness.start(plan)
    await harness.wait_for(run, lambda s: bool(s.pending))
    await run.approve(ApproveInput(by="dana", revision=1))
    status = await harness.wait_for(run, lambda s: [p.step_id for p in s.pending] == ["pay"])
    shown = status.pending[0].preview
    assert shown is not None and shown.args == {"label": "head ${huge}"}
    assert list(shown.stored) == ["huge"] and "stored output, 307,202 bytes: store:" in shown.stored["huge"]
    assert any(line.startswith("${huge} is [stored output") for line in shown.lines())
    await run.approve(ApproveInput(by="dana", step_id="pay", digest=shown.digest))
    assert (await run.result()).status is Phase.succeeded
    assert [c["label"] for c in harness.calls() if c.get("tool") == "record"] == ["head " + "x" * 300 * 1024]


async def test_an_llm_step_is_asked_with_its_resolved_instructions_and_tools(harness):
    model = harness.script("gate-llm.yaml", {"executor": {"write": [{"text": "written"}]}})
    plan = {
        "goal": "write to the payee",
        "steps": [
            PAY["steps"][0],
            {
                "id": "write",
                "title": "Write",
                "kind": "llm",
                "instructions": "Write to ${payee} about invoice 118.",
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
    assert shown is not None and shown.tool is None and shown.args is None
    assert shown.instructions == "Write to acme about invoice 118." and shown.tools == ["record"]
    await run.approve(ApproveInput(by="dana", step_id="write", digest=shown.digest))
    assert (await run.result()).status is Phase.succeeded


async def test_the_vendor_payment_is_approved_with_the_iban_and_amount_it_pays(time_env, tmp_path):
    """The issue's first complaint: the payment's approver saw its title and `${bank_check.iban}`.
    Now the approval shows the IBAN the bank check returned, and that is the IBAN paid."""
    example = Example("vendor_onboarding")
    async with example_harness(time_env, tmp_path, example) as harness:
        run = await harness.start(example.plan(), by="ops", executor=f"scripted:{example.models}")
        await harness.wait_for(run, lambda s: bool(s.pending))
        await run.approve(ApproveInput(by="reviewer", revision=1))
        status = await harness.wait_for(run, lambda s: [p.step_id for p in s.pending] == ["first_payment"], 60)
        shown = status.pending[0].preview
        assert shown is not None and shown.tool == "schedule_payment"
        assert shown.args == {
            "vendor": "ACME Supplies GmbH",
            "amount_eur": 1200,
            "iban": "DE89370400440532013000",
            "reference": "Onboarding V-C0B7E361: first order PO-2025-1042",
        }
        assert not (harness.workspace / "payments" / "ledger.csv").exists()
        await run.approve(ApproveInput(by="approver", step_id="first_payment", digest=shown.digest))
        assert (await run.result()).status is Phase.succeeded
        [payment] = read_csv(harness.workspace / "payments" / "ledger.csv")
    assert (payment["iban"], payment["amount_eur"]) == ("DE89370400440532013000", "1200.00")
