"""The Processes page and the Start form in Debian's chromium (issue #40, item 7): a person opens
Processes, pauses and resumes a process's schedule, starts vendor onboarding with an amount out of bounds, sees the problem beside that
field with everything else as typed, corrects it, lands on the new run's page (its process,
version and inputs shown), approves its plan and sees it succeed. Screenshots land in the test's
folder (and in CONSOLE_SCREENSHOTS=DIR).
"""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path
from typing import Any

import pytest
from test_console_browser import CHROMIUM, free_port, serving
from test_console_processes import SCRIPT, library

from stratagem.client import get_run, run_input_of
from stratagem.console import AuthMode, IdentityConfig, Users, create_app
from stratagem.domain.process import ProcessRun
from stratagem.domain.run_types import Phase, RunInput
from stratagem.domain.schedule_rules import ScheduleSource
from stratagem.io.plan_files import load_process_file
from stratagem.schedules import ScheduleRequest, ScheduleTiming, create_schedule

pytestmark = [
    pytest.mark.system,
    pytest.mark.skipif(CHROMIUM is None, reason="no chromium on this machine: apt-get install chromium"),
]


async def test_a_person_starts_a_process_from_its_form_in_the_browser(dev_harness, tmp_path, monkeypatch):
    from playwright.async_api import async_playwright, expect

    monkeypatch.setenv("STRATAGEM_PROCESSES", "")
    users = Users(path=tmp_path / "users.yaml")
    users.set_password("dana", "correct horse")
    identity = IdentityConfig(mode=AuthMode.users, secret=b"browser-test", users=users)
    folder = library(tmp_path / "processes")
    app = create_app(
        dev_harness.client,
        identity,
        store=dev_harness.store,
        task_queue=dev_harness.task_queue,
        process_folders=[folder],
    )
    spec = load_process_file(folder / "vendor-2.yaml")
    schedule_id = f"vendors-{uuid.uuid4().hex[:6]}"
    await create_schedule(
        dev_harness.client,
        ScheduleRequest(
            schedule_id=schedule_id,
            run=RunInput(process=ProcessRun(spec=spec, inputs={"vendor": "Initech", "tier": "silver"})),
            source=ScheduleSource(cron=["0 9 1 * *"], process=spec.name),
            timing=ScheduleTiming(cron=["0 9 1 * *"], time_zone="Europe/Paris"),
            task_queue=dev_harness.task_queue,
        ),
    )
    shots = [tmp_path, *([Path(os.environ["CONSOLE_SCREENSHOTS"])] if os.environ.get("CONSOLE_SCREENSHOTS") else [])]

    async def snap(page: Any, name: str) -> None:
        for folder in shots:
            folder.mkdir(parents=True, exist_ok=True)
            await page.screenshot(path=str(folder / f"console-{name}.png"), full_page=True)

    vendor = f"Acme {SCRIPT}"
    async with serving(app, free_port()) as base, async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = await browser.new_page(viewport={"width": 1280, "height": 900})
        dialogs: list[str] = []
        page.on("dialog", lambda dialog: dialogs.append(dialog.message))
        logs: list[str] = []  # what the browser said, for the message of a failure
        page.on("console", lambda m: logs.append(m.text))
        page.on("requestfailed", lambda r: logs.append(f"failed {r.url} {r.failure}"))
        page.on("framenavigated", lambda f: logs.append(f"navigated {f.url}") if f == page.main_frame else None)
        try:
            await page.goto(base + "/processes")
            await page.fill("input[name=name]", "dana")
            await page.fill("input[name=password]", "correct horse")
            await page.click("button[type=submit]")
            await expect(page.locator("h1")).to_have_text("Processes")
            process = page.locator("[data-process=vendor-onboarding]")
            await expect(process).to_contain_text("Onboard one vendor, with its payment.")
            await expect(page.locator("#problems")).to_contain_text("broken.yaml")
            row = process.locator(f"tr[data-schedule='{schedule_id}']")
            for _ in range(40):  # a new schedule reaches the list in a moment
                if await row.count():
                    break
                await asyncio.sleep(0.25)
                await page.reload()
            await expect(row).to_contain_text("cron '0 9 1 * *' (Europe/Paris)")
            await expect(row.locator("time")).to_have_count(3)  # its next run times
            await snap(page, "processes")
            await row.locator("button[value=pause]").click()
            await expect(page.locator(".done")).to_contain_text("is paused")
            await expect(row.locator(".state")).to_have_text("paused")
            await row.locator("button[value=resume]").click()
            await expect(page.locator(".done")).to_contain_text("running again")
            await expect(row.locator("time")).to_have_count(3)
            await process.locator("a.start").click()

            await expect(page.locator("h1")).to_contain_text("Start vendor-onboarding")
            await expect(page.locator("label[for=input-vendor]")).to_contain_text("Vendor name")
            await expect(page.locator("#input-vendor-help")).to_have_text("As on the contract.")
            await expect(page.locator("#input-tier")).to_have_value("")  # "choose one", never a value
            await expect(page.locator("#input-amount")).to_have_value("100")  # its default
            await page.fill("#input-vendor", vendor)
            await page.select_option("#input-tier", "gold")
            await page.fill("#input-amount", "9000")
            await page.click("text=Start the run")

            amount = page.locator("[data-input=amount]")
            await expect(amount.locator(".field-error")).to_contain_text("greater than the maximum of 5000")
            await expect(page.locator("#input-amount")).to_have_attribute("aria-invalid", "true")
            await expect(page.locator("#input-vendor")).to_have_value(vendor)  # as typed
            await expect(page.locator("#input-tier")).to_have_value("gold")
            await snap(page, "start-refused")
            await page.fill("#input-amount", "250")
            await page.click("text=Start the run")

            # The page may come before the run has rendered its goal; the ledger's events reload it.
            try:
                await expect(page.locator("h1")).to_have_text(f"Onboard {vendor}", timeout=15_000)
            except AssertionError:
                raise AssertionError(f"the run page never showed the rendered goal; browser: {logs}") from None
            run_id = page.url.rsplit("/", 1)[-1]
            shown = page.locator("#process")
            await expect(shown).to_contain_text("vendor-onboarding v2")
            await expect(shown).to_contain_text(vendor)
            await expect(shown).to_contain_text("250")
            await snap(page, "started")
            approve = page.locator(".decision[data-kind=plan_approval] button[value=approve]")
            await approve.click()
            await expect(page.locator("#phase")).to_have_text("succeeded", timeout=20_000)
        finally:
            await browser.close()
    await dev_harness.client.get_schedule_handle(schedule_id).delete()
    assert dialogs == []  # the vendor's markup never ran
    handle = get_run(dev_harness.client, run_id)
    dev_harness.runs.append(handle)  # replayed when the harness closes
    result = await handle.result()
    assert result.status is Phase.succeeded
    assert [c["label"] for c in dev_harness.calls()] == [f"{vendor} 250"]
    ledger = await handle.ledger()
    assert {d.by for d in ledger.decisions} == {"dana"}
    started = await run_input_of(dev_harness.client, handle)
    assert started.started_by == "dana" and started.process is not None
    assert started.process.inputs == {"vendor": vendor, "tier": "gold", "amount": 250}
