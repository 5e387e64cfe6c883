"""The approval inbox read from visibility alone (stratagem.inbox): paged with a cursor over the API,
filtered by kind, by who may decide and by age, listed whole by the CLI, and approved in bulk from
the console, each run with its own decision. Each test has a namespace of its own on the dev
server, so `total` and "every run exactly once" are about the test's runs only."""

from __future__ import annotations

import asyncio
import base64
import html as markup
import json
import os
import re
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from support.cli import acli
from support.inbox_namespace import namespace_harness
from support.plans import step

from stratagem import inbox
from stratagem.console import AuthMode, IdentityConfig, Users, create_app
from stratagem.domain.ledger import DecisionAction
from stratagem.domain.run_types import Phase

pytestmark = pytest.mark.system

ORIGIN = {"Origin": "http://console.test"}
PLAN = {"goal": "pay invoice", "steps": [step("pay", "record", label="paid")]}
QUESTION = {
    "goal": "ask terms",
    "steps": [{"id": "terms", "title": "Terms", "kind": "human", "instructions": "Payment terms?"}],
}


def console(harness: Any, user: str = "dana") -> httpx.AsyncClient:
    identity = IdentityConfig(mode=AuthMode.local, secret=b"inbox-test", users=Users(), local_user=user)
    app = create_app(harness.client, identity, store=harness.store)
    transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 50000))
    return httpx.AsyncClient(transport=transport, base_url="http://console.test", headers=ORIGIN)


async def waiting(harness: Any, runs: list[Any], count: int) -> None:
    """Every run waits, and visibility says so for all of them."""
    await asyncio.gather(*(harness.wait_for(r, lambda s: bool(s.pending)) for r in runs))
    for _ in range(150):
        query = "ExecutionStatus = 'Running' AND StratagemStatus = 'awaiting_approval'"
        if (await harness.client.count_workflows(query)).count == count:
            return
        await asyncio.sleep(0.2)
    raise AssertionError("visibility never listed every waiting run")


async def pages(http: httpx.AsyncClient, **params: Any) -> tuple[list[list[str]], int]:
    """Every page of the inbox with these filters: the run ids of each, and the total."""
    found, cursor, total = [], None, -1
    while True:
        answer = await http.get("/api/inbox", params={**params, **({"cursor": cursor} if cursor else {})})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert set(body) == {"runs", "next", "total"}
        found.append([row["run_id"] for row in body["runs"]])
        total, cursor = body["total"], body["next"]
        if cursor is None:
            return found, total


async def test_the_inbox_pages_every_waiting_run_once_filters_them_and_the_cli_lists_them_all(dev_env, tmp_path):
    async with namespace_harness(dev_env, tmp_path) as harness:
        # Older: six questions anyone may answer, and eight plans dana may approve.
        older = [await harness.start(QUESTION, auto_approve=True) for _ in range(6)]
        older += [await harness.start(PLAN, approvers=["dana"]) for _ in range(8)]
        await waiting(harness, older, 14)
        await asyncio.sleep(1.5)
        middle = datetime.now(UTC)
        await asyncio.sleep(1.5)
        # Newer: sixteen plans only erin may approve.
        newer = [await harness.start(PLAN, approvers=["erin"]) for _ in range(16)]
        await waiting(harness, older + newer, 30)
        ours = {r.id for r in older + newer}

        async with console(harness) as http:
            found, total = await pages(http, limit=10)
            assert total == 30 and [len(p) for p in found] == [10, 10, 10]
            listed = [run_id for page in found for run_id in page]
            assert sorted(listed) == sorted(ours)  # every run, each exactly once

            questions, _ = await pages(http, kind="human_answer", limit=4)
            assert sorted(sum(questions, [])) == sorted(r.id for r in older[:6])
            mine, _ = await pages(http, can_decide="true", limit=5)
            assert sorted(sum(mine, [])) == sorted(r.id for r in older)  # not erin's
            aged = (datetime.now(UTC) - middle).total_seconds()
            old, aged_total = await pages(http, older_than=aged, limit=10)
            assert sorted(sum(old, [])) == sorted(r.id for r in older) and aged_total == 14

            first = (await http.get("/api/inbox", params={"limit": 3})).json()
            row = first["runs"][0]
            assert row["waiting_for"] == ["approval of revision 1"] and row["goal"] == "pay invoice"
            assert row["waiting"][0]["deciders"] == ["erin"] and row["may_decide"] == [False]

            # Cursors: one from another filter, and one made up, are refused, never widened.
            questions_page = (await http.get("/api/inbox", params={"kind": "human_answer", "limit": 2})).json()
            other = await http.get("/api/inbox", params={"cursor": questions_page["next"], "limit": 2})
            assert other.status_code == 400 and "another filter" in other.json()["detail"]
            forged = base64.urlsafe_b64encode(b'{"v":1,"t":"2999-01-01T00:00:00+00:00","s":[],"f":"0"}').decode()
            for cursor in ("garbage!!", "", forged, "e30"):
                answer = await http.get("/api/inbox", params={"cursor": cursor} if cursor else {"cursor": "x"})
                assert answer.status_code == 400, answer.text
                assert "cursor" in answer.json()["detail"]
            unknown = await http.get("/api/inbox", params={"kind": "everything"})
            assert unknown.status_code == 400 and "unknown waiting kind" in unknown.json()["detail"]

        # The CLI reads every page of visibility (a page holds up to 1,000): here 7 at a time.
        paged = [row["run_id"] async for row in inbox.every(harness.client, page_size=7)]
        assert sorted(paged) == sorted(ours)

        env = {
            "TEMPORAL_NAMESPACE": harness.client.namespace,
            "TEMPORAL_ADDRESS": harness.client.service_client.config.target_host,
        }
        env = {**os.environ, **env, "STRATAGEM_HOME": str(tmp_path / "home")}
        every = await acli("list", "--status", "awaiting-approval", "--json", env=env)
        assert every.returncode == 0, every.stderr
        rows = json.loads(every.stdout)
        assert sorted(r["run_id"] for r in rows) == sorted(ours)  # all, not a first page
        assert [r["since"] for r in rows] == sorted(r["since"] for r in rows)  # the longest waiting first
        asked = await acli("list", "--status", "awaiting-approval", "--waiting", "human_answer", "--json", env=env)
        assert sorted(r["run_id"] for r in json.loads(asked.stdout)) == sorted(r.id for r in older[:6])
        dana = await acli("list", "--status", "awaiting-approval", "--can-decide", "dana", "--json", env=env)
        assert sorted(r["run_id"] for r in json.loads(dana.stdout)) == sorted(r.id for r in older)
        text = await acli("list", "--status", "awaiting-approval", "--limit", "5", env=env)
        assert "25 more waiting, not shown (--limit 5)" in text.stdout
        wrong = await acli("list", "--waiting", "budget", env=env)
        assert wrong.returncode == 2 and "add --status awaiting-approval" in wrong.stderr


def picks_of(html: str) -> dict[str, str]:
    """The bulk form's checkboxes, by run id."""
    values = [markup.unescape(v) for v in re.findall(r'name="pick" value="([^"]+)"', html)]
    return {json.loads(v)["run_id"]: v for v in values}


async def test_bulk_approval_approves_each_run_as_the_person_and_refuses_only_what_they_may_not(dev_env, tmp_path):
    async with namespace_harness(dev_env, tmp_path) as harness:
        dana = [await harness.start(PLAN, approvers=["dana"]) for _ in range(3)]
        erin = await harness.start(PLAN, approvers=["erin"])
        await waiting(harness, [*dana, erin], 4)
        async with console(harness) as http:
            page = await http.get("/")
            shown = picks_of(page.text)
            assert set(shown) == {r.id for r in dana}  # no checkbox where dana may not decide
            csrf = re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)
            # The pick a page would never give her: erin's run, and one bound to a revision not shown.
            forged_erin = json.dumps({"run_id": erin.id, "step_id": None, "revision": 1})
            stale = json.dumps({"run_id": dana[2].id, "step_id": None, "revision": 2})
            form: dict[str, Any] = {"pick": [shown[dana[0].id], shown[dana[1].id], forged_erin, stale]}

            no_token = await http.post("/inbox/approve", data=form)
            assert no_token.status_code == 403
            assert [(await r.status()).phase for r in [*dana, erin]] == [Phase.awaiting_approval] * 4

            done = await http.post("/inbox/approve", data={**form, "csrf": csrf, "comment": "batch 7"})
            assert done.status_code == 200
            outcomes = dict(re.findall(r'data-run="([^"]+)">.*?<td class="(done|error)">', done.text.replace("\n", "")))
            assert outcomes == {dana[0].id: "done", dana[1].id: "done", erin.id: "error", dana[2].id: "error"}
            assert "dana is not on this run&#39;s approver list (erin)" in done.text
            assert "there is no revision 2" in done.text
            assert set(picks_of(done.text)) == {dana[2].id}  # the page after leaves out what was just approved

        for run in dana[:2]:
            assert (await run.result()).status is Phase.succeeded
            [decision] = (await run.ledger()).decisions
            assert (decision.action, decision.by, decision.comment) == (DecisionAction.approve, "dana", "batch 7")
            assert decision.signed_by is not None  # signed, as the console signs every decision
        for run in (dana[2], erin):
            assert (await run.status()).phase is Phase.awaiting_approval
            assert (await run.ledger()).decisions == []
