"""Approving many runs from the inbox in a real browser (Debian's chromium, headless Playwright):
a person signs in, narrows the inbox to what they may decide, selects every run on the page and
approves them; each run records its own decision by that person, and the page says how each went."""

from __future__ import annotations

import pytest
from support.inbox_namespace import namespace_harness
from support.plans import step
from test_console_browser import CHROMIUM, free_port, serving

from stratagem.console import AuthMode, IdentityConfig, Users, create_app
from stratagem.domain.ledger import DecisionAction
from stratagem.domain.run_types import Phase

pytestmark = [
    pytest.mark.system,
    pytest.mark.skipif(CHROMIUM is None, reason="no chromium on this machine: apt-get install chromium"),
]

PLAN = {"goal": "pay invoice", "steps": [step("pay", "record", label="paid")]}


async def test_a_person_approves_many_runs_at_once_each_with_its_own_decision(dev_env, tmp_path):
    from playwright.async_api import async_playwright, expect

    async with namespace_harness(dev_env, tmp_path) as harness:
        mine = [await harness.start(PLAN, approvers=["dana"]) for _ in range(4)]
        theirs = await harness.start(PLAN, approvers=["erin"])
        for run in [*mine, theirs]:
            await harness.wait_for(run, lambda s: s.phase is Phase.awaiting_approval)
        users = Users(path=tmp_path / "users.yaml")
        users.set_password("dana", "correct horse")
        identity = IdentityConfig(mode=AuthMode.users, secret=b"bulk-test", users=users)
        app = create_app(harness.client, identity, store=harness.store)
        async with serving(app, free_port()) as base:
            async with async_playwright() as playwright:
                browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
                page = await browser.new_page(viewport={"width": 1280, "height": 900})
                try:
                    await page.goto(base + "/login?next=/")
                    await page.fill("input[name=name]", "dana")
                    await page.fill("input[name=password]", "correct horse")
                    await page.click("button[type=submit]")
                    # Visibility lists every run a moment after it waits.
                    for _ in range(50):
                        if await page.locator("tr[data-run]").count() == 5:
                            break
                        await page.wait_for_timeout(200)
                        await page.reload()
                    await page.check("input[name=can_decide]")
                    await page.click(".filters button[type=submit]")
                    await expect(page.locator("table.inbox tbody tr")).to_have_count(4)  # not erin's
                    await page.check("#pick-all")
                    await expect(page.locator("input[name=pick]:checked")).to_have_count(4)
                    await page.fill("input[name=comment]", "month-end batch")
                    await page.click("#approve-selected")
                    outcomes = page.locator("#outcomes tr.outcome-approved")
                    await expect(outcomes).to_have_count(4)
                    await page.screenshot(path=str(tmp_path / "inbox-bulk.png"), full_page=True)
                finally:
                    await browser.close()
        for run in mine:
            assert (await run.result()).status is Phase.succeeded
            [decision] = (await run.ledger()).decisions
            assert (decision.action, decision.by, decision.comment) == (
                DecisionAction.approve,
                "dana",
                "month-end batch",
            )
            assert decision.signed_by is not None
        assert (await theirs.status()).phase is Phase.awaiting_approval
