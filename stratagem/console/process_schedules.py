"""The Temporal Schedules that start runs of processes, as the Processes page shows and acts on them.

A schedule is the console's to show and to pause, resume or trigger only when it starts the
Stratagem workflow with a RunInput that runs a process: that input's `process.spec.name` says
which process it belongs to. Anything else in the namespace (another team's schedule, one that
starts some other workflow, one whose input does not decode) is not a Stratagem schedule, and a
request naming it is refused before anything is sent to it: the schedule's id in a request is
untrusted, its description on the server is not.

This calls the Temporal client directly (list_schedules, then describe on each schedule that
starts Stratagem's workflow, at once, for its input and next times): one call per schedule.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from temporalio.client import (
    Client,
    ScheduleActionStartWorkflow,
    ScheduleDescription,
    ScheduleHandle,
    ScheduleListActionStartWorkflow,
)
from temporalio.service import RPCError, RPCStatusCode

from stratagem.domain.process import describe_inputs
from stratagem.domain.run_types import WORKFLOW_NAME, RunInput

NEXT_SHOWN = 3  # the next run times shown per schedule (Temporal computes ten)
TIMEOUT = timedelta(seconds=10)


class NotOurs(LookupError):
    """No schedule of that id, or one that does not start runs of a process: refused, not acted on."""


@dataclass
class ScheduleView:
    """One schedule of a process, as the Processes page shows it."""

    id: str
    process: str
    version: str
    digest: str
    paused: bool
    note: str
    when: str
    time_zone: str
    next_times: list[datetime] = field(default_factory=list)
    inputs: str = ""
    actions: int = 0


async def process_schedules(client: Client) -> tuple[dict[str, list[ScheduleView]], list[str]]:
    """Every Stratagem schedule in the namespace, by process name, and the problems reading them
    (a schedule that cannot be described is named, not hidden)."""
    found: dict[str, list[ScheduleView]] = {}
    problems: list[str] = []
    try:
        listing = await client.list_schedules(rpc_timeout=TIMEOUT)
        entries = [entry async for entry in listing]
    except RPCError as exc:
        return {}, [f"the schedules could not be listed: {exc.message}"]
    ids = [
        entry.id
        for entry in entries
        if isinstance(action := entry.schedule.action if entry.schedule else None, ScheduleListActionStartWorkflow)
        and action.workflow == WORKFLOW_NAME  # anything else is not one of ours: not shown at all
    ]
    described = await asyncio.gather(*(describe(client, schedule_id) for schedule_id in ids), return_exceptions=True)
    for schedule_id, view in zip(ids, described, strict=True):
        if isinstance(view, RPCError):
            problems.append(f"schedule '{schedule_id}' could not be read: {view.message}")
        elif isinstance(view, BaseException):
            if not isinstance(view, NotOurs):
                raise view
        else:
            found.setdefault(view.process, []).append(view)
    for views in found.values():
        views.sort(key=lambda v: v.id)
    return found, problems


async def describe(client: Client, schedule_id: str) -> ScheduleView:
    """The schedule as the page shows it; NotOurs unless it starts runs of a process."""
    _, description, run = await _owned(client, schedule_id)
    assert run.process is not None  # _owned says so
    spec, state = description.schedule.spec, description.schedule.state
    return ScheduleView(
        id=schedule_id,
        process=run.process.spec.name,
        version=run.process.spec.version,
        digest=run.process.spec.digest,
        paused=state.paused,
        note=state.note or "",
        when=_when(spec),
        time_zone=spec.time_zone_name or run.process.time_zone or "UTC",
        next_times=list(description.info.next_action_times[:NEXT_SHOWN]),
        inputs=describe_inputs(run.process.inputs),
        actions=description.info.num_actions,
    )


async def act(client: Client, schedule_id: str, action: str, who: str) -> str:
    """Pause, resume or trigger a Stratagem schedule, as `who`; what was done, in words. NotOurs
    for a schedule the console does not own, and ValueError for an action it does not take."""
    if action not in ACTIONS:
        raise ValueError(f"a schedule can be paused, resumed or triggered, not '{action[:40]}'")
    handle, _, run = await _owned(client, schedule_id)
    assert run.process is not None
    name = run.process.spec.label
    if action == "pause":
        await handle.pause(note=f"paused in the console by {who}", rpc_timeout=TIMEOUT)
        return f"schedule {schedule_id} ({name}) is paused: it starts no run until resumed"
    if action == "resume":
        await handle.unpause(note=f"resumed in the console by {who}", rpc_timeout=TIMEOUT)
        return f"schedule {schedule_id} ({name}) is running again"
    await handle.trigger(rpc_timeout=TIMEOUT)
    return f"schedule {schedule_id} ({name}) was triggered: a run of {name} starts now"


ACTIONS = ("pause", "resume", "trigger")


async def _owned(client: Client, schedule_id: str) -> tuple[ScheduleHandle, ScheduleDescription, RunInput]:
    handle = client.get_schedule_handle(schedule_id)
    try:
        description = await handle.describe(rpc_timeout=TIMEOUT)
    except RPCError as exc:
        if exc.status in (RPCStatusCode.NOT_FOUND, RPCStatusCode.INVALID_ARGUMENT):
            raise NotOurs(f"there is no schedule '{schedule_id[:100]}'") from None
        raise
    action = description.schedule.action
    refusal = NotOurs(
        f"schedule '{schedule_id[:100]}' does not start runs of a Stratagem process; it is not the console's"
    )
    if not isinstance(action, ScheduleActionStartWorkflow) or action.workflow != WORKFLOW_NAME or len(action.args) != 1:
        raise refusal
    try:
        [run] = await client.data_converter.decode(list(action.args), [RunInput])
    except Exception:  # an input that does not decode as a run's is not a run this console started
        raise refusal from None
    if not isinstance(run, RunInput) or run.process is None:
        raise refusal
    return handle, description, run


def _when(spec: Any) -> str:
    """The schedule's times in a few words: its cron expressions, its intervals, or its calendars."""
    parts = [f"cron {c}" for c in spec.cron_expressions]
    parts += [
        f"every {_duration(i.every)}" + (f" (offset {_duration(i.offset)})" if i.offset else "") for i in spec.intervals
    ]
    # The server keeps a cron expression as a calendar: shown as the cron it came from.
    parts += [f"cron {_cron(calendar)}" for calendar in spec.calendars]
    return ", ".join(parts) or "no times (trigger only)"


# A calendar's fields in cron's order, each with the range that means "every" (written `*`).
CRON_FIELDS = (("minute", 0, 59), ("hour", 0, 23), ("day_of_month", 1, 31), ("month", 1, 12), ("day_of_week", 0, 6))


def _cron(calendar: Any) -> str:
    fields = []
    for name, low, high in CRON_FIELDS:
        ranges = getattr(calendar, name, ()) or ()
        if all(r.start <= low and max(r.end, r.start) >= high and r.step == 1 for r in ranges):
            fields.append("*")
            continue
        fields.append(",".join(_range(r) for r in ranges))
    return " ".join(fields)


def _range(r: Any) -> str:
    text = str(r.start) if r.end <= r.start else f"{r.start}-{r.end}"
    return text + (f"/{r.step}" if r.step > 1 else "")


def _duration(value: timedelta) -> str:
    seconds = int(value.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


__all__ = ["ACTIONS", "NotOurs", "ScheduleView", "act", "describe", "process_schedules"]
