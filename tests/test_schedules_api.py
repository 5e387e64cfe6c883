"""stratagem.schedules from Python, as the console calls it (issue #40, item 4): what it lists,
what it refuses to treat as a Stratagem schedule, and a schedule it cannot read."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import pytest
from support.plans import step
from temporalio.client import Schedule, ScheduleActionStartWorkflow, ScheduleSpec, ScheduleState

from stratagem.client import get_run
from stratagem.domain.plan import Author, AuthorKind, PlanDraft
from stratagem.domain.run_types import WORKFLOW_NAME, RunInput
from stratagem.domain.schedule_rules import ScheduleSource
from stratagem.schedules import (
    ScheduleNotFound,
    ScheduleRequest,
    Timing,
    create_schedule,
    delete_schedule,
    describe_schedule,
    list_schedules,
    pause_schedule,
    trigger_schedule,
    unpause_schedule,
)

pytestmark = pytest.mark.system


async def test_the_console_lists_pauses_and_triggers_stratagem_schedules_and_no_others(dev_harness):
    client = dev_harness.client
    mine, other, unreadable = (f"{name}-{uuid.uuid4().hex[:6]}" for name in ("api", "other", "unreadable"))
    plan = PlanDraft(goal="api schedule", steps=[step("a", "record", label="from the api")])
    request = ScheduleRequest(
        schedule_id=mine,
        run=RunInput(plan=plan, author=Author(kind=AuthorKind.human, name="erin"), started_by="erin"),
        source=ScheduleSource(cron=["15 3 * * *"], created_by="erin"),
        timing=Timing(cron=["15 3 * * *"], time_zone="Asia/Tokyo", jitter=timedelta(minutes=5)),
        task_queue=dev_harness.task_queue,
        overlap="buffer-one",
        note="nightly",
    )
    view = await create_schedule(client, request)
    # Another workflow's schedule, and one that claims to start runs with a payload no Stratagem wrote.
    spec = ScheduleSpec(cron_expressions=["0 0 1 1 *"])
    await client.create_schedule(
        other, Schedule(action=ScheduleActionStartWorkflow("Other", id=other, task_queue="x"), spec=spec)
    )
    await client.create_schedule(
        unreadable,
        Schedule(
            action=ScheduleActionStartWorkflow(WORKFLOW_NAME, {"not": "a run"}, id=unreadable, task_queue="x"),
            spec=spec,
            state=ScheduleState(paused=True),
        ),
    )
    try:
        assert (view.timing.time_zone, view.overlap, view.note) == ("Asia/Tokyo", "buffer-one", "nightly")
        assert view.timing.jitter == timedelta(minutes=5) and view.what == "api schedule"
        with pytest.raises(ScheduleNotFound, match="is not a Stratagem schedule"):
            await describe_schedule(client, other)
        for _ in range(100):  # visibility is eventually consistent
            listed = {v.id: v for v in await list_schedules(client)}
            if mine in listed and unreadable in listed:
                break
            await asyncio.sleep(0.1)
        assert other not in listed and not any(i.startswith("stratagem-preview") for i in listed)
        assert listed[unreadable].run is None and listed[unreadable].what == "?"  # listed, not a crash
        assert listed[mine].run is not None and listed[mine].run.plan == plan

        assert (await pause_schedule(client, mine, "maintenance")).paused
        assert not (await unpause_schedule(client, mine)).paused
        run_id, after = await trigger_schedule(client, mine)
        assert run_id is not None and run_id.startswith(f"{mine}-") and after.actions == 1
        run = get_run(client, run_id)
        dev_harness.runs.append(run)
        status = await dev_harness.wait_for(run, lambda s: s.phase.value == "awaiting_approval")
        assert status.goal == "api schedule"
    finally:
        await delete_schedule(client, mine)
        await client.get_schedule_handle(other).delete()
        await client.get_schedule_handle(unreadable).delete()
    with pytest.raises(ScheduleNotFound, match=f"no schedule called '{mine}'"):
        await pause_schedule(client, mine)
