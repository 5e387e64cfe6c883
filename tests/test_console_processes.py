"""The console's Processes page and Start form (issue #40, item 7), against the dev server and a
real worker: the library read from the console's own folder (a broken file shown, not hidden),
real Temporal Schedules paused, resumed and triggered from the page, and runs started from the
form. The attacks are real HTTP requests, each proving nothing started (no workflow on the
harness's task queue) or nothing changed (the schedule's own state on the server).
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import unquote_plus

import httpx
import pytest
import yaml
from conftest import harness_for
from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleIntervalSpec,
    ScheduleSpec,
)
from test_console_attacks import browser, serving, sign_in

from stratagem.client import get_run, run_input_of
from stratagem.common.signing import Signer
from stratagem.console import AuthMode, IdentityConfig, Users, create_app
from stratagem.domain.process import ProcessRun
from stratagem.domain.run_types import WORKFLOW_NAME, Phase, RunInput
from stratagem.domain.schedule_rules import ScheduleSource
from stratagem.io.plan_files import load_process_file
from stratagem.schedules import ScheduleRequest, ScheduleTiming, create_schedule, describe_schedule

pytestmark = pytest.mark.system

SCRIPT = "<script>alert(1)</script>"
VENDOR = {
    "process": {"name": "vendor-onboarding", "version": "2", "description": "Onboard one vendor, with its payment."},
    "inputs": {
        "vendor": {"type": "string", "title": "Vendor name", "description": "As on the contract."},
        "tier": {"enum": ["gold", "silver"]},
        "amount": {"type": "number", "minimum": 0, "maximum": 5000, "default": 100},
    },
    "goal": "Onboard ${inputs.vendor}",
    "steps": [
        {
            "id": "register",
            "title": "Register ${inputs.vendor} (${inputs.tier})",
            "tool": "record",
            "args": {"label": "${inputs.vendor} ${inputs.amount}"},
        }
    ],
}


def library(folder: Path) -> Path:
    """A process folder: vendor-onboarding in versions 1 and 2, research (which plans from its
    goal), and a file that does not load."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vendor-2.yaml").write_text(yaml.safe_dump(VENDOR, sort_keys=False))
    older = {**VENDOR, "process": {**VENDOR["process"], "version": "1"}}
    (folder / "vendor-1.yaml").write_text(yaml.safe_dump(older, sort_keys=False))
    (folder / "broken.yaml").write_text("goal: [unclosed\n")
    research = {
        "process": {"name": "research"},
        "inputs": {"topic": {"type": "string"}},
        "goal": "Research ${inputs.topic}",
    }
    (folder / "research.yaml").write_text(yaml.safe_dump(research))  # no steps: it plans from its goal
    return folder


def console(harness: Any, folder: Path, key: Signer) -> Any:
    users = Users()
    users.set_password("dana", "correct horse")
    identity = IdentityConfig(mode=AuthMode.users, secret=b"processes-test", users=users)
    return create_app(
        harness.client,
        identity,
        signer=key,
        store=harness.store,
        task_queue=harness.task_queue,
        process_folders=[folder],
    )


async def workflows_on(client: Client, task_queue: str, settle: float = 1.5) -> list[str]:
    """The runs on a task queue, once visibility has had time to list any that started."""
    await asyncio.sleep(settle)
    return [w.id async for w in client.list_workflows(f"TaskQueue = '{task_queue}'")]


async def schedule(
    client: Client,
    task_queue: str,
    run: RunInput | None,
    workflow: str = WORKFLOW_NAME,
    spec: ScheduleSpec | None = None,
) -> str:
    """A real schedule, every hour unless `spec` says otherwise: a Stratagem one (its action runs a
    process), or another's."""
    schedule_id = f"sched-{uuid.uuid4().hex[:8]}"
    args = [run] if run is not None else ["something else"]
    action = ScheduleActionStartWorkflow(workflow, args=args, id=f"{schedule_id}-wf", task_queue=task_queue)
    spec = spec or ScheduleSpec(intervals=[ScheduleIntervalSpec(every=timedelta(hours=1))])
    await client.create_schedule(schedule_id, Schedule(action=action, spec=spec))
    return schedule_id


@pytest.fixture
async def world(dev_env, tmp_path, monkeypatch):
    key = Signer.generate("console")
    monkeypatch.setenv("STRATAGEM_ISSUER_KEYS", key.public_line())
    monkeypatch.setenv("STRATAGEM_PROCESSES", "")
    async with harness_for(dev_env, tmp_path) as harness:
        folder = library(tmp_path / "processes")
        async with serving(console(harness, folder, key)) as base:
            cookie, csrf = await sign_in(base, "dana", "correct horse")
            yield harness, base, cookie, csrf, folder


async def test_the_processes_page_lists_the_library_its_problems_and_schedules_to_pause_resume_and_trigger(world):
    harness, base, cookie, csrf, folder = world
    client = harness.client
    spec = load_process_file(folder / "vendor-2.yaml")
    ours = f"vendors-{uuid.uuid4().hex[:6]}"
    await create_schedule(
        client,
        ScheduleRequest(
            schedule_id=ours,
            run=RunInput(
                process=ProcessRun(
                    spec=spec, inputs={"vendor": SCRIPT, "tier": "gold"}, time_zone="Europe/Paris", schedule=ours
                ),
                started_by="erin",
            ),
            source=ScheduleSource(cron=["0 9 1 * *"], process=spec.name, created_by="erin"),
            timing=ScheduleTiming(cron=["0 9 1 * *"], time_zone="Europe/Paris"),
            task_queue=harness.task_queue,
        ),
    )
    plain = RunInput(plan={"goal": "g", "steps": [{"id": "a", "title": "a", "tool": "record", "args": {"label": "x"}}]})
    a_plan = await schedule(client, harness.task_queue, plain)  # Stratagem's, of no process: listed apart
    foreign = await schedule(client, "elsewhere", None, "OtherWorkflow")  # not Stratagem's at all
    unreadable = await schedule(client, "elsewhere", None)  # Stratagem's workflow, an input no run has
    async with browser(base, cookie) as http:
        for _ in range(60):  # schedules reach the list a moment after they are made
            page = await http.get("/processes")
            if all(s in page.text for s in (ours, a_plan, unreadable)):
                break
            await asyncio.sleep(0.25)
        assert page.status_code == 200
        html = page.text
        assert "vendor-onboarding" in html and "Onboard one vendor, with its payment." in html
        assert spec.digest[:12] in html and "v2" in html and "v1" in html
        assert "Vendor name" in html and "As on the contract." in html and "gold, silver" in html
        assert "broken.yaml" in html and "Not loaded" in html  # shown, not hidden
        process_section = html[html.index('data-process="vendor-onboarding"') :]
        assert ours in process_section and "cron &#39;0 9 1 * *&#39; (Europe/Paris)" in html
        assert process_section.count("<time") >= 3  # its next run times
        assert a_plan in html.split("Schedules of plans")[1]
        assert f"schedule &#39;{unreadable}&#39; starts a run this console cannot read" in html
        assert foreign not in html  # another's schedule is not the console's to show
        assert SCRIPT not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
        api = (await http.get("/api/processes")).json()
        assert [p["name"] for p in api["processes"]] == ["research", "vendor-onboarding"]
        listed = api["processes"][1]
        assert [v["version"] for v in listed["versions"]] == ["2", "1"]
        assert [s["id"] for s in listed["schedules"]] == [ours] and listed["schedules"][0]["next_times"]
        assert any("broken.yaml" in p for p in api["problems"]) and any(unreadable in p for p in api["problems"])

        paused = await http.post(f"/schedules/{ours}/pause", data={"csrf": csrf})
        assert paused.status_code == 303 and "paused" in paused.headers["location"]
        state = (await client.get_schedule_handle(ours).describe()).schedule.state
        assert state.paused and state.note == "paused in the console by dana"
        assert "Resume" in (await http.get("/processes")).text
        resumed = await http.post(f"/schedules/{ours}/resume", data={"csrf": csrf})
        assert resumed.status_code == 303
        assert not (await client.get_schedule_handle(ours).describe()).schedule.state.paused
        triggered = await http.post(f"/schedules/{ours}/trigger", data={"csrf": csrf})
        assert triggered.status_code == 303 and "triggered" in triggered.headers["location"]
        [started] = [r.run_id for r in (await describe_schedule(client, ours)).recent]
        assert f"run {started} started" in unquote_plus(triggered.headers["location"])
        run = get_run(client, started)
        harness.runs.append(run)
        status = await harness.wait_for(run, lambda s: s.phase is Phase.awaiting_approval)
        assert status.process is not None and status.process.schedule == ours
        assert status.process.inputs == {"vendor": SCRIPT, "tier": "gold", "amount": 100}
        run_page = (await http.get(f"/runs/{started}")).text
        assert f"schedule <code>{ours}</code>" in run_page and "(Europe/Paris)" in run_page

        # Not the console's to act on: refused, and the schedule is as it was.
        for other, why in ((foreign, "is not a Stratagem schedule"), (unreadable, "this console cannot read")):
            for action in ("pause", "trigger"):
                refused = await http.post(f"/schedules/{other}/{action}", data={"csrf": csrf})
                assert refused.status_code == 404 and why in refused.text
                api_refused = await http.post(f"/api/schedules/{other}/{action}", headers={"X-Stratagem-CSRF": csrf})
                assert api_refused.status_code == 404
            description = await client.get_schedule_handle(other).describe()
            assert not description.schedule.state.paused and description.info.num_actions == 0
        missing = await http.post("/schedules/no-such-schedule/pause", data={"csrf": csrf})
        assert missing.status_code == 404 and "no schedule called" in missing.text
        # A schedule of ours still needs the person's CSRF token and the console's own page.
        assert (await http.post(f"/schedules/{ours}/pause", data={})).status_code == 403
    async with httpx.AsyncClient(base_url=base, cookies={"stratagem_session": cookie}) as bare:
        forged = await bare.post(
            f"/schedules/{ours}/pause", data={"csrf": csrf}, headers={"Origin": "https://evil.example"}
        )
        assert forged.status_code == 403
    assert not (await client.get_schedule_handle(ours).describe()).schedule.state.paused
    for schedule_id in (ours, a_plan, foreign, unreadable):
        await client.get_schedule_handle(schedule_id).delete()


async def test_forged_or_wrong_start_requests_start_nothing(world):
    harness, base, cookie, csrf, _ = world
    good = {"input.vendor": "Acme", "input.tier": "gold", "input.amount": "100", "version": "2"}
    async with httpx.AsyncClient(base_url=base, headers={"Origin": base}) as nobody:
        assert (await nobody.post("/processes/vendor-onboarding/start", data={**good, "csrf": csrf})).status_code in (
            303,
            401,
        )  # to the login form: not signed in
        assert (await nobody.post("/api/processes/vendor-onboarding/start", json={"inputs": {}})).status_code == 401
    async with browser(base, cookie) as http:
        assert (await http.post("/processes/vendor-onboarding/start", data=good)).status_code == 403  # no CSRF
        assert (
            await http.post("/processes/vendor-onboarding/start", data={**good, "csrf": "forged"})
        ).status_code == 403
        headers = {"X-Stratagem-CSRF": csrf}
        assert (
            await http.post("/api/processes/vendor-onboarding/start", json={"inputs": {"vendor": "A", "tier": "gold"}})
        ).status_code == 403  # the API's ambient credentials need the header too
        unknown = await http.post("/processes/payroll/start", data={**good, "csrf": csrf})
        assert unknown.status_code == 404 and "no process called 'payroll'" in unknown.text
        old = await http.post("/processes/vendor-onboarding/start", data={**good, "csrf": csrf, "version": "7"})
        assert old.status_code == 404 and "has no version '7'" in old.text
        extra = await http.post(
            "/processes/vendor-onboarding/start", data={**good, "csrf": csrf, "input.approver": "me"}
        )
        assert extra.status_code == 422 and "has no input &#39;approver&#39;" in extra.text
        wrong = await http.post(
            "/processes/vendor-onboarding/start", data={**good, "csrf": csrf, "input.amount": "lots"}
        )
        assert wrong.status_code == 422 and "&#39;lots&#39; is not a number" in wrong.text
        assert 'value="Acme"' in wrong.text  # the rest as typed
        bad_api = [
            {"inputs": {"vendor": "A", "tier": "gold", "approver": "me"}},
            {"inputs": {"vendor": "A", "tier": "gold", "amount": "100"}},
            {"inputs": {"vendor": "A", "tier": "platinum"}},
            {"inputs": {"vendor": "A"}},
            {"inputs": {"vendor": "A", "tier": "gold"}, "version": "7"},
        ]
        for body in bad_api:
            answer = await http.post("/api/processes/vendor-onboarding/start", json=body, headers=headers)
            assert answer.status_code in (404, 422), (body, answer.text)
        # A process that plans from its goal needs a planner, which this console was not given.
        assert 'id="no-planner"' in (await http.get("/processes/research/start")).text
        planless = await http.post("/processes/research/start", data={"csrf": csrf, "input.topic": "tides"})
        assert planless.status_code == 422 and "needs a planner model" in planless.text
        changed = await http.post(
            "/processes/vendor-onboarding/start", data={**good, "csrf": csrf, "digest": "ab" * 32}
        )
        assert changed.status_code == 409 and "changed since this form was shown" in changed.text
    assert await workflows_on(harness.client, harness.task_queue) == []


async def listed(http: httpx.AsyncClient, path: str, run_id: str) -> str:
    """A listing page once visibility lists the run (a moment after it starts)."""
    for _ in range(80):
        text = (await http.get(path)).text
        if run_id in text:
            return text
        await asyncio.sleep(0.25)
    raise AssertionError(f"{path} never listed {run_id}")


async def test_a_run_started_from_the_form_is_the_persons_and_its_inputs_are_text_on_every_page(world):
    harness, base, cookie, csrf, folder = world
    spec = load_process_file(folder / "vendor-2.yaml")
    form = {"csrf": csrf, "version": "2", "digest": spec.digest, "input.vendor": SCRIPT, "input.tier": "gold"}
    escaped = "&lt;script&gt;alert(1)&lt;/script&gt;"
    async with browser(base, cookie) as http:
        refused = await http.post("/processes/vendor-onboarding/start", data={**form, "input.amount": "-1"})
        assert refused.status_code == 422 and "less than the minimum of 0" in refused.text
        assert SCRIPT not in refused.text and escaped in refused.text
        started = await http.post("/processes/vendor-onboarding/start", data={**form, "input.amount": "250"})
        assert started.status_code == 303, started.text
        run_id = started.headers["location"].removeprefix("/runs/")
        run = get_run(harness.client, run_id)
        harness.runs.append(run)
        await harness.wait_for(run, lambda s: s.phase is Phase.awaiting_approval)
        page = (await http.get(f"/runs/{run_id}")).text
        assert "vendor-onboarding v2" in page and spec.digest[:12] in page and ">250<" in page
        for text in (page, await listed(http, "/runs", run_id), await listed(http, "/", run_id)):
            assert SCRIPT not in text and escaped in text
        assert SCRIPT not in (await http.get("/processes")).text

        by_api = await http.post(
            "/api/processes/vendor-onboarding/start",
            json={"inputs": {"vendor": "Globex", "tier": "silver"}, "digest": spec.digest},
            headers={"X-Stratagem-CSRF": csrf},
        )
        assert by_api.status_code == 201, by_api.text
        second = get_run(harness.client, by_api.json()["run_id"])
        harness.runs.append(second)
    first = await run_input_of(harness.client, run)
    assert first.started_by == "dana" and first.process is not None
    assert first.process.spec.digest == spec.digest
    assert first.process.inputs == {"vendor": SCRIPT, "tier": "gold", "amount": 250}
    assert (await run_input_of(harness.client, second)).started_by == "dana"
    status = await harness.wait_for(second, lambda s: s.phase is Phase.awaiting_approval)
    assert status.goal == "Onboard Globex"
    assert sorted(await workflows_on(harness.client, harness.task_queue)) == sorted([run_id, second.id])
