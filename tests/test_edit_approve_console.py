"""Edit, then approve, in the review console (issue #38, item 2): the run page's step approval
has one field per argument, filled with what the step will run; a changed one is approved as a
revision by the person signed in, a refusal comes back at the form with what was typed, and the
API's approve takes `args` too. The console under uvicorn against runs on the dev server; the
form in Debian's chromium, driven headless by Playwright.
"""

from __future__ import annotations

import httpx
import pytest
from conftest import harness_for
from support.plans import step
from test_console_attacks import serving as serving_here
from test_console_browser import CHROMIUM, free_port, serving, wait_for_decision

from stratagem.common.signing import Signer
from stratagem.console import AuthMode, IdentityConfig, create_app
from stratagem.domain.plan import AuthorKind
from stratagem.domain.run_types import Phase

pytestmark = pytest.mark.system

PLAN = {
    "goal": "pay the supplier",
    "steps": [
        step("profile", "fetch_profile", user="acme"),
        step("pay", "pay", ["profile"], amount=100, to="${profile.name}"),  # the tool is risk high: gated
    ],
}


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium on this machine: apt-get install chromium")
async def test_a_changed_field_is_approved_and_the_run_pays_the_edited_value(dev_harness, tmp_path):
    from playwright.async_api import async_playwright, expect

    identity = IdentityConfig(mode=AuthMode.local, secret=b"edit-test", local_user="ops")
    app = create_app(dev_harness.client, identity, store=dev_harness.store)
    run = await dev_harness.start(PLAN)
    await dev_harness.wait_for(run, lambda s: s.phase is Phase.awaiting_approval)
    async with serving(app, free_port()) as base, async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = await browser.new_page(viewport={"width": 1280, "height": 900})
        try:
            await page.goto(f"{base}/runs/{run.id}")
            await page.locator(".decision[data-kind=plan_approval] button[value=approve]").click()
            form = await wait_for_decision(page, run, "step_approval")
            amount, to = form.locator("input[name='arg.amount']"), form.locator("input[name='arg.to']")
            await expect(amount).to_have_value("100")  # a number, as JSON
            await expect(to).to_have_value("Acme")  # the reference filled, as text
            # Refused by the tool's schema: the error at the form, and what was typed still there.
            await amount.fill("90.5")
            await form.locator("button[value=approve]").click()
            form = page.locator(".decision[data-kind=step_approval]")
            await expect(form.locator(".error")).to_contain_text("argument 'amount' of tool 'pay' is invalid")
            await expect(form.locator("input[name='arg.amount']")).to_have_value("90.5")
            assert dev_harness.calls() == []
            # Not JSON: refused before it is sent, kept the same way.
            await form.locator("input[name='arg.amount']").fill("ninety")
            await form.locator("button[value=approve]").click()
            form = page.locator(".decision[data-kind=step_approval]")
            await expect(form.locator(".error")).to_contain_text("amount: not JSON")
            await expect(form.locator("input[name='arg.amount']")).to_have_value("ninety")
            await form.locator("input[name='arg.amount']").fill("90")
            await form.locator("input[name=comment]").fill("discount agreed")
            await form.locator("button[value=approve]").click()
            await expect(page.locator(".done")).to_contain_text("approved with amount changed")
            await expect(page.locator("#phase")).to_have_text("succeeded", timeout=20_000)
        finally:
            await browser.close()
    assert (await run.result()).status is Phase.succeeded
    assert [(c["amount"], c["to"]) for c in dev_harness.calls()] == [(90, "Acme")]
    ledger = await run.ledger()
    revision = ledger.revisions[-1]
    assert (revision.author.kind, revision.author.name, revision.step("pay").args["amount"]) == (
        AuthorKind.human,
        "ops",
        90,
    )
    [edit] = [d for d in ledger.decisions if d.edited]
    assert edit.by == "ops" and edit.comment == "discount agreed"
    assert {k: (e.before, e.after) for k, e in edit.edited.items()} == {"amount": (100, 90)}


async def test_the_api_approves_a_step_with_changed_arguments_bound_to_what_was_shown(dev_env, tmp_path, monkeypatch):
    key = Signer.generate("console")
    monkeypatch.setenv("STRATAGEM_ISSUER_KEYS", key.public_line())
    async with harness_for(dev_env, tmp_path) as harness:
        run = await harness.start(PLAN)
        await harness.wait_for(run, lambda s: s.phase is Phase.awaiting_approval)
        identity = IdentityConfig(mode=AuthMode.local, secret=b"edit-api", local_user="ops")
        app = create_app(harness.client, identity, signer=key, store=harness.store)
        async with serving_here(app) as base, httpx.AsyncClient(base_url=base, headers={"Origin": base}) as http:
            headers = {"X-Stratagem-CSRF": (await http.get("/api/whoami")).json()["csrf"]}
            assert (await http.post(f"/api/runs/{run.id}/approve", json={"revision": 1}, headers=headers)).is_success
            status = await harness.wait_for(run, lambda s: any(p.preview is not None for p in s.pending))
            [shown] = [p.preview for p in status.pending if p.preview is not None]
            url = f"/api/runs/{run.id}/approve"
            blind = await http.post(url, json={"step_id": "pay", "args": {"amount": 90}}, headers=headers)
            assert blind.status_code == 409 and "must name the digest" in blind.json()["detail"]
            huge = {"step_id": "pay", "digest": shown.digest, "args": {"amount": 1, "memo": "x" * 40_000}}
            assert (await http.post(url, json=huge, headers=headers)).status_code == 422
            assert harness.calls() == []
            body = {"step_id": "pay", "digest": shown.digest, "args": {"amount": 90}}
            done = await http.post(url, json=body, headers=headers)
            assert done.is_success, done.text
            assert done.json()["revision"] == 2
        assert (await run.result()).status is Phase.succeeded
        assert [(c["amount"], c["to"]) for c in harness.calls()] == [(90, "Acme")]
