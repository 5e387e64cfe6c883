"""The issue's "done when" (#40), from the command line: a process on a monthly schedule with a
standing approval, seen in `temporal schedule list`, each month's run going through without a
review, and waiting for a person as soon as something changed (an input out of bounds, a new
version of the process). Months are backfilled so each run has its own nominal time."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

import pytest
from support.cli import TOOLS, acli, write_plan
from temporalio.client import ScheduleBackfill, ScheduleOverlapPolicy
from temporalio.service import RPCError
from test_schedules_cli import listed_by_temporal, new_id, sched, schedules, wait_started

from stratagem.client import get_run
from stratagem.domain.run_types import Phase

pytestmark = pytest.mark.system


def report(version: str, label: str = "report ${inputs.month}: ${inputs.amount}") -> dict:
    return {
        "process": {"name": "monthly-spend", "version": version},
        "inputs": {"month": {"type": "string"}, "amount": {"type": "number", "minimum": 0}},
        "goal": "Report spend for ${inputs.month}",
        "steps": [{"id": "report", "title": "Report ${inputs.month}", "tool": "record", "args": {"label": label}}],
    }


async def month_run(harness, schedule_id: str, nominal: datetime):
    """The schedule's run for `nominal`, as if that time had just passed."""
    await harness.client.get_schedule_handle(schedule_id).backfill(
        ScheduleBackfill(
            start_at=nominal - timedelta(minutes=1),
            end_at=nominal + timedelta(minutes=1),
            overlap=ScheduleOverlapPolicy.ALLOW_ALL,
        )
    )
    run = get_run(harness.client, f"{schedule_id}-{nominal:%Y-%m-%dT%H:%M:%SZ}")
    for _ in range(100):  # the schedule starts it a moment after the backfill request
        try:
            await run.handle.describe()
            break
        except RPCError:
            await asyncio.sleep(0.1)
    harness.runs.append(run)
    return run


async def test_a_monthly_schedule_with_a_standing_approval_runs_unreviewed_until_something_changes(cli_env, tmp_path):
    env, harness = cli_env
    path = write_plan(tmp_path / "spend.yaml", report("1"))
    schedule_id = new_id("spend")
    async with schedules(harness) as made:
        made.append(schedule_id)
        created = await sched(
            env, "create", schedule_id, "--plan", path, *TOOLS, "--cron", "0 6 1 * *", "--time-zone", "Europe/Berlin",
            "--input", "month=${nominal.previous_month}", "--input", "amount=100", "--by", "carol",
        )  # fmt: skip
        assert created.returncode == 0, created.stderr
        granted = await acli(
            "standing", "grant", path, "--bound", "amount<=500", "--schedule", schedule_id, "--id", "spend-ok",
            "--by", "dana", env=env,
        )  # fmt: skip
        assert granted.returncode == 0, granted.stderr
        await listed_by_temporal(env, schedule_id)

        # March's run (06:00 Berlin on 1 March: 05:00 UTC) reports February, approved by the grant.
        march = await month_run(harness, schedule_id, datetime(2026, 3, 1, 5, tzinfo=UTC))
        assert (await march.result()).status is Phase.succeeded
        assert [c["label"] for c in harness.calls()] == ["report 2026-02: 100"]
        [approval] = (await march.ledger()).decisions
        assert (approval.by, approval.via) == ("dana", "standing") and "spend-ok" in approval.comment

        # April's spend is out of bounds: the run waits for a person, who is told why.
        assert (await sched(env, "update", schedule_id, "--input", "amount=9000")).returncode == 0
        april = await month_run(harness, schedule_id, datetime(2026, 4, 1, 4, tzinfo=UTC))  # CEST
        status = await wait_started(harness, april)
        assert "amount=9000 is outside the bound amount<=500" in (status.pending[0].standing or "")
        assert len(harness.calls()) == 1
        assert (await acli("approve", april.id, "--by", "lee", env=env)).returncode == 0
        assert (await april.result()).status is Phase.succeeded

        # A new version of the process, reloaded into the schedule: not what dana approved.
        write_plan(tmp_path / "spend.yaml", report("2", label="report ${inputs.month}: ${inputs.amount} EUR"))
        reloaded = await sched(env, "update", schedule_id, "--reload", "--input", "amount=100", "--json")
        assert json.loads(reloaded.stdout)["version"] == "2", reloaded.stderr
        may = await month_run(harness, schedule_id, datetime(2026, 5, 1, 4, tzinfo=UTC))
        status = await wait_started(harness, may)
        assert "approves monthly-spend v1; this run is v2" in (status.pending[0].standing or "")
        assert [c["label"] for c in harness.calls()] == ["report 2026-02: 100", "report 2026-03: 9000"]


async def test_schedule_create_grants_the_standing_approval_in_the_same_command(cli_env, tmp_path):
    env, harness = cli_env
    path = write_plan(tmp_path / "spend.yaml", report("1"))
    schedule_id = new_id("spend")
    timing = ["--cron", "0 6 1 * *", "--input", "month=${nominal.previous_month}", "--input", "amount=100"]
    async with schedules(harness) as made:
        # A bound that cannot be is refused before anything is made: no schedule without its approval.
        refused = await sched(
            env, "create", schedule_id, "--plan", path, *TOOLS, *timing, "--by", "dana",
            "--standing-approval", "--bound", "amount~5",
        )  # fmt: skip
        assert refused.returncode == 2 and "amount~5" in refused.stderr and "Traceback" not in refused.stderr
        assert schedule_id not in (await sched(env, "list")).stdout

        made.append(schedule_id)
        created = await sched(
            env, "create", schedule_id, "--plan", path, *TOOLS, *timing, "--by", "dana",
            "--standing-approval", "--bound", "amount<=500",
        )  # fmt: skip
        assert created.returncode == 0, created.stderr
        assert "granted monthly-spend." in created.stdout + created.stderr
        march = await month_run(harness, schedule_id, datetime(2026, 3, 1, 6, tzinfo=UTC))
        assert (await march.result()).status is Phase.succeeded
        [approval] = (await march.ledger()).decisions
        assert (approval.by, approval.via) == ("dana", "standing")
        listed = await acli("standing", "list", "monthly-spend", env=env)
        assert f"schedule {schedule_id}" in listed.stdout or schedule_id in listed.stdout, listed.stdout
