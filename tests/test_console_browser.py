"""The review console in a real browser: Debian's chromium, driven headless by Playwright.

A person signs in, finds the run in the inbox, approves its plan, approves its gated step, has an
answer refused by the step's schema and then taken, and sees the run succeed; the audit names
them. Screenshots of the pages land in the test's folder (and, with CONSOLE_SCREENSHOTS=DIR, in
DIR: docs/images holds two of them).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import uvicorn
import yaml
from support.plans import step
from support.webhooks import Receiver

from stratagem.console import AuthMode, IdentityConfig, Users, create_app
from stratagem.domain.run_types import Phase

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# CI installs chromium and sets STRATAGEM_REQUIRE_BROWSER, so there a missing browser fails the
# test; on a machine without one (apt-get install chromium) it is skipped, saying why.
if CHROMIUM is None and os.environ.get("STRATAGEM_REQUIRE_BROWSER"):
    raise RuntimeError("STRATAGEM_REQUIRE_BROWSER is set but there is no chromium: apt-get install chromium")
pytestmark = [
    pytest.mark.system,
    pytest.mark.skipif(CHROMIUM is None, reason="no chromium on this machine: apt-get install chromium"),
]
XSS = "<img src=x onerror=alert(1)>"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@asynccontextmanager
async def serving(app: Any, port: int) -> AsyncIterator[str]:
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


async def test_a_person_runs_a_process_to_the_end_in_the_browser(dev_harness, tmp_path):
    from playwright.async_api import async_playwright, expect

    users = Users(path=tmp_path / "users.yaml")
    users.set_password("dana", "correct horse")
    identity = IdentityConfig(mode=AuthMode.users, secret=b"browser-test", users=users)
    app = create_app(dev_harness.client, identity, store=dev_harness.store)
    schema = {
        "type": "object",
        "properties": {"decision": {"enum": ["approve", "reject"]}, "days": {"type": "integer", "minimum": 1}},
        "required": ["decision", "days"],
    }
    plan = {
        "goal": "Onboard ACME",
        "steps": [
            {**step("register", "record", label="registered"), "title": f"Register {XSS}"},
            {**step("pay", "record", ["register"], label="paid"), "requires_approval": True},
            {
                "id": "terms",
                "title": "Payment terms",
                "kind": "human",
                "instructions": "Approve the terms and say how many days",
                "depends_on": ["pay"],
                "answer_schema": schema,
            },
        ],
    }
    run = await dev_harness.start(plan, approvers=["dana"])
    await dev_harness.wait_for(run, lambda s: s.phase is Phase.awaiting_approval)
    shots = [tmp_path]
    if os.environ.get("CONSOLE_SCREENSHOTS"):
        shots.append(Path(os.environ["CONSOLE_SCREENSHOTS"]))

    async def snap(page: Any, name: str) -> None:
        for folder in shots:
            folder.mkdir(parents=True, exist_ok=True)
            await page.screenshot(path=str(folder / f"console-{name}.png"), full_page=True)

    async with serving(app, free_port()) as base:
        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = await browser.new_page(viewport={"width": 1280, "height": 900})
            dialogs: list[str] = []
            page.on("dialog", lambda dialog: dialogs.append(dialog.message))
            try:
                await page.goto(base + "/")
                await expect(page).to_have_url(base + "/login?next=/")
                await page.fill("input[name=name]", "dana")
                await page.fill("input[name=password]", "wrong")
                await page.click("button[type=submit]")
                await expect(page.locator(".error")).to_contain_text("wrong name or password")
                await page.fill("input[name=name]", "dana")
                await page.fill("input[name=password]", "correct horse")
                await page.click("button[type=submit]")

                # The inbox, then the run.
                await expect(page.locator("table.inbox")).to_contain_text("approval of revision 1")
                await snap(page, "inbox")
                await page.click(f"a[href='/runs/{run.id}']")
                await expect(page.locator("h1")).to_have_text("Onboard ACME")
                await expect(page.locator("#step-register .title")).to_have_text(f"Register {XSS}")  # as text
                await snap(page, "run")
                plan_form = page.locator(".decision[data-kind=plan_approval]")
                await plan_form.locator("input[name=comment]").fill("checked the vendor")
                await plan_form.locator("button[value=approve]").click()
                await expect(page.locator(".done")).to_contain_text("approved")

                # The gated step asks for its own approval.
                await wait_for_decision(page, run, "step_approval")
                await page.locator(".decision[data-kind=step_approval] button[value=approve]").click()
                await expect(page.locator(".done")).to_contain_text("approved")

                # The answer: refused by its schema, then taken.
                answer = await wait_for_decision(page, run, "human_answer")
                await answer.locator("select[name='field.decision']").select_option("approve")
                await answer.locator("input[name='field.days']").fill("0")
                await answer.locator("button[type=submit]").click()
                await expect(page.locator(".error")).to_contain_text("less than the minimum of 1")
                answer = page.locator(".decision[data-kind=human_answer]")
                await answer.locator("select[name='field.decision']").select_option("approve")
                await answer.locator("input[name='field.days']").fill("30")
                await answer.locator("button[type=submit]").click()
                await expect(page.locator("#phase")).to_have_text("succeeded", timeout=20_000)
                await snap(page, "succeeded")
            finally:
                await browser.close()
    assert dialogs == []  # the title's markup never ran
    result = await run.result()
    assert result.status is Phase.succeeded and result.outputs == {"terms": {"decision": "approve", "days": 30}}
    ledger = await run.ledger()
    assert {d.by for d in ledger.decisions} == {"dana"}
    assert ledger.decisions[0].comment == "checked the vendor"
    assert next(e for e in ledger.events if e.kind.value == "answer_received").actor == "dana"


async def wait_for_decision(page: Any, run: Any, kind: str) -> Any:
    """Reload until the run page offers a decision of this kind (the page also reloads itself)."""
    form = page.locator(f".decision[data-kind={kind}]")
    for _ in range(100):
        if await form.count():
            return form
        await asyncio.sleep(0.2)
        await page.reload()
    raise AssertionError(
        f"run {run.id} never asked for a {kind}; status: {(await run.status()).model_dump(mode='json')}"
    )


async def test_the_vendor_onboarding_example_end_to_end_in_the_browser(dev_env, tmp_path):
    """The issue's "done when": the example, approved, revised (the review shows the diff against
    the approved revision), its payment approved and finished, all in the browser."""
    from conftest import harness_for
    from playwright.async_api import async_playwright, expect

    from stratagem.io.plan_files import load_process_file
    from stratagem.process_runs import preview
    from stratagem.tools import ToolRegistry

    example = Path(__file__).resolve().parent.parent / "examples" / "vendor_onboarding"
    registry = ToolRegistry.from_modules([str(example / "tools.py")])
    async with harness_for(dev_env, tmp_path, registry) as harness:
        # The process rendered with ACME's inputs: the plan a run of it takes.
        plan = preview(load_process_file(example / "plan.yaml"), yaml.safe_load((example / "inputs.yaml").read_text()))[
            1
        ]
        run = await harness.start(plan, executor=f"scripted:{example / 'models.yaml'}")
        await harness.wait_for(run, lambda s: s.phase is Phase.awaiting_approval)
        identity = IdentityConfig(mode=AuthMode.local, secret=b"browser-test", local_user="ops")
        app = create_app(harness.client, identity, store=harness.store)
        async with serving(app, free_port()) as base, async_playwright() as playwright:
            browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = await browser.new_page(viewport={"width": 1280, "height": 900})
            logs: list[str] = []  # what the browser said, for the message of a failure
            page.on("console", lambda m: logs.append(m.text))
            page.on("requestfailed", lambda r: logs.append(f"failed {r.url} {r.failure}"))
            try:
                await page.goto(f"{base}/runs/{run.id}")
                await page.locator(".decision[data-kind=plan_approval] button[value=approve]").click()
                await wait_for_decision(page, run, "step_approval")
                # Change the payment while it waits for its approval: revision 2, reviewed as a diff.
                editor = page.locator("textarea[name=plan]")
                text = await editor.input_value()
                assert "amount_eur: 1200\n" in text
                await editor.fill(text.replace("amount_eur: 1200\n", "amount_eur: 1150\n"))
                await page.locator("input[name=reason]").fill("discount agreed")
                await page.locator("text=Propose this revision").click()
                await expect(page.locator("pre.diff")).to_contain_text("args.amount_eur: 1200 → 1150")
                await page.locator(".decision[data-kind=plan_approval] button[value=approve]").click()
                pay = await wait_for_decision(page, run, "step_approval")
                await expect(pay).to_contain_text("first_payment")
                await pay.locator("button[value=approve]").click()
                try:
                    await expect(page.locator("#phase")).to_have_text("succeeded", timeout=20_000)
                except AssertionError:
                    events = [(e.kind.value, e.step_id, e.message[:80]) for e in (await run.ledger()).events[-8:]]
                    raise AssertionError(f"the page never showed the end; browser: {logs}; ledger: {events}") from None
            finally:
                await browser.close()
        result = await run.result()
        ledger = await run.ledger()
    assert result.status is Phase.succeeded and result.revision == 2
    assert {d.by for d in ledger.decisions} == {"ops"}
    assert "1150" in (harness.workspace / "payments" / "ledger.csv").read_text()


async def test_what_the_console_refuses_in_the_browser(dev_env, tmp_path, monkeypatch):
    """Two approvers at once (one wins, the other is told), a person off the approver list, a
    form posted from another site, and a notification's link opening the right decision."""
    from conftest import harness_for
    from playwright.async_api import async_playwright, expect

    hook = Receiver()
    monkeypatch.setenv("STRATAGEM_NOTIFY_WEBHOOK_URL", hook.url + "/hook")
    monkeypatch.setenv("STRATAGEM_CONSOLE_URL", "https://review.example.com")
    monkeypatch.setenv("STRATAGEM_CONSOLE_SECRET", "browser-test")
    users = Users(path=tmp_path / "users.yaml")
    for name in ("dana", "lee", "erin"):
        users.set_password(name, f"{name}-password")
    identity = IdentityConfig(mode=AuthMode.users, secret=b"browser-test", users=users)
    try:
        async with harness_for(dev_env, tmp_path) as harness:
            run = await harness.start(
                {"goal": "g", "steps": [step("one", "record", label="x")]}, approvers=["dana", "lee"]
            )
            await harness.wait_for(run, lambda s: s.phase is Phase.awaiting_approval)
            for _ in range(100):
                if hook.received:
                    break
                await asyncio.sleep(0.1)
            link = hook.received[0]["body"]["link"]
            app = create_app(harness.client, identity, store=harness.store)
            async with serving(app, free_port()) as base, async_playwright() as playwright:
                browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
                try:
                    pages = {}
                    for name in ("dana", "lee", "erin"):
                        context = await browser.new_context()
                        page = await context.new_page()
                        # The notification's link, signed in on the way: it lands on the run's decision.
                        await page.goto(link.replace("https://review.example.com", base))
                        await page.fill("input[name=name]", name)
                        await page.fill("input[name=password]", f"{name}-password")
                        await page.click("button[type=submit]")
                        await expect(page.locator(".decision[data-kind=plan_approval]")).to_be_visible()
                        pages[name] = page

                    # erin is not on the run's approver list.
                    await pages["erin"].locator(".decision[data-kind=plan_approval] button[value=approve]").click()
                    await expect(pages["erin"].locator(".error")).to_contain_text("not on this run's approver list")

                    # A page on another site posts the form with the person's cookies: refused.
                    attacker = await pages["dana"].context.new_page()
                    await attacker.set_content(
                        f'<form method="post" action="{base}/runs/{run.id}/decide">'
                        '<input name="kind" value="plan_approval"><input name="verdict" value="approve">'
                        '<button id="go">go</button></form>'
                    )
                    await attacker.click("#go")
                    # Its Origin is not the console's: refused before anything is read (and its
                    # cookie, SameSite=Strict, was not even sent).
                    await expect(attacker.locator("body")).to_contain_text("comes from another site")
                    assert (await run.status()).phase is Phase.awaiting_approval

                    # dana and lee approve at once: one wins, the other is told.
                    await asyncio.gather(
                        *(
                            pages[n].locator(".decision[data-kind=plan_approval] button[value=approve]").click()
                            for n in ("dana", "lee")
                        )
                    )
                    told = [await pages[n].locator(".error, .done").first.inner_text() for n in ("dana", "lee")]
                    # The other is told: the plan no longer waits (or, the one step done, the run has ended).
                    refused = [t for t in told if "no plan is waiting for approval" in t or "has ended" in t]
                    assert len(refused) == 1 and any(t == "approved" for t in told), told
                finally:
                    await browser.close()
            assert (await run.result()).status is Phase.succeeded
            approvals = [d.by for d in (await run.ledger()).decisions]
    finally:
        hook.close()
    assert len(approvals) == 1 and approvals[0] in ("dana", "lee")
