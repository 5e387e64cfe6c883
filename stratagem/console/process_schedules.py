"""The schedules the Processes page shows and acts on, through stratagem.schedules (the Temporal
Schedules `stratagem schedule` makes and reads).

A schedule is Stratagem's when its action starts the Stratagem workflow (stratagem.schedules
decides, from the server's description, never from the request); it belongs to the process its
action's RunInput runs (`process.spec.name`), and a plain plan's schedule is listed apart. Any
other schedule in the namespace (another team's, another workflow's) is neither shown nor acted
on: a request naming it is refused (NotOurs) before anything is sent to it, as is one whose
input this console cannot read (it could not say what a trigger would start).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from temporalio.client import Client
from temporalio.service import RPCError

from stratagem.common.errors import StratagemError
from stratagem.domain.process import describe_inputs
from stratagem.domain.schedule_rules import ScheduleView
from stratagem.schedules import (
    ScheduleNotFound,
    describe_schedule,
    list_schedules,
    pause_schedule,
    trigger_schedule,
    unpause_schedule,
)

NEXT_SHOWN = 3  # the next run times shown per schedule
ACTIONS = ("pause", "resume", "trigger")
TRIGGER_WAIT = 5.0  # seconds a trigger waits to name the run it started


class NotOurs(LookupError):
    """No schedule of that id, or not one this console may act on: refused, nothing sent to it."""


@dataclass
class ScheduleRow:
    """One schedule as the Processes page shows it."""

    id: str
    what: str
    process: str | None
    paused: bool
    note: str
    when: str
    next_times: list[datetime] = field(default_factory=list)
    inputs: str = ""
    actions: int = 0

    @classmethod
    def of(cls, view: ScheduleView) -> ScheduleRow:
        return cls(
            id=view.id,
            what=view.what,
            process=view.process,
            paused=view.paused,
            note=view.note,
            when=view.timing.describe(),
            next_times=[_local(t, view.timing.time_zone) for t in view.next_times[:NEXT_SHOWN]],
            inputs=describe_inputs(view.inputs),
            actions=view.actions,
        )


def _local(moment: datetime, zone: str) -> datetime:
    """A run time as the schedule reads it (09:00 CET, not 08:00 UTC); UTC for a zone not known here."""
    try:
        return moment.astimezone(ZoneInfo(zone))
    except (ZoneInfoNotFoundError, ValueError):
        return moment


async def process_schedules(client: Client) -> tuple[dict[str, list[ScheduleRow]], list[ScheduleRow], list[str]]:
    """Stratagem's schedules: those of each process by its name, the rest (plain plans), and the
    problems (the list failing, a schedule whose run this console cannot read), named, not hidden."""
    try:
        views = await list_schedules(client)
    except (RPCError, StratagemError) as exc:
        return {}, [], [f"the schedules could not be listed: {getattr(exc, 'message', None) or exc}"]
    by_process: dict[str, list[ScheduleRow]] = {}
    others: list[ScheduleRow] = []
    problems: list[str] = []
    for view in views:
        if view.run is None:
            problems.append(
                f"schedule '{view.id}' starts a run this console cannot read (another key, a newer version)"
            )
            continue
        row = ScheduleRow.of(view)
        if row.process is None:
            others.append(row)
        else:
            by_process.setdefault(row.process, []).append(row)
    return by_process, others, problems


async def act(client: Client, schedule_id: str, action: str, who: str) -> str:
    """Pause, resume or trigger one of Stratagem's schedules, as `who`; what was done, in words.
    NotOurs for any other schedule, ValueError for an action the console does not take."""
    if action not in ACTIONS:
        raise ValueError(f"a schedule can be paused, resumed or triggered, not '{action[:40]}'")
    try:
        view = await describe_schedule(client, schedule_id)
    except ScheduleNotFound as exc:
        raise NotOurs(f"{exc}; the console acts only on Stratagem's schedules") from None
    if view.run is None:
        raise NotOurs(f"schedule '{schedule_id[:64]}' starts a run this console cannot read; it is left as it is")
    what = view.what
    if action == "pause":
        await pause_schedule(client, schedule_id, note=f"paused in the console by {who}")
        return f"schedule {schedule_id} ({what}) is paused: it starts no run until resumed"
    if action == "resume":
        await unpause_schedule(client, schedule_id, note=f"resumed in the console by {who}")
        return f"schedule {schedule_id} ({what}) is running again"
    started, _ = await trigger_schedule(client, schedule_id, wait=TRIGGER_WAIT)
    if started is None:
        return f"schedule {schedule_id} ({what}) was triggered; its overlap policy decides when the run starts"
    return f"schedule {schedule_id} ({what}) was triggered: run {started} started"


__all__ = ["ACTIONS", "NotOurs", "ScheduleRow", "act", "process_schedules"]
