"""The monthly report ships a schedule (issue #40, item 6): the command docs/processes.md gives,
run as written from the repository, creates it; the run for 1 November 2025 (06:00 in Berlin)
reports October 2025 from the example's own exports, end to end."""

from __future__ import annotations

import re
import shlex
import uuid
from datetime import UTC, datetime

import pytest
from conftest import cli_environment, harness_for
from support.cli import ROOT, acli
from test_examples import Example, drive
from test_schedules_cli import schedules
from test_schedules_standing import month_run

from stratagem.domain.run_types import Phase

pytestmark = pytest.mark.system


def documented_command() -> list[str]:
    """The schedule command in docs/processes.md's "Schedules" section, as a shell would split it."""
    section = (ROOT / "docs" / "processes.md").read_text().split("## Schedules", 1)[1]
    block = re.search(r"```\n(stratagem schedule create .*?)\n```", section, re.S)
    assert block is not None, "docs/processes.md's Schedules section shows no schedule create command"
    return shlex.split(block.group(1).replace("\\\n", " "))


async def test_the_documented_monthly_report_schedule_reports_the_month_before(dev_env, tmp_path):
    example = Example("monthly_report")
    command = documented_command()
    assert command[:4] == ["stratagem", "schedule", "create", "monthly-report"]
    assert "examples/monthly_report/plan.yaml" in command and "month=${nominal.previous_month}" in command
    schedule_id = f"monthly-report-{uuid.uuid4().hex[:6]}"  # the documented id, made unique for the test
    async with harness_for(dev_env, tmp_path, example.registry()) as harness, schedules(harness) as made:
        env = {**cli_environment(dev_env, harness, tmp_path / "home"), "CLI_CWD": str(ROOT)}
        made.append(schedule_id)
        created = await acli(*command[1:3], schedule_id, *command[4:], env=env)
        assert created.returncode == 0, created.stderr
        assert "monthly-report v1, cron '0 6 1 * *' (Europe/Berlin)" in created.stdout

        run = await month_run(harness, schedule_id, datetime(2025, 11, 1, 5, tzinfo=UTC))
        status, _ = await drive(run, example.answers)
        assert status.phase is Phase.succeeded, status.reason
        assert status.goal == "Publish the 2025-10 operations report"
        report = (harness.workspace / "reports" / "operations-2025-10.md").read_text()
        assert report.startswith("# Operations report, October 2025\n")
        assert "| **Total** | **EUR 58,225.00** | 100.0% |" in report
