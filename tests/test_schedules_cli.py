"""Schedules from the command line (issue #40, item 4): `stratagem schedule create|list|describe|
pause|unpause|trigger|update|delete`, each schedule a real Temporal Schedule that the plain
`temporal schedule list` shows. Schedules live on the server, so the tests trigger them rather
than wait for their times; the CLI runs as a real process against the dev server.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import uuid
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
import yaml
from support.cli import TOOLS, acli, one_line_error, write_plan
from support.plans import step
from temporalio.client import ScheduleBackfill, ScheduleOverlapPolicy

from stratagem.client import get_run
from stratagem.domain.process import NOMINAL_FIELDS
from stratagem.io.binaries import temporal_cli
from stratagem.schedules import ScheduleNotFound, delete_schedule, describe_schedule

pytestmark = pytest.mark.system

PLAN = {"goal": "record the close", "steps": [step("close", "record", label="month closed")]}
PROCESS = {
    "process": {"name": "month-close", "version": "2"},
    "inputs": {
        "month": {"type": "string", "minLength": 7, "maxLength": 7, "description": "YYYY-MM"},
        "year": {"type": "integer", "default": 2000},
    },
    "goal": "Close ${inputs.month}",
    "steps": [step("close", "record", label="closed ${inputs.month}")],
}
RUN_ID = re.compile(r"-\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


async def temporal(env: dict[str, str], *args: str) -> str:
    """The plain Temporal CLI, pointed at the test server."""
    done = await asyncio.to_thread(
        subprocess.run,
        [str(temporal_cli()), *args, "--address", env["TEMPORAL_ADDRESS"]],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


async def listed_by_temporal(env: dict[str, str], schedule_id: str, present: bool = True) -> str:
    """`temporal schedule list`, until it shows (or no longer shows) the schedule: visibility is
    eventually consistent."""
    for _ in range(100):
        out = await temporal(env, "schedule", "list")
        if (schedule_id in out) is present:
            return out
        await asyncio.sleep(0.2)
    raise AssertionError(f"temporal schedule list never {'showed' if present else 'dropped'} {schedule_id}: {out}")


@asynccontextmanager
async def schedules(harness):
    """Schedules a test creates, deleted at its end; the runs they started are the harness's, so
    they are terminated and replayed with the others."""
    made: list[str] = []
    try:
        yield made
    finally:
        for schedule_id in made:
            try:
                view = await describe_schedule(harness.client, schedule_id)
            except ScheduleNotFound:
                continue
            harness.runs += [
                get_run(harness.client, r.run_id) for r in view.recent if r.run_id not in {h.id for h in harness.runs}
            ]
            await delete_schedule(harness.client, schedule_id)


async def sched(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return await acli("schedule", *args, env=env)


async def test_a_plan_on_a_calendar_is_a_temporal_schedule_whose_trigger_starts_a_named_run(cli_env, tmp_path):
    env, harness = cli_env
    plan = write_plan(tmp_path / "plan.yaml", PLAN)
    schedule_id = new_id("close")
    async with schedules(harness) as made:
        made.append(schedule_id)
        created = await sched(
            env, "create", schedule_id, "--plan", plan, *TOOLS, "--cron", "0 6 1 * *",
            "--time-zone", "Europe/Berlin", "--note", "month-end close", "--by", "carol",
        )  # fmt: skip
        assert created.returncode == 0, created.stderr
        assert f"schedule {schedule_id} created" in created.stdout and "Europe/Berlin" in created.stdout
        assert " 06:00 CE" in created.stdout  # the next runs, in the schedule's zone
        assert "StratagemRun" in await listed_by_temporal(env, schedule_id)

        described = json.loads((await sched(env, "describe", schedule_id, "--json")).stdout)
        assert described["cron"] == ["0 6 1 * *"] and described["time_zone"] == "Europe/Berlin"
        assert described["paused"] is False and described["note"] == "month-end close"
        assert len(described["next_times"]) == 5 and described["recent"] == []
        assert all(t.endswith(("T05:00:00+00:00", "T04:00:00+00:00")) for t in described["next_times"])

        triggered = await sched(env, "trigger", schedule_id, "--json")
        assert triggered.returncode == 0, triggered.stderr
        run_id = json.loads(triggered.stdout)["run_id"]
        assert run_id.startswith(f"{schedule_id}-") and RUN_ID.search(run_id), run_id
        run = get_run(harness.client, run_id)
        harness.runs.append(run)
        await harness.wait_for(run, lambda s: s.phase.value == "awaiting_approval")
        assert harness.calls() == []  # a scheduled run waits for its review like any other
        inbox = json.loads((await acli("list", "--status", "awaiting-approval", "--json", env=env)).stdout)
        assert run_id in [r["run_id"] for r in inbox]
        assert (await acli("approve", run_id, "--by", "dana", env=env)).returncode == 0
        assert json.loads((await acli("wait", run_id, "--json", env=env)).stdout)["status"] == "succeeded"
        assert [c["label"] for c in harness.calls()] == ["month closed"]
        memo = await run.handle.describe()
        assert (await memo.memo())["schedule"] == schedule_id

        for _ in range(100):  # the run's outcome, as visibility has it (eventually consistent)
            shown = (await sched(env, "describe", schedule_id)).stdout
            if re.search(rf"{re.escape(run_id)}  for 20\S+ \S+ CE\S*  succeeded", shown):
                break
            await asyncio.sleep(0.2)
        else:
            raise AssertionError(shown)
        assert "recent runs (1 in all)" in shown

        paused = await sched(env, "pause", schedule_id, "--note", "audit week")
        assert paused.returncode == 0 and "paused" in paused.stdout
        listed = json.loads((await sched(env, "list", "--json")).stdout)
        mine = next(s for s in listed if s["id"] == schedule_id)
        assert mine["paused"] is True and mine["note"] == "audit week"
        told = json.loads(await temporal(env, "schedule", "describe", "--schedule-id", schedule_id, "-o", "json"))
        assert told["schedule"]["state"]["paused"] is True
        assert (await sched(env, "unpause", schedule_id)).returncode == 0
        assert json.loads((await sched(env, "describe", schedule_id, "--json")).stdout)["paused"] is False

        updated = await sched(env, "update", schedule_id, "--every", "2h", "--overlap", "allow-all", "--json")
        assert updated.returncode == 0, updated.stderr
        now = json.loads(updated.stdout)
        assert now["cron"] == [] and now["every_seconds"] == 7200 and now["overlap"] == "allow-all"
        assert len(now["recent"]) == 1  # an update keeps the schedule's history

        deleted = await sched(env, "delete", schedule_id)
        assert deleted.returncode == 0 and "deleted" in deleted.stdout
        await listed_by_temporal(env, schedule_id, present=False)
        for action in ("describe", "pause", "unpause", "trigger", "delete"):
            one_line_error(await sched(env, action, schedule_id), f"no schedule called '{schedule_id}'")
        one_line_error(await sched(env, "update", schedule_id, "--every", "1h"), f"no schedule called '{schedule_id}'")


async def test_a_trigger_the_overlap_policy_holds_starts_nothing_unless_told(cli_env, tmp_path):
    env, harness = cli_env
    plan = write_plan(tmp_path / "plan.yaml", PLAN)
    schedule_id = new_id("overlap")
    async with schedules(harness) as made:
        made.append(schedule_id)
        created = await sched(env, "create", schedule_id, "--plan", plan, *TOOLS, "--every", "1d", "--paused")
        assert created.returncode == 0, created.stderr
        first = json.loads((await sched(env, "trigger", schedule_id, "--json")).stdout)["run_id"]
        assert first is not None  # a paused schedule still runs when triggered
        harness.runs.append(get_run(harness.client, first))
        held = await sched(env, "trigger", schedule_id)
        assert held.returncode == 0 and "no run started" in held.stdout and first in held.stdout
        second = json.loads((await sched(env, "trigger", schedule_id, "--overlap", "allow-all", "--json")).stdout)
        assert second["run_id"] not in (None, first) and RUN_ID.search(second["run_id"])
        harness.runs.append(get_run(harness.client, second["run_id"]))


async def test_mistakes_and_attacks_are_refused_in_one_line_and_create_nothing(cli_env, tmp_path):
    env, harness = cli_env
    plan = write_plan(tmp_path / "plan.yaml", PLAN)
    process = write_plan(tmp_path / "process.yaml", PROCESS)
    schedule_id = new_id("refused")
    base = ("create", schedule_id, *TOOLS)
    cases = [
        ((*base, "--plan", plan, "--cron", "61 * * * *"), "Minute is not in range"),
        ((*base, "--plan", plan, "--cron", "0 6 1 * *", "--time-zone", "Mars/Base"), "is not an IANA time zone"),
        ((*base, "--plan", plan, "--cron", "CRON_TZ=Asia/Tokyo 0 6 * * *"), "give it with --time-zone"),
        ((*base, "--plan", plan), "say when: --cron EXPR"),
        ((*base, "--plan", plan, "--every", "5s"), "more often than once a minute"),
        ((*base, "--plan", plan, "--every", "soon"), "is not a duration"),
        ((*base, "--plan", plan, "--every", "1h", "--note", "x" * 600), "--note takes at most"),
        ((*base, "--plan", plan, "--every", "1h", "--auto-approve"), "cannot approve themselves"),
        ((*base, "--plan", plan, "--every", "1h", "--input", "month=2026-10"), "declares no inputs"),
        ((*base, "--plan", process, "--every", "1h", "--input", "month=${nominal.previus_month}"), "previus_month"),
        (
            (
                *base,
                "--plan",
                process,
                "--every",
                "1h",
                "--input",
                "month=${nominal.month}",
                "--input",
                "year=${nominal.date}",
            ),
            "input 'year'",
        ),  # fmt: skip
        ((*base, "--plan", process, "--every", "1h"), "input 'month' is required (YYYY-MM)"),
        (
            (*base, "--plan", process, "--every", "1h", "--input", "month=2026-10", "--input", "boss=me"),
            "no input 'boss'",
        ),
        ((*base, "--plan", process, "--every", "1h", "--input", "month=Oct"), "input 'month'"),
        (("create", "x" * 64, "--plan", plan, "--every", "1h"), "must be 1 to 63 letters"),
        (("create", "a b;rm -rf", "--plan", plan, "--every", "1h"), "must be 1 to 63 letters"),
        (("create", "../../x", "--plan", plan, "--every", "1h"), "must be 1 to 63 letters"),
        (("create", "x\x1b[31mred", "--plan", plan, "--every", "1h"), "must be 1 to 63 letters"),
        (("describe", "temporal-sys-scheduler:x"), "must be 1 to 63 letters"),
    ]
    async with schedules(harness) as made:
        made.append(schedule_id)
        for args, expected in cases:
            done = await sched(env, *args)
            one_line_error(done, expected)
            assert done.stderr.count("\n") == 1, done.stderr
        out = await temporal(env, "schedule", "list")
        assert schedule_id not in out and "stratagem-preview" not in out  # the previews are gone too
        # The one that fits is created, and only once.
        good = (*base, "--plan", process, "--cron", "0 6 1 * *", "--input", "month=${nominal.previous_month}")
        assert (await sched(env, *good)).returncode == 0
        one_line_error(await sched(env, *good), f"a schedule called '{schedule_id}' already exists")


async def test_a_library_process_is_scheduled_by_name_and_update_reads_its_new_version(cli_env, tmp_path):
    env, harness = cli_env
    library = tmp_path / "library"
    library.mkdir()
    write_plan(library / "month-close-2.yaml", PROCESS)
    env = {**env, "STRATAGEM_PROCESSES": str(library)}
    schedule_id = new_id("lib")
    async with schedules(harness) as made:
        made.append(schedule_id)
        created = await sched(
            env, "create", schedule_id, "month-close", *TOOLS, "--cron", "0 6 1 * *", "--time-zone", "Europe/Berlin",
            "--input", "month=${nominal.previous_month}", "--json",
        )  # fmt: skip
        assert created.returncode == 0, created.stderr
        view = json.loads(created.stdout)
        assert (view["process"], view["version"]) == ("month-close", "2")
        assert view["inputs"] == {"month": "${nominal.previous_month}"}
        listed = (await sched(env, "list")).stdout
        assert schedule_id in listed and "month-close v2" in listed

        newer = {**PROCESS, "process": {"name": "month-close", "version": "3"}}
        newer["inputs"] = {**PROCESS["inputs"], "region": {"type": "string"}}  # a new required input
        write_plan(library / "month-close-3.yaml", newer)
        one_line_error(await sched(env, "update", schedule_id, "--reload"), "input 'region' is required")
        assert json.loads((await sched(env, "describe", schedule_id, "--json")).stdout)["version"] == "2"
        updated = await sched(env, "update", schedule_id, "--reload", "--input", "region=EMEA", "--json")
        assert updated.returncode == 0, updated.stderr
        view = json.loads(updated.stdout)
        assert view["version"] == "3"
        assert view["inputs"] == {"month": "${nominal.previous_month}", "region": "EMEA"}
        back = json.loads(
            (await sched(env, "update", schedule_id, "--version", "2", "--inputs", _inputs(tmp_path), "--json")).stdout
        )
        assert back["version"] == "2" and back["inputs"] == {"month": "${nominal.month}"}
        one_line_error(await sched(env, "update", schedule_id, "--version", "9"), "has no version '9'")
        one_line_error(await sched(env, "create", new_id("x"), "no-such-process", "--every", "1h"), "no process called")


def _inputs(tmp_path: Path) -> str:
    path = tmp_path / "inputs.yaml"
    path.write_text(yaml.safe_dump({"month": "${nominal.month}"}))
    return str(path)


async def test_each_scheduled_run_of_a_process_renders_the_month_before_its_own_nominal_time(cli_env, tmp_path):
    """The monthly report's shape: `month=${nominal.previous_month}` at 00:30 Berlin time on the
    first. Backfilled for 1 March 2026 (23:30 UTC on 28 February), the run reports February, the
    month before in Berlin (in UTC it would be January); a trigger's nominal time is its own."""
    env, harness = cli_env
    process = write_plan(tmp_path / "process.yaml", PROCESS)
    schedule_id = new_id("monthly")
    async with schedules(harness) as made:
        made.append(schedule_id)
        created = await sched(
            env, "create", schedule_id, "--plan", process, *TOOLS, "--cron", "30 0 1 * *",
            "--time-zone", "Europe/Berlin", "--input", "month=${nominal.previous_month}",
        )  # fmt: skip
        assert created.returncode == 0, created.stderr
        handle = harness.client.get_schedule_handle(schedule_id)
        nominal = datetime(2026, 2, 28, 23, 30, tzinfo=UTC)
        await handle.backfill(
            ScheduleBackfill(
                start_at=nominal - timedelta(minutes=5),
                end_at=nominal + timedelta(minutes=5),
                overlap=ScheduleOverlapPolicy.ALLOW_ALL,
            )
        )
        run_id = f"{schedule_id}-2026-02-28T23:30:00Z"
        run = get_run(harness.client, run_id)
        harness.runs.append(run)
        status = await wait_started(harness, run)
        assert status.goal == "Close 2026-02"
        assert status.process is not None and status.process.inputs == {"month": "2026-02", "year": 2000}
        assert status.process.schedule == schedule_id and status.process.time_zone == "Europe/Berlin"
        assert status.process.nominal is not None and status.process.nominal.astimezone(UTC) == nominal
        assert (await acli("approve", run_id, "--by", "dana", env=env)).returncode == 0
        assert json.loads((await acli("wait", run_id, "--json", env=env)).stdout)["status"] == "succeeded"
        assert [c["label"] for c in harness.calls()] == ["closed 2026-02"]
        memo = await (await run.handle.describe()).memo()
        assert memo["schedule"] == schedule_id and memo["process"] == {"name": "month-close", "version": "2"}

        before = datetime.now(UTC)
        triggered = json.loads((await sched(env, "trigger", schedule_id, "--json")).stdout)
        run = get_run(harness.client, triggered["run_id"])
        harness.runs.append(run)
        status = await wait_started(harness, run)
        assert status.process is not None and status.process.nominal is not None
        assert abs(status.process.nominal - before) < timedelta(minutes=1)
        berlin = status.process.nominal.astimezone(ZoneInfo("Europe/Berlin"))
        assert status.process.inputs["month"] == NOMINAL_FIELDS["previous_month"](berlin)
        shown = (await sched(env, "describe", schedule_id)).stdout
        assert run_id in shown and triggered["run_id"] in shown


async def wait_started(harness, run):
    """The run once it has rendered its process and waits for its review."""
    for _ in range(300):
        try:
            status = await run.status()
        except Exception:  # not started yet: the schedule starts it a moment after the request
            await asyncio.sleep(0.1)
            continue
        if status.phase.value == "awaiting_approval":
            return status
        await asyncio.sleep(0.1)
    raise AssertionError(f"{run.id} never waited for its review")
