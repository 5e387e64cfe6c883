"""Schedules: the rules for what a person writes when putting a plan or a process on a calendar.

A schedule's id names every run it starts (Temporal appends each run's nominal time to it), so it
is kept short and plain. Durations are written `90s`, `30m`, `1h30m`, `7d` or `2w`. A time zone is
an IANA name, checked against the zone database here rather than left for the server to refuse.

`check_scheduled_inputs` is what `stratagem schedule create` and `update` run before anything is
sent: the inputs of a process rendered as one of the schedule's runs would render them (with a
sample nominal time, the schedule's next one), so an input that only fails once it meets the
calendar (`${nominal.previus_month}`, a year typed as an integer) is refused at create, not on the
first of next month.

`ScheduleRequest` is what a schedule is made of and `ScheduleView` what is shown of one: plain
data, which stratagem.schedules turns into a Temporal Schedule and reads back.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, Field

from stratagem.domain.plan import PlanDraft
from stratagem.domain.process import ProcessSpec, check_inputs, expand_nominal, render_goal, render_plan
from stratagem.domain.run_types import RunInput

SCHEDULE_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$"
# How Temporal's schedules handle a run that would start while the one before still runs, by the
# names the command line takes (Temporal's ScheduleOverlapPolicy, lower-case, '-' for '_').
OVERLAP_POLICIES = ("skip", "buffer-one", "buffer-all", "cancel-other", "terminate-other", "allow-all")
# A schedule that starts a run more often than this is taken for a mistake (`--every 1s`): each
# run of a plan may wait for a person.
MIN_INTERVAL = timedelta(minutes=1)
MAX_CRON = 10
MAX_NOTE = 500

_DURATION_PART = re.compile(r"(\d{1,6})([smhdw])")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def schedule_id_problem(schedule_id: str) -> str | None:
    """Why `schedule_id` cannot name a schedule (and, with a time appended, its runs), or None."""
    if re.fullmatch(SCHEDULE_ID_PATTERN, schedule_id):
        return None
    shown = schedule_id[:40].encode("unicode_escape").decode() + ("..." if len(schedule_id) > 40 else "")
    return f"schedule id '{shown}' must be 1 to 63 letters, digits, '-', '_' or '.', starting with a letter or digit"


def parse_duration(text: str, what: str) -> timedelta:
    """`90s`, `30m`, `1h30m`, `7d`, `2w` (or plain seconds) as a timedelta; ValueError names `what`."""
    cleaned = text.strip().lower()
    if cleaned.isdigit() and len(cleaned) <= 9:
        seconds = int(cleaned)
    else:
        parts = _DURATION_PART.findall(cleaned)
        if not parts or "".join(n + u for n, u in parts) != cleaned:
            raise ValueError(f"{what} '{text[:40]}' is not a duration such as 90s, 30m, 1h30m, 7d or 2w")
        seconds = sum(int(number) * _UNIT[unit] for number, unit in parts)
    if seconds <= 0:
        raise ValueError(f"{what} '{text[:40]}' must be longer than zero")
    if seconds > 3660 * 86400:
        raise ValueError(f"{what} '{text[:40]}' is longer than ten years")
    return timedelta(seconds=seconds)


def describe_duration(value: timedelta) -> str:
    """A duration as `parse_duration` reads it back: `1h30m`, `7d`."""
    seconds = int(value.total_seconds())
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size:
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
    return "".join(parts) or "0s"


def time_zone_problem(name: str) -> str | None:
    """Why `name` is not an IANA time zone (Europe/Berlin, UTC), or None."""
    try:
        if not re.fullmatch(r"[A-Za-z0-9_+\-/]{1,64}", name) or name.startswith("/") or ".." in name:
            raise ValueError(name)
        ZoneInfo(name)
    except (ValueError, ZoneInfoNotFoundError):
        shown = name[:40].encode("unicode_escape").decode()
        return f"time zone '{shown}' is not an IANA time zone name (for example Europe/Berlin, America/New_York, UTC)"
    return None


def cron_problems(expressions: list[str]) -> list[str]:
    """What is wrong with cron expressions before the server reads them: too many, empty, or text a
    calendar line has no use for. The server checks the fields themselves."""
    problems: list[str] = []
    if len(expressions) > MAX_CRON:
        problems.append(f"a schedule takes at most {MAX_CRON} --cron expressions, not {len(expressions)}")
    for expression in expressions:
        if not expression.strip():
            problems.append("--cron '' is empty; write five fields such as '0 6 1 * *'")
        elif len(expression) > 200 or not expression.isprintable():
            problems.append(f"--cron '{expression[:40]}...' is not a cron expression")
        elif expression.strip().upper().startswith(("CRON_TZ=", "TZ=")):
            problems.append("--cron takes no time zone of its own; give it with --time-zone")
    return problems


class ScheduleSource(BaseModel):
    """What a schedule was made from, kept with it (in its action's memo) so that `describe` shows
    the cron text as written and `update --reload` reads the process again from the same place."""

    cron: list[str] = Field(default_factory=list)
    every_seconds: int | None = None
    process: str | None = Field(default=None, description="A library process, by name.")
    pinned_version: str | None = Field(default=None, description="The version asked for; None: the latest.")
    plan_file: str | None = Field(default=None, description="The plan or process file, as an absolute path.")
    tools: list[str] = Field(default_factory=list, description="The tool modules its plan was checked against.")
    created_by: str | None = None


def check_scheduled_inputs(
    spec: ProcessSpec, given: Mapping[str, Any], nominal: datetime, time_zone: str
) -> tuple[dict[str, Any], PlanDraft | None, list[str]]:
    """The inputs and plan of a run of `spec` at `nominal` (a sample: the schedule's next time), and
    every problem with them: unknown `${nominal.X}` fields, values that do not fit their inputs'
    schemas once expanded, required inputs left out."""
    local = nominal.astimezone(ZoneInfo(time_zone))
    expanded, problems = expand_nominal(spec, given, local)
    final, more = check_inputs(spec, expanded)
    # An input whose nominal text did not expand is reported once, not again as off-schema.
    failed = {f"input '{name}'" for name in re.findall(r"input '([^']+)'", " ".join(problems))}
    problems += [p for p in more if not any(p.startswith(prefix) for prefix in failed)]
    if problems:
        return final, None, problems
    return final, render_plan(spec, final), []


@dataclass
class Timing:
    """When a schedule fires: cron expressions and/or an interval, read in `time_zone`."""

    cron: list[str] = field(default_factory=list)
    every: timedelta | None = None
    time_zone: str = "UTC"
    jitter: timedelta | None = None

    def describe(self) -> str:
        parts = [f"cron '{c}'" for c in self.cron]
        if self.every:
            parts.append(f"every {describe_duration(self.every)}")
        return " and ".join(parts) + f" ({self.time_zone})"


@dataclass
class ScheduleRequest:
    """Everything a schedule is created (or replaced by an update) with."""

    schedule_id: str
    run: RunInput
    source: ScheduleSource
    timing: Timing
    task_queue: str
    overlap: str = "skip"
    catchup_window: timedelta | None = None
    paused: bool = False
    note: str | None = None


@dataclass
class ScheduledRun:
    run_id: str
    scheduled_at: datetime
    started_at: datetime


@dataclass
class ScheduleView:
    """One schedule as the command line and the console show it."""

    id: str
    paused: bool
    note: str
    timing: Timing
    overlap: str
    catchup_window: timedelta | None
    source: ScheduleSource
    run: RunInput | None
    task_queue: str
    next_times: list[datetime]
    recent: list[ScheduledRun]
    running: list[str]
    actions: int = 0
    skipped: int = 0

    @property
    def process(self) -> str | None:
        return self.run.process.spec.name if self.run and self.run.process else None

    @property
    def version(self) -> str | None:
        return self.run.process.spec.version if self.run and self.run.process else None

    @property
    def inputs(self) -> dict[str, Any]:
        return dict(self.run.process.inputs) if self.run and self.run.process else {}

    @property
    def what(self) -> str:
        """The process (`monthly-report v2`) or the plan file it runs (`monthly_report/plan.yaml`)."""
        if self.run and self.run.process:
            return self.run.process.spec.label
        if self.source.plan_file:
            return "/".join(Path(self.source.plan_file).parts[-2:])
        return self.run.plan.goal if self.run and self.run.plan else "?"

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "paused": self.paused,
            "note": self.note,
            "cron": self.timing.cron,
            "every_seconds": int(self.timing.every.total_seconds()) if self.timing.every else None,
            "time_zone": self.timing.time_zone,
            "jitter_seconds": int(self.timing.jitter.total_seconds()) if self.timing.jitter else None,
            "overlap": self.overlap,
            "catchup_window_seconds": int(self.catchup_window.total_seconds()) if self.catchup_window else None,
            "process": self.process,
            "version": self.version,
            "plan_file": self.source.plan_file,
            "inputs": self.inputs,
            "task_queue": self.task_queue,
            "next_times": [t.isoformat() for t in self.next_times],
            "recent": [
                {"run_id": r.run_id, "scheduled_at": r.scheduled_at.isoformat(), "started_at": r.started_at.isoformat()}
                for r in self.recent
            ],
            "running": self.running,
            "actions": self.actions,
            "skipped": self.skipped,
        }


def scheduled_goal(run: RunInput) -> str:
    """The goal a listing shows for the schedule's runs: the process's goal with the inputs as
    given (a `${nominal.X}` text stays as written), or the plan's."""
    if run.process is None:
        return run.goal or (run.plan.goal if run.plan else "")
    values, _ = check_inputs(run.process.spec, run.process.inputs)
    try:
        return render_goal(run.process.spec, values)
    except KeyError:  # a required input left out: the goal as written
        return run.process.spec.goal
