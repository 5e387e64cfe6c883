"""Answer forms in the console (issue #38 item 4), in a real browser: a field is labelled by its
schema's title and helped by its description, a choice list preselects nothing, and a refused
answer comes back with what was typed and each problem at its field, whether the console or the
run refused it. Debian's chromium, headless, against runs on the dev server.
"""

from __future__ import annotations

from typing import Any

import pytest
from support.plans import step
from test_console_browser import CHROMIUM, free_port, serving, wait_for_decision

from stratagem.console import AuthMode, IdentityConfig, create_app
from stratagem.domain.ledger import EventKind
from stratagem.domain.run_types import Phase

pytestmark = [
    pytest.mark.system,
    pytest.mark.skipif(CHROMIUM is None, reason="no chromium on this machine: apt-get install chromium"),
]

TERMS = {
    "type": "object",
    "properties": {
        "decision": {"enum": ["approve", "reject"], "title": "Decision", "description": "Approve or reject the terms"},
        "days": {"type": "integer", "minimum": 1, "title": "Payment term (days)", "description": "Days until due"},
        "note": {"type": "string", "title": "Note"},
    },
    "required": ["decision", "days"],
}


async def browsing(harness: Any, who: str, check: Any) -> None:
    """Open the console as `who` (signed in locally) and run `check(page, base)` in chromium."""
    from playwright.async_api import async_playwright

    identity = IdentityConfig(mode=AuthMode.local, secret=b"answer-forms", local_user=who)
    app = create_app(harness.client, identity, store=harness.store)
    async with serving(app, free_port()) as base, async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            await check(await browser.new_page(), base)
        finally:
            await browser.close()


async def test_a_typed_answer_keeps_what_was_typed_and_says_at_each_field_what_is_wrong(dev_harness):
    from playwright.async_api import expect

    plan = {
        "goal": "agree the terms",
        "steps": [
            {"id": "terms", "title": "Terms", "kind": "human", "instructions": "The terms?", "answer_schema": TERMS},
            step("record", "record", ["terms"], label="${terms.decision} in ${terms.days} days"),
        ],
    }
    run = await dev_harness.start(plan, auto_approve=True)

    async def check(page: Any, base: str) -> None:
        await page.goto(f"{base}/runs/{run.id}")
        form = await wait_for_decision(page, run, "human_answer")
        decision, days, note = (form.locator(f"[name='field.{n}']") for n in ("decision", "days", "note"))
        # Labels and help from the schema; the choice starts unmade.
        await expect(form.locator("label").first).to_contain_text("Decision")
        await expect(form.locator(".help").first).to_have_text("Approve or reject the terms")
        await expect(page.get_by_label("Payment term (days)")).to_have_count(1)
        await expect(decision).to_have_value("")
        await days.fill("0")
        await note.fill("as in the contract of 2026-11-02")
        await form.locator("button[type=submit]").click()

        # Refused at the console: the page again, what was typed kept, each problem at its field.
        await expect(page).to_have_url(f"{base}/runs/{run.id}")  # a reload asks for the page, not the form
        form = page.locator(".decision[data-kind=human_answer]")
        fields = form.locator(".field")
        await expect(fields.nth(0).locator(".field-error")).to_have_text("choose one")
        await expect(fields.nth(1).locator(".field-error")).to_contain_text("less than the minimum of 1")
        await expect(fields.nth(2).locator(".field-error")).to_have_count(0)
        await expect(form.locator("[name='field.days']")).to_have_value("0")
        await expect(form.locator("[name='field.note']")).to_have_value("as in the contract of 2026-11-02")
        await expect(form.locator("[name='field.decision']")).to_have_value("")
        await expect(form.locator("[name='field.decision']")).to_have_attribute("aria-invalid", "true")
        assert (await run.status()).pending  # nothing was sent to the run

        await form.locator("[name='field.decision']").select_option("approve")
        await form.locator("[name='field.days']").fill("30")
        await form.locator("button[type=submit]").click()
        await expect(page.locator("#phase")).to_have_text("succeeded", timeout=20_000)

    await browsing(dev_harness, "dana", check)
    result = await run.result()
    assert result.status is Phase.succeeded
    assert result.outputs == {"record": "approve in 30 days"}
    ledger = await run.ledger()
    assert ledger.steps["terms"].output == {
        "decision": "approve",
        "days": 30,
        "note": "as in the contract of 2026-11-02",
    }
    assert [e.actor for e in ledger.events if e.kind is EventKind.answer_received] == ["dana"]


async def test_an_answer_the_run_refuses_comes_back_as_typed_with_the_runs_reason(dev_harness):
    """The attack: someone off the approver list answers. The run refuses it (nothing taken), and
    the page keeps their text beside the run's reason rather than dropping it."""
    from playwright.async_api import expect

    plan = {
        "goal": "name the payee",
        "steps": [{"id": "payee", "title": "Payee", "kind": "human", "instructions": "Who is paid?"}],
    }
    run = await dev_harness.start(plan, approvers=["dana"])
    await dev_harness.wait_for(run, lambda s: s.phase is Phase.awaiting_approval)
    from stratagem.domain.run_types import ApproveInput

    await run.approve(ApproveInput(by="dana", revision=1))

    async def check(page: Any, base: str) -> None:
        await page.goto(f"{base}/runs/{run.id}")
        form = await wait_for_decision(page, run, "human_answer")
        await form.locator("textarea[name=answer]").fill("mallory's account, IBAN DE00 1234")
        await form.locator("button[type=submit]").click()
        form = page.locator(".decision[data-kind=human_answer]")
        await expect(form.locator(".field-error")).to_contain_text("mallory is not on this run's approver list (dana)")
        await expect(form.locator("textarea[name=answer]")).to_have_value("mallory's account, IBAN DE00 1234")

    await browsing(dev_harness, "mallory", check)
    ledger = await run.ledger()
    assert not any(e.kind is EventKind.answer_received for e in ledger.events)
    assert [p.step_id for p in (await run.status()).pending] == ["payee"]
