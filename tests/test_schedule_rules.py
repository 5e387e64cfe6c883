"""The rules for what a person writes when putting a plan or a process on a calendar (issue #40,
item 4): schedule ids, durations, time zones, and the inputs of a scheduled run checked with a
sample nominal time, in the schedule's time zone."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from stratagem.domain.process import ProcessSpec
from stratagem.domain.schedule_rules import (
    check_scheduled_inputs,
    cron_problems,
    describe_duration,
    parse_duration,
    schedule_id_problem,
    time_zone_problem,
)

pytestmark = pytest.mark.unit

SPEC = ProcessSpec.model_validate(
    {
        "name": "monthly-report",
        "inputs": {
            "month": {"type": "string", "minLength": 7, "maxLength": 7},
            "year": {"type": "integer", "default": 2000},
        },
        "goal": "Report ${inputs.month}",
        "steps": [
            {"id": "fetch", "title": "Fetch ${inputs.month}", "tool": "record", "args": {"label": "${inputs.month}"}}
        ],
    }
)


@pytest.mark.parametrize("good", ["monthly-report", "a", "Team_1.daily", "x" * 63])
def test_plain_short_ids_name_a_schedule(good):
    assert schedule_id_problem(good) is None


@pytest.mark.parametrize(
    "bad", ["", "x" * 64, "-leading", "has space", "a/b", "../etc", "temporal-sys-scheduler:x", "é", "a\nb", "a\x00b"]
)
def test_ids_that_would_make_odd_run_ids_are_refused_in_one_printable_line(bad):
    problem = schedule_id_problem(bad)
    assert problem is not None and "\n" not in problem and "\x00" not in problem
    assert len(problem) < 200


def test_durations_read_as_written_and_back():
    assert parse_duration("90s", "--every") == timedelta(seconds=90)
    assert parse_duration("1h30m", "--every") == timedelta(minutes=90)
    assert parse_duration("7d", "--every") == timedelta(days=7)
    assert parse_duration("2w", "--every") == timedelta(days=14)
    assert parse_duration("600", "--every") == timedelta(minutes=10)
    assert describe_duration(timedelta(minutes=90)) == "1h30m"
    for bad in ("", "1x", "h", "1h 30m", "-5m", "0m", "1.5h", "99999999d"):
        with pytest.raises(ValueError, match="--every"):
            parse_duration(bad, "--every")


def test_time_zones_are_iana_names():
    assert time_zone_problem("Europe/Berlin") is None and time_zone_problem("UTC") is None
    for bad in ("Mars/Base", "Europe/../../etc/passwd", "/etc/localtime", "", "x" * 100, "Europe/Berlin\n"):
        assert "is not an IANA time zone" in (time_zone_problem(bad) or "")


def test_cron_text_is_left_to_the_server_except_what_it_cannot_mean():
    assert cron_problems(["0 6 1 * *", "@daily"]) == []
    assert "time zone" in cron_problems(["CRON_TZ=Europe/Berlin 0 6 1 * *"])[0]
    assert "empty" in cron_problems([" "])[0]
    assert "at most" in cron_problems(["* * * * *"] * 11)[0]


def test_the_previous_month_is_read_in_the_schedules_time_zone():
    # 23:30 UTC on 30 November is already 1 December in Berlin: the month before is November there.
    nominal = datetime(2026, 11, 30, 23, 30, tzinfo=UTC)
    given = {"month": "${nominal.previous_month}"}
    values, plan, problems = check_scheduled_inputs(SPEC, given, nominal, "Europe/Berlin")
    assert problems == [] and values == {"month": "2026-11", "year": 2000}
    assert plan is not None and plan.goal == "Report 2026-11" and plan.steps[0].args == {"label": "2026-11"}
    values, _, _ = check_scheduled_inputs(SPEC, given, nominal, "UTC")
    assert values["month"] == "2026-10"


def test_inputs_that_fail_only_once_they_meet_the_calendar_are_all_reported():
    nominal = datetime(2026, 12, 1, 5, tzinfo=UTC)
    _, plan, problems = check_scheduled_inputs(
        SPEC, {"month": "${nominal.previus_month}", "year": "${nominal.month}"}, nominal, "UTC"
    )
    assert plan is None and len(problems) == 2
    assert "${nominal.previus_month}" in problems[0] and "previous_month" in problems[0]
    assert problems[1].startswith("input 'year'") and "whole number" in problems[1]
    _, _, problems = check_scheduled_inputs(SPEC, {"month": "${nominal.date}"}, nominal, "UTC")
    assert problems and "month" in problems[0]  # 2026-12-01 is longer than a month's seven characters
    _, _, problems = check_scheduled_inputs(SPEC, {}, nominal, "UTC")
    assert problems == ["input 'month' is required"]
