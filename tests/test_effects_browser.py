"""An in-doubt step and a compensation in a real browser (Debian's chromium, headless, driven by
Playwright), as tests/test_console_browser.py drives the rest of the console: a person finds the
in-doubt payment in the inbox, reads the call on its card, says it happened with the bank's
answer as its output, and the run goes on without paying twice; then gives up on a trip whose
flight failed, sees the compensation panel (the undo, what stays), approves it and sees the run
end compensated, its hotel cancelled once.
"""

from __future__ import annotations

import json

import pytest
from conftest import harness_for
from test_console_browser import CHROMIUM, free_port, serving, wait_for_decision
from test_effects_runs import COMPENSATION_TOOLS, PAYMENT_TOOLS, failed_trip, in_doubt_payment, payments

from stratagem.console import AuthMode, IdentityConfig, Users, create_app
from stratagem.domain.run_types import Phase
from stratagem.tools import ToolRegistry

pytestmark = [
    pytest.mark.system,
    pytest.mark.skipif(CHROMIUM is None, reason="no chromium on this machine: apt-get install chromium"),
]


async def test_a_person_resolves_an_in_doubt_payment_and_compensates_a_trip_in_the_browser(dev_env, tmp_path):
    from playwright.async_api import async_playwright, expect

    users = Users(path=tmp_path / "users.yaml")
    users.set_password("dana", "correct horse")
    identity = IdentityConfig(mode=AuthMode.users, secret=b"browser-test", users=users)
    registry = ToolRegistry.from_modules([PAYMENT_TOOLS, COMPENSATION_TOOLS])
    async with harness_for(dev_env, tmp_path, registry) as harness:
        paying = await in_doubt_payment(harness)
        [paid] = payments(harness.workspace)
        trip = await failed_trip(harness)
        await harness.wait_for(trip, lambda s: s.phase is Phase.awaiting_repair)
        app = create_app(harness.client, identity, store=harness.store)
        async with serving(app, free_port()) as base, async_playwright() as playwright:
            browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = await browser.new_page(viewport={"width": 1280, "height": 900})
            try:
                await page.goto(base + "/")
                await page.fill("input[name=name]", "dana")
                await page.fill("input[name=password]", "correct horse")
                await page.click("button[type=submit]")
                await expect(page.locator("table.inbox")).to_contain_text("word on whether step pay's effect happened")
                await page.click(f"a[href='/runs/{paying.id}']")
                card = page.locator(".decision[data-kind=in_doubt]")
                await expect(card.locator("pre.args")).to_contain_text('pay_blind(invoice="INV-7", amount=1200)')
                await page.screenshot(path=str(tmp_path / "console-in-doubt.png"), full_page=True)
                given = {"invoice": "INV-7", "amount": 1200, "key": paid["key"]}
                await card.locator("textarea[name=output]").fill(json.dumps(given))
                await card.locator("button[name=happened][value=yes]").click()
                await expect(page.locator("#phase")).to_have_text("succeeded", timeout=20_000)

                await page.goto(f"{base}/runs/{trip.id}")
                repair = page.locator(".decision[data-kind=repair]")
                await repair.locator("input[name=comment]").fill("no seats left")
                await repair.locator("button[value=compensate]").click()
                await expect(page.locator(".done")).to_be_visible()
                review = await wait_for_decision(page, trip, "plan_approval")
                await expect(page.locator("#compensation")).to_contain_text("undo-hotel undoes hotel")
                await expect(page.locator("#cannot-undo")).to_contain_text("mail")
                await page.screenshot(path=str(tmp_path / "console-compensation.png"), full_page=True)
                await review.locator("button[value=approve]").click()
                await expect(page.locator("#phase")).to_have_text("compensated", timeout=20_000)
            finally:
                await browser.close()
        assert (await paying.result()).status is Phase.succeeded and len(payments(harness.workspace)) == 1
        assert (await trip.result()).status is Phase.compensated
        assert [c["slot"] for c in harness.calls() if c["tool"] == "unbook"] == ["hotel"]
