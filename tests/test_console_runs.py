"""The console's Runs page, result panel and plan graph (issue #39, item 3), in Chromium against
real runs on the dev server: six runs in five phases, listed from visibility and memos, filtered by
phase, by what they wait for, by "I can decide" and by text, paged with a cursor; a finished run's
page shows its result and its plan as an SVG with one arrow per dependency. The attacks: search
text written as visibility-query syntax neither errors nor widens the list, a filter outside the
known values is refused, and a step title carrying <script> stays text in the drawing.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.plans import step
from temporalio.client import WorkflowFailureError
from test_console_browser import CHROMIUM, free_port, serving

from stratagem.console import AuthMode, IdentityConfig, Users, create_app
from stratagem.console.listing import RunFilter, list_runs
from stratagem.domain.run_types import ApproveInput, Phase, RejectInput

pytestmark = [
    pytest.mark.system,
    pytest.mark.skipif(CHROMIUM is None, reason="no chromium on this machine: apt-get install chromium"),
]
SCRIPT = "<script>alert('graph')</script>"


async def start_runs(h: Any, tag: str) -> dict[str, Any]:
    """Six runs of goals containing `tag`, one per case the page must tell apart."""
    mine = await h.start(
        {"goal": f"{tag} approve the invoice", "steps": [step("a", "record", label="x")]}, approvers=["dana"]
    )
    theirs = await h.start(
        {"goal": f"{tag} not for dana", "steps": [step("a", "record", label="x")]}, approvers=["lee"]
    )
    human = {
        "goal": f"{tag} ask a person",
        "steps": [{"id": "ask", "title": "Ask", "kind": "human", "instructions": "how many days?"}],
    }
    asking = await h.start(human, auto_approve=True)
    done_plan = {
        "goal": f"{tag} finished with a graph",
        "steps": [
            {**step("fetch", "fetch_profile", user="ada"), "title": f"Fetch {SCRIPT}"},
            step("left", "record", ["fetch"], label="left"),
            step("right", "record", ["fetch"], label="right"),
            step("join", "big_output", ["left", "right"], kib=2),  # shown folded
            step("archive", "big_output", ["fetch"], kib=20),  # above the inline limit: in the store
        ],
    }
    done = await h.start(done_plan, auto_approve=True)
    refused = await h.start({"goal": f"{tag} refused plan", "steps": [step("a", "record", label="x")]})
    broken = {"goal": f"{tag} broken card", "steps": [step("charge", "broken", reason="card declined")]}
    failed = await h.start(broken, auto_approve=True, on_failure="fail")
    for run in (mine, theirs, refused):
        await h.wait_for(run, lambda s: s.phase is Phase.awaiting_approval)
    await refused.reject(RejectInput(by="alice", revision=1, reason="wrong vendor"))
    await h.wait_for(asking, lambda s: bool(s.pending))
    assert (await done.result()).status is Phase.succeeded
    with pytest.raises(WorkflowFailureError):
        await failed.result()
    return {"mine": mine, "theirs": theirs, "asking": asking, "done": done, "refused": refused, "failed": failed}


async def snap(page: Any, name: str, folder: Path) -> None:
    """A screenshot in the test's folder and, with CONSOLE_SCREENSHOTS=DIR, in DIR (docs/images holds them)."""
    for where in [folder] + (
        [Path(os.environ["CONSOLE_SCREENSHOTS"])] if os.environ.get("CONSOLE_SCREENSHOTS") else []
    ):
        where.mkdir(parents=True, exist_ok=True)
        await page.screenshot(path=str(where / f"console-{name}.png"), full_page=True)


async def listed(http: httpx.AsyncClient, **params: Any) -> list[dict[str, Any]]:
    response = await http.get("/api/runs", params=params)
    assert response.status_code == 200, response.text
    return response.json()["runs"]


async def settled(http: httpx.AsyncClient, tag: str, phases: dict[str, str]) -> None:
    """Until visibility shows every run's final memo (a memo write lands a moment after the run moves)."""
    for _ in range(100):
        shown = {r["run_id"]: r["phase"] for r in await listed(http, q=tag, limit=50)}
        if shown == phases:
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"visibility shows {shown}, not {phases}")


async def test_the_runs_page_lists_filters_and_pages_real_runs(dev_harness, tmp_path):
    from playwright.async_api import async_playwright, expect

    tag = f"rp{uuid.uuid4().hex[:8]}"
    runs = await start_runs(dev_harness, tag)
    ids = {name: run.id for name, run in runs.items()}
    phases = {
        ids["mine"]: "awaiting_approval",
        ids["theirs"]: "awaiting_approval",
        ids["asking"]: "running",
        ids["done"]: "succeeded",
        ids["refused"]: "rejected",
        ids["failed"]: "failed",
    }
    users = Users(path=tmp_path / "users.yaml")
    users.set_password("dana", "correct horse")
    identity = IdentityConfig(mode=AuthMode.users, secret=b"runs-test", users=users)
    app = create_app(dev_harness.client, identity, store=dev_harness.store)
    async with serving(app, free_port()) as base:
        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = await browser.new_page(viewport={"width": 1280, "height": 900})
            try:
                await page.goto(base + "/login?next=/runs")
                await page.fill("input[name=name]", "dana")
                await page.fill("input[name=password]", "correct horse")
                await page.click("button[type=submit]")
                await expect(page.locator("h1")).to_have_text("Runs")
                cookies = {c["name"]: c["value"] for c in await page.context.cookies()}
                async with httpx.AsyncClient(base_url=base, headers={"Origin": base}, cookies=cookies) as http:
                    await settled(http, tag, phases)
                    await check_api(http, tag, ids)
                    await check_scan_limit(dev_harness.client, tag, ids)
                    await check_attacks(http, tag)

                # The page, reached from the navigation, then each filter through the form.
                await page.goto(base + "/")
                await page.click("header nav a[href='/runs']")
                await page.fill("input[name=q]", tag)
                await page.click("form.filters button[type=submit]")
                rows = page.locator("table.runs tbody tr")
                await expect(rows).to_have_count(6)
                await snap(page, "runs", tmp_path)
                await expect(page.locator(f"tr[data-run='{ids['mine']}'] .wait")).to_contain_text("by dana")
                await expect(page.locator(f"tr[data-run='{ids['asking']}'] .wait")).to_contain_text("anyone may decide")
                await page.select_option("select[name=phase]", "succeeded")
                await page.click("form.filters button[type=submit]")
                await expect(rows).to_have_count(1)
                await expect(rows.first).to_have_attribute("data-run", ids["done"])
                await page.select_option("select[name=phase]", "")
                await page.select_option("select[name=waiting]", "any")
                await page.click("form.filters button[type=submit]")
                await expect(rows).to_have_count(3)
                await page.check("input[name=mine]")
                await page.click("form.filters button[type=submit]")
                await expect(rows).to_have_count(2)
                shown = {await rows.nth(i).get_attribute("data-run") for i in range(2)}
                assert shown == {ids["mine"], ids["asking"]}

                # Paging: two at a time, the cursor bringing the rest, each run once.
                await page.goto(f"{base}/runs?q={tag}&limit=2")
                seen: list[str] = []
                while True:
                    # The last page may be empty: a page ends when it is full, before anyone knows
                    # whether older runs match (another test's runs may follow ours).
                    await expect(rows.first.or_(page.locator("#no-runs"))).to_be_visible()
                    seen += [await rows.nth(i).get_attribute("data-run") or "" for i in range(await rows.count())]
                    if await page.locator("#next-page").count() == 0:
                        break
                    await page.click("#next-page")
                assert sorted(seen) == sorted(ids.values()) and len(seen) == 6
                await page.goto(f"{base}/runs?q={tag}&cursor=not-a-cursor")
                await expect(page.locator("p.error")).to_contain_text("not one this console gave")

                # A finished run: its result, its outputs, its plan drawn with one arrow per dependency.
                await page.goto(f"{base}/runs/{ids['done']}")
                result = page.locator("#result")
                await expect(result.locator("h2")).to_contain_text("succeeded")
                await expect(result.locator("#final-join + dd details.fold summary")).to_contain_text(
                    "(all 2,048 characters)"
                )
                await expect(result.locator("#final-archive + dd")).to_contain_text(
                    "stored output, 20,482 bytes"
                )  # as JSON, quoted
                link = result.locator("#final-archive a")
                await expect(link).to_have_text("download")
                stored = await page.request.get(base + (await link.get_attribute("href") or ""))
                assert stored.ok and await stored.text() == "x" * 20 * 1024
                await expect(result.locator("#result-usage")).to_contain_text("model calls")
                graph = page.locator("svg.plan-graph")
                await expect(graph.locator("path.edge")).to_have_count(5)
                await expect(graph.locator("a.node")).to_have_count(5)
                await expect(graph.locator("a.node.status-succeeded")).to_have_count(5)
                await expect(graph.locator("#graph-desc")).to_contain_text("5 steps and 5 dependencies")
                await expect(graph.locator("script")).to_have_count(0)
                await expect(graph.locator("a.node[data-step='fetch'] title")).to_contain_text(SCRIPT)
                edges = {
                    (await e.get_attribute("data-from"), await e.get_attribute("data-to"))
                    for e in await graph.locator("path.edge").all()
                }
                assert edges == {
                    ("fetch", "left"),
                    ("fetch", "right"),
                    ("left", "join"),
                    ("right", "join"),
                    ("fetch", "archive"),
                }
                # Laid out by level: every arrow goes from a column to one further right.
                for e in await graph.locator("path.edge").all():
                    d = (await e.get_attribute("d") or "").split()
                    assert float(d[1]) < float(d[-2]), d
                await snap(page, "result", tmp_path)

                for name, reason in (("refused", "wrong vendor"), ("failed", "card declined")):
                    await page.goto(f"{base}/runs/{ids[name]}")
                    await expect(page.locator("#result h2")).to_contain_text(phases[ids[name]])
                    await expect(page.locator("#result-reason")).to_contain_text(reason)
                await page.goto(f"{base}/runs/{ids['mine']}")
                await expect(page.locator("#result")).to_have_count(0)  # still waiting: no result yet
            finally:
                await browser.close()
    await runs["mine"].approve(ApproveInput(by="dana", revision=1))
    for name in ("theirs", "asking"):
        await runs[name].cancel()


async def check_api(http: httpx.AsyncClient, tag: str, ids: dict[str, str]) -> None:
    every = await listed(http, q=tag, limit=50)
    # Visibility's order: runs still going first, newest started first; then ended runs, latest ended first.
    going, ended = [r for r in every if r["closed"] is None], [r for r in every if r["closed"] is not None]
    assert every == going + ended and len(going) == 3
    assert [r["started"] for r in going] == sorted((r["started"] for r in going), reverse=True)
    assert [r["closed"] for r in ended] == sorted((r["closed"] for r in ended), reverse=True)
    assert {r["run_id"] for r in await listed(http, q=tag, phase="succeeded")} == {ids["done"]}
    assert {r["run_id"] for r in await listed(http, q=tag, phase="failed")} == {ids["failed"]}
    assert {r["run_id"] for r in await listed(http, q=tag, waiting="plan_approval")} == {ids["mine"], ids["theirs"]}
    assert {r["run_id"] for r in await listed(http, q=tag, waiting="human_answer")} == {ids["asking"]}
    assert {r["run_id"] for r in await listed(http, q=tag, mine="true")} == {ids["mine"], ids["asking"]}
    assert {r["run_id"] for r in await listed(http, q=ids["failed"].upper())} == {ids["failed"]}  # any case
    [row] = await listed(http, q=tag, waiting="plan_approval", mine="true")
    assert row["waiting"][0]["deciders"] == ["dana"] and row["can_decide"]
    # Pages of two: each run once, and the last page says there is no more.
    seen, cursor = [], ""
    while True:
        body = (await http.get("/api/runs", params={"q": tag, "limit": 2, "cursor": cursor})).json()
        seen += [r["run_id"] for r in body["runs"]]
        if body["next"] is None:
            break
        cursor = body["next"]
    assert sorted(seen) == sorted(ids.values()) and len(seen) == 6


async def check_scan_limit(client: Any, tag: str, ids: dict[str, str]) -> None:
    """A narrow filter stops after `scan_limit` runs with a cursor to go on: followed, it finds the rest."""
    wanted, secret, found, cursor, pages = RunFilter(phase="succeeded", text=tag), b"k" * 32, [], None, 0
    while True:
        page = await list_runs(client, "dana", wanted, limit=5, cursor=cursor, secret=secret, scan_limit=2)
        assert page.scanned <= 2
        found += [r["run_id"] for r in page.runs]
        pages += 1
        if page.next is None:
            break
        cursor = page.next
    assert found == [ids["done"]] and pages > 1


async def check_attacks(http: httpx.AsyncClient, tag: str) -> None:
    """What a person types reaches no visibility query: the search text is matched against the
    memo's goal, so query syntax finds nothing (it does not widen), and never errors."""
    for text in (
        "' OR WorkflowId != '",
        f"{tag}' OR WorkflowType = 'StratagemRun",
        "StratagemRun' OR ExecutionStatus = 'Running') OR ('a' = 'a",
        '" OR 1=1 --',
        "`WorkflowId` != ''",
    ):
        response = await http.get("/api/runs", params={"q": text, "limit": 50})
        assert response.status_code == 200, (text, response.text)
        assert response.json()["runs"] == [], text
        page = await http.get("/runs", params={"q": text})
        assert page.status_code == 200 and "No run matches" in page.text
    for params in (
        {"phase": "running' OR 'a' = 'a"},
        {"waiting": "plan_approval' OR WorkflowId != '"},
        {"phase": "Running"},
    ):
        refused = await http.get("/api/runs", params=params)
        assert refused.status_code == 400 and "unknown" in refused.json()["detail"], params
    # A cursor is the client's to send back: one made up, or another filter's, is refused in one line.
    first = (await http.get("/api/runs", params={"q": tag, "limit": 1})).json()
    other = await http.get("/api/runs", params={"q": "else", "cursor": first["next"]})
    assert other.status_code == 400 and "other filters" in other.json()["detail"]
    # A visibility token of one's own, with the right filters, is refused before the server sees it
    # (the dev server failed on one, and the client retried it for seconds).
    made_up = {"t": base64.b64encode(b"not a visibility token").decode(), "s": 0, "f": RunFilter().fingerprint()}
    encoded = base64.urlsafe_b64encode(json.dumps(made_up).encode()).decode()
    for cursor in (encoded, encoded + "." + first["next"].partition(".")[2]):
        forged = await http.get("/api/runs", params={"cursor": cursor})
        assert forged.status_code == 400 and "not one this console gave" in forged.json()["detail"]
