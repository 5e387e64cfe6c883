"""docs/observability.md, "The Temporal Web UI", done as written: on the embedded server (the
one `stratagem run` starts, with its Web UI), a rejected run and a succeeded one both show
`COMPLETED`; a person adds the StratagemStatus column and saves a view in a real browser
(Debian's chromium, driven by Playwright), and the column tells the two apart. The page's other
filters run as visibility queries. With WEB_UI_SCREENSHOTS=DIR the page's picture lands in DIR
(docs/images holds it)."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import uuid
from pathlib import Path

import pytest
from support import FIXTURE_TOOLS
from support.plans import SIDE_EFFECT
from support.ports import free_port_pair

from stratagem.client import connect, start_run
from stratagem.common.config import Settings
from stratagem.domain.plan import Author, AuthorKind, PlanDraft
from stratagem.domain.run_types import ApproveInput, Phase, RejectInput, RunInput
from stratagem.server import EmbeddedServer
from stratagem.tools import ToolRegistry
from stratagem.worker import build_worker

PAGE = Path(__file__).resolve().parent.parent / "docs" / "observability.md"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
if CHROMIUM is None and os.environ.get("STRATAGEM_REQUIRE_BROWSER"):
    raise RuntimeError("STRATAGEM_REQUIRE_BROWSER is set but there is no chromium: apt-get install chromium")
# `system`: it starts the embedded server, which its source does not show as a process (conftest.py).
pytestmark = [
    pytest.mark.system,
    pytest.mark.skipif(CHROMIUM is None, reason="no chromium on this machine: apt-get install chromium"),
]


def documented_queries() -> list[str]:
    """The queries of the page's table of filters."""
    section = PAGE.read_text(encoding="utf-8").split("## The Temporal Web UI", 1)[1]
    return re.findall(r"^\| `(.+?)` \|", section, re.M)


async def test_the_status_column_and_a_saved_view_tell_a_rejected_run_from_a_success(tmp_path):
    from playwright.async_api import async_playwright, expect

    port = free_port_pair()
    server = EmbeddedServer(f"127.0.0.1:{port}", tmp_path / "home")
    server.start_detached()
    try:
        client = await connect(Settings(address=f"127.0.0.1:{port}"))
        queue = f"ui-{uuid.uuid4().hex[:6]}"
        registry = ToolRegistry.from_modules([FIXTURE_TOOLS])
        plan = PlanDraft.model_validate(SIDE_EFFECT)
        async with build_worker(client, task_queue=queue, registry=registry, workspace=tmp_path / "ws"):
            runs = {}
            for name in ("rejected", "succeeded", "waiting"):
                runs[name] = await start_run(
                    client,
                    RunInput(plan=plan, author=Author(kind=AuthorKind.human, name="dana")),
                    task_queue=queue,
                    run_id=f"{name}-{uuid.uuid4().hex[:6]}",
                )
            async with asyncio.timeout(30):
                for run in runs.values():
                    while (await run.status()).phase is not Phase.awaiting_approval:
                        await asyncio.sleep(0.1)
            await runs["rejected"].reject(RejectInput(by="dana", reason="not this quarter"))
            await runs["succeeded"].approve(ApproveInput(by="dana", revision=1))
            assert (await runs["succeeded"].result()).status is Phase.succeeded
            assert (await runs["rejected"].result()).status is Phase.rejected

            # The page's filters, as visibility queries (eventually consistent: asked until they agree).
            expected = {
                'StratagemStatus = "rejected"': {"rejected"},
                'StratagemStatus = "awaiting_approval"': {"waiting"},
                'StratagemStatus IN ("failed", "rejected", "cancelled")': {"rejected"},
                'WorkflowType = "StratagemRun" AND ExecutionStatus = "Running"': {"waiting"},
            }
            assert documented_queries() == list(expected)
            for query, names in expected.items():
                wanted = {runs[name].id for name in names}
                for _ in range(100):
                    found = {w.id async for w in client.list_workflows(query)}
                    if found == wanted:
                        break
                    await asyncio.sleep(0.2)
                assert found == wanted, query

            async with async_playwright() as playwright:
                browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
                page = await browser.new_page(viewport={"width": 1400, "height": 540})
                try:
                    await page.goto(f"{server.ui_url}/namespaces/default/workflows")
                    rejected_row = page.locator("tr", has_text=runs["rejected"].id)
                    # What a person sees first: "Completed" (shown in capitals), as for a success.
                    await expect(rejected_row).to_contain_text("Completed")

                    # 2. Configure Columns: + beside StratagemStatus, up next to Status, Run ID out.
                    await page.get_by_role("button", name="Configure Columns").click()
                    await expect(page.get_by_text("Custom Search Attributes (not in view)")).to_be_visible()
                    await page.get_by_role("button", name="Add StratagemStatus column").click()
                    up = page.get_by_role("button", name="Move StratagemStatus column up")
                    for _ in range(5):
                        await up.click()
                    await page.get_by_role("button", name="Remove Run ID column").click()
                    await page.get_by_role("button", name="Close").first.click()

                    # 3. The query, 4. saved as a view.
                    await page.get_by_test_id("toggle-manual-query").click()
                    await page.get_by_test_id("workflow-manual-search-input").fill('WorkflowType = "StratagemRun"')
                    await page.keyboard.press("Enter")
                    await page.get_by_role("button", name="Save as New").click()
                    await page.get_by_test_id("workflow-save-view-modal-input").fill("Stratagem runs")
                    await page.locator("[data-testid=confirm-modal-button]:visible").click()

                    # Opened afresh, the view is there, and the column tells the runs apart.
                    await page.goto(f"{server.ui_url}/namespaces/default/workflows")
                    await page.get_by_test_id("saved-views-button").click()
                    await page.get_by_text("Stratagem runs").first.click()
                    await expect(page).to_have_url(re.compile(r"query=WorkflowType\+%3D\+%22StratagemRun%22"))
                    # The view's columns render after its URL changes: under load the headers were
                    # read before they were there ('Status' is not in list).
                    await expect(page.locator("thead")).to_contain_text("StratagemStatus")
                    headers = [h.strip() for h in await page.locator("thead th").all_inner_texts()]
                    assert headers[headers.index("Status") :][:3] == ["Status", "StratagemStatus", "Workflow ID"]
                    await expect(rejected_row).to_contain_text("rejected")
                    await expect(page.locator("tr", has_text=runs["succeeded"].id)).to_contain_text("succeeded")
                    await expect(page.locator("tr", has_text=runs["waiting"].id)).to_contain_text("awaiting_approval")
                    await page.mouse.click(5, 5)  # nothing hovered or open in the picture
                    folders = [tmp_path]
                    if os.environ.get("WEB_UI_SCREENSHOTS"):
                        folders.append(Path(os.environ["WEB_UI_SCREENSHOTS"]))
                    for folder in folders:
                        folder.mkdir(parents=True, exist_ok=True)
                        await page.screenshot(path=str(folder / "temporal-ui-status-column.png"))
                finally:
                    await browser.close()
            await runs["waiting"].handle.terminate(reason="test finished")
    finally:
        server.stop()
