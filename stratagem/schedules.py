"""Schedules: a plan or a process put on a calendar, each a real Temporal Schedule.

A schedule's action starts the run workflow (WORKFLOW_NAME) on the task queue it was created
for, with the RunInput it was created with: a plain plan, or a process and the inputs as given
(`${nominal.X}` texts expanded by each run from its nominal time). Temporal names each run by
the schedule's id and the run's nominal time (`monthly-report-2026-12-01T05:00:00Z`), so a run
is never started twice for one time, and the plain `temporal schedule list` and the Temporal
Web UI show every schedule.

What the schedule was made from (the cron text as written, the process's name or plan file, its
tools) is kept in the action's memo under SOURCE_MEMO: the schedule's own memo cannot be changed
after it is created, the action's can. Each run's memo thus also says which schedule started it.

The command line (`stratagem schedule`, stratagem.cli.schedules) and the console call these.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from datetime import datetime
from typing import Any

from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionExecutionStartWorkflow,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleDescription,
    ScheduleHandle,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleState,
    ScheduleUpdate,
    ScheduleUpdateInput,
)
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes
from temporalio.service import RPCError, RPCStatusCode

from stratagem.common.errors import StratagemError
from stratagem.domain.run_types import RUN_LEVEL, STATUS_SEARCH_ATTRIBUTE, WORKFLOW_NAME, RunInput
from stratagem.domain.schedule_rules import (
    OVERLAP_POLICIES,
    ScheduledRun,
    ScheduleRequest,
    ScheduleSource,
    ScheduleView,
    Timing,
    schedule_id_problem,
    scheduled_goal,
)
from stratagem.status_attribute import STATUS_KEY

SOURCE_MEMO = "schedule_source"
PROCESS_SEARCH_ATTRIBUTE = "StratagemProcess"
PROCESS_KEY = SearchAttributeKey.for_keyword(PROCESS_SEARCH_ATTRIBUTE)
OVERLAP = {name: ScheduleOverlapPolicy[name.upper().replace("-", "_")] for name in OVERLAP_POLICIES}
OVERLAP_NAME = {policy: name for name, policy in OVERLAP.items()}
# The paused stand-in `preview_times` creates to ask the server when a spec fires: never started.
PREVIEW_WORKFLOW = "StratagemSchedulePreview"


class ScheduleError(StratagemError):
    """A schedule request the server or the rules refuse; one line, said plainly."""


class ScheduleNotFound(ScheduleError):
    pass


def temporal_spec(timing: Timing) -> ScheduleSpec:
    return ScheduleSpec(
        cron_expressions=list(timing.cron),
        intervals=[ScheduleIntervalSpec(every=timing.every)] if timing.every else [],
        time_zone_name=timing.time_zone,
        jitter=timing.jitter,
    )


def _refused(exc: RPCError, schedule_id: str) -> StratagemError | RPCError:
    if exc.status is RPCStatusCode.NOT_FOUND:
        return ScheduleNotFound(f"no schedule called '{schedule_id[:64]}' (`stratagem schedule list` shows them)")
    if exc.status is RPCStatusCode.INVALID_ARGUMENT:
        return ScheduleError(f"Temporal refused schedule '{schedule_id[:64]}': {exc.message}")
    return exc


async def preview_times(client: Client, timing: Timing, count: int = 5) -> list[datetime]:
    """The next `count` times `timing` fires, as the server computes them (its cron dialect,
    time zones and daylight saving), asked of a paused stand-in schedule deleted at once. A spec
    the server refuses (`--cron '61 * * * *'`) is a ScheduleError saying why."""
    probe = f"stratagem-preview-{uuid.uuid4().hex[:12]}"
    schedule = Schedule(
        action=ScheduleActionStartWorkflow(PREVIEW_WORKFLOW, id=probe, task_queue=f"{probe}-never"),
        spec=temporal_spec(timing),
        state=ScheduleState(paused=True, note="a preview of a schedule's times, deleted at once"),
    )
    try:
        handle = await client.create_schedule(probe, schedule)
    except RPCError as exc:
        if exc.status is RPCStatusCode.INVALID_ARGUMENT:
            raise ScheduleError(f"{timing.describe()}: {exc.message}") from None
        raise
    try:
        description = await handle.describe()
    finally:
        await handle.delete()
    return list(description.info.next_action_times[:count])


async def _custom_attributes(client: Client) -> set[str]:
    try:
        response = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=client.namespace)
        )
    except RPCError:
        return set()
    return set(response.custom_attributes)


async def _action(client: Client, request: ScheduleRequest) -> ScheduleActionStartWorkflow:
    run = request.run
    attributes = await _custom_attributes(client)
    pairs: list[SearchAttributePair[Any]] = []
    if STATUS_SEARCH_ATTRIBUTE in attributes:
        run = run.model_copy(update={"options": run.options.model_copy(update={"status_search_attribute": True})})
        pairs.append(SearchAttributePair(STATUS_KEY, "planning"))
    if run.process is not None and PROCESS_SEARCH_ATTRIBUTE in attributes:
        pairs.append(SearchAttributePair(PROCESS_KEY, run.process.spec.name))
    if run.level == 0:
        run = run.model_copy(update={"level": RUN_LEVEL})
    goal = scheduled_goal(run)
    memo: dict[str, Any] = {"goal": goal, "schedule": request.schedule_id}
    if run.process is not None:
        # As the run writes it once rendered (workflows/processes.py).
        memo["process"] = {"name": run.process.spec.name, "version": run.process.spec.version}
    if run.options.approvers is not None:
        memo["approvers"] = list(run.options.approvers)  # as start_run's memo: the console's "I can decide"
    memo[SOURCE_MEMO] = request.source.model_dump(mode="json", exclude_defaults=True)
    return ScheduleActionStartWorkflow(
        WORKFLOW_NAME,
        run,
        # Temporal appends each run's nominal time: run ids derive from the schedule and its time.
        id=request.schedule_id,
        task_queue=request.task_queue,
        memo=memo,
        typed_search_attributes=TypedSearchAttributes(pairs),
        static_summary=f"Stratagem: {goal}"[:400],
    )


async def _schedule(client: Client, request: ScheduleRequest) -> Schedule:
    return Schedule(
        action=await _action(client, request),
        spec=temporal_spec(request.timing),
        policy=SchedulePolicy(overlap=OVERLAP[request.overlap], catchup_window=request.catchup_window),
        state=ScheduleState(paused=request.paused, note=request.note),
    )


async def create_schedule(client: Client, request: ScheduleRequest) -> ScheduleView:
    try:
        await client.create_schedule(request.schedule_id, await _schedule(client, request))
    except ScheduleAlreadyRunningError:
        raise ScheduleError(
            f"a schedule called '{request.schedule_id}' already exists; change it with "
            f"`stratagem schedule update {request.schedule_id}` or delete it first"
        ) from None
    except RPCError as exc:
        raise _refused(exc, request.schedule_id) from None
    return await describe_schedule(client, request.schedule_id)


async def _view(client: Client, schedule_id: str, description: ScheduleDescription) -> ScheduleView:
    action = description.schedule.action
    run: RunInput | None = None
    source = ScheduleSource()
    task_queue = ""
    if isinstance(action, ScheduleActionStartWorkflow):
        task_queue = action.task_queue
        # A schedule this client cannot read (another key encrypted it, a newer Stratagem wrote
        # it) is still listed, with what it runs unknown, rather than breaking the whole list.
        with contextlib.suppress(Exception):
            if action.workflow == WORKFLOW_NAME and action.args:
                [run] = await client.data_converter.decode(list(action.args), [RunInput])
            raw = (action.memo or {}).get(SOURCE_MEMO)
            if raw is not None:  # a Payload, as the server keeps the action
                [decoded] = await client.data_converter.decode([raw])
                source = ScheduleSource.model_validate(decoded)
    spec = description.schedule.spec
    every = spec.intervals[0].every if spec.intervals else None
    cron = source.cron or ([] if not spec.calendars else ["(calendar)"])
    info = description.info
    return ScheduleView(
        id=schedule_id,
        paused=description.schedule.state.paused,
        note=description.schedule.state.note or "",
        timing=Timing(cron=cron, every=every, time_zone=spec.time_zone_name or "UTC", jitter=spec.jitter),
        overlap=OVERLAP_NAME.get(description.schedule.policy.overlap, "skip"),
        catchup_window=description.schedule.policy.catchup_window,
        source=source,
        run=run,
        task_queue=task_queue,
        next_times=list(info.next_action_times[:5]),
        recent=[
            ScheduledRun(result.action.workflow_id, result.scheduled_at, result.started_at)
            for result in info.recent_actions
            if isinstance(result.action, ScheduleActionExecutionStartWorkflow)
        ],
        running=[a.workflow_id for a in info.running_actions if isinstance(a, ScheduleActionExecutionStartWorkflow)],
        actions=info.num_actions,
        skipped=info.num_actions_skipped_overlap,
    )


def _handle(client: Client, schedule_id: str) -> ScheduleHandle:
    return client.get_schedule_handle(schedule_id)


async def _describe(client: Client, schedule_id: str) -> ScheduleDescription:
    try:
        return await _handle(client, schedule_id).describe()
    except RPCError as exc:
        raise _refused(exc, schedule_id) from None


async def describe_schedule(client: Client, schedule_id: str) -> ScheduleView:
    """One schedule of Stratagem's; ScheduleNotFound for an unknown id or another workflow's."""
    description = await _describe(client, schedule_id)
    action = description.schedule.action
    if not isinstance(action, ScheduleActionStartWorkflow) or action.workflow != WORKFLOW_NAME:
        raise ScheduleNotFound(
            f"schedule '{schedule_id[:64]}' is not a Stratagem schedule (it starts no Stratagem run)"
        )
    return await _view(client, schedule_id, description)


async def list_schedules(client: Client) -> list[ScheduleView]:
    """Every schedule in the namespace that starts Stratagem runs, by id. (Visibility is
    eventually consistent: a schedule created a moment ago may be missing for a second.)"""
    ids = [
        listed.id
        async for listed in await client.list_schedules()
        if listed.schedule is not None and getattr(listed.schedule.action, "workflow", None) == WORKFLOW_NAME
    ]
    limit = asyncio.Semaphore(8)

    async def one(schedule_id: str) -> ScheduleView | None:
        async with limit:
            try:
                return await describe_schedule(client, schedule_id)
            except ScheduleNotFound:  # deleted since it was listed
                return None

    views = await asyncio.gather(*(one(i) for i in sorted(ids)))
    return [view for view in views if view is not None]


async def pause_schedule(client: Client, schedule_id: str, note: str | None = None) -> ScheduleView:
    await describe_schedule(client, schedule_id)
    await _handle(client, schedule_id).pause(note=note or "paused with `stratagem schedule pause`")
    return await describe_schedule(client, schedule_id)


async def unpause_schedule(client: Client, schedule_id: str, note: str | None = None) -> ScheduleView:
    await describe_schedule(client, schedule_id)
    await _handle(client, schedule_id).unpause(note=note or "unpaused with `stratagem schedule unpause`")
    return await describe_schedule(client, schedule_id)


async def delete_schedule(client: Client, schedule_id: str) -> None:
    """Delete the schedule; runs it started go on."""
    await describe_schedule(client, schedule_id)
    try:
        await _handle(client, schedule_id).delete()
    except RPCError as exc:
        raise _refused(exc, schedule_id) from None


async def trigger_schedule(
    client: Client, schedule_id: str, overlap: str | None = None, *, wait: float = 10.0
) -> tuple[str | None, ScheduleView]:
    """Start the schedule's action now (paused or not; `overlap` overrides its policy for this
    one). Returns the new run's id once the server has started it, or None if the overlap policy
    skipped or buffered it (or it took longer than `wait` seconds), with the schedule as it then is."""
    before = await describe_schedule(client, schedule_id)
    known = {r.run_id for r in before.recent} | set(before.running)
    await _handle(client, schedule_id).trigger(overlap=OVERLAP[overlap] if overlap else None)
    deadline = asyncio.get_running_loop().time() + wait
    while True:
        view = await describe_schedule(client, schedule_id)
        started = [r.run_id for r in view.recent if r.run_id not in known]
        if started:
            return started[-1], view
        if view.skipped > before.skipped or asyncio.get_running_loop().time() > deadline:
            return None, view
        await asyncio.sleep(0.2)


async def replace_schedule(client: Client, request: ScheduleRequest) -> ScheduleView:
    """Update a schedule to `request` (its spec, policy, action and state), keeping its history."""
    await describe_schedule(client, request.schedule_id)
    schedule = await _schedule(client, request)

    def updated(_: ScheduleUpdateInput) -> ScheduleUpdate:
        return ScheduleUpdate(schedule=schedule)

    try:
        await _handle(client, request.schedule_id).update(updated)
    except RPCError as exc:
        raise _refused(exc, request.schedule_id) from None
    return await describe_schedule(client, request.schedule_id)


async def schedule_runs(client: Client, schedule_id: str, limit: int = 10) -> list[dict[str, Any]]:
    """The runs the schedule started, newest first, each with where it is (`phase`, as the run
    writes it in its memo, else its execution status): Temporal's TemporalScheduledById, so runs
    of a schedule deleted and created again under the same id are found too."""
    if schedule_id_problem(schedule_id):
        return []
    query = f"WorkflowType = '{WORKFLOW_NAME}' AND TemporalScheduledById = '{schedule_id}'"
    runs: list[dict[str, Any]] = []
    async for execution in client.list_workflows(query, limit=limit):
        status = execution.status.name.lower() if execution.status else "unknown"
        try:
            phase = (await execution.memo()).get("phase", status)
        except Exception:  # a memo this client cannot decode
            phase = status
        runs.append(
            {
                "run_id": execution.id,
                "phase": status if status in ("terminated", "timed_out", "canceled") else phase,
                "started_at": execution.start_time.isoformat() if execution.start_time else None,
            }
        )
    return runs


def request_of(view: ScheduleView) -> ScheduleRequest:
    """What recreates the schedule as it is: the starting point of an update."""
    if view.run is None:
        raise ScheduleError(f"schedule '{view.id}' starts a run this version of Stratagem cannot read")
    return ScheduleRequest(
        schedule_id=view.id,
        run=view.run,
        source=view.source,
        timing=Timing(
            cron=list(view.source.cron),
            every=view.timing.every,
            time_zone=view.timing.time_zone,
            jitter=view.timing.jitter,
        ),
        task_queue=view.task_queue,
        overlap=view.overlap,
        catchup_window=view.catchup_window,
        paused=view.paused,
        note=view.note or None,
    )
