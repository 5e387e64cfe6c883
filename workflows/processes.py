"""A run of a process, at its start: the plan rendered from the process and its inputs, at the
time the run is for. Workflow code: deterministic, no I/O (the rendering is an activity).

The nominal time is the schedule's (Temporal sets TemporalScheduledStartTime on the runs a
Schedule starts), else the run's own start; both are in the history, so a replay reads the same.
"""

from __future__ import annotations

from datetime import datetime

from temporalio import workflow
from temporalio.common import SearchAttributeKey

with workflow.unsafe.imports_passed_through():
    from stratagem.domain import activity_io
    from stratagem.domain.ledger import EventKind
    from stratagem.domain.ledger_events import ProcessRendered
    from stratagem.domain.process import ProcessRun, describe_inputs
    from stratagem.domain.roles import Role
    from stratagem.domain.run_types import RunState

from .activity_options import PREPARE_RETRY, PREPARE_TIMEOUT
from .core import queue

SCHEDULED_START = SearchAttributeKey.for_datetime("TemporalScheduledStartTime")


def nominal_time() -> datetime:
    scheduled = workflow.info().typed_search_attributes.get(SCHEDULED_START)
    return scheduled if scheduled is not None else workflow.info().start_time


async def render(process: ProcessRun) -> activity_io.PreparedProcess:
    return await workflow.execute_activity(
        activity_io.PREPARE_PROCESS,
        activity_io.ProcessInput(process=process, nominal=nominal_time()),
        task_queue=queue(Role.workflow),
        result_type=activity_io.PreparedProcess,
        start_to_close_timeout=PREPARE_TIMEOUT,
        retry_policy=PREPARE_RETRY,
        summary=f"render {process.spec.label}"[:200],
    )


def record(state: RunState, prepared: activity_io.PreparedProcess) -> None:
    """Keep what the run renders, and say it in the ledger: which process, which version, what inputs."""
    process = prepared.record
    assert process is not None
    state.process = process
    state.goal = prepared.goal
    data = ProcessRendered(
        process=process.name,
        version=process.version,
        digest=process.digest,
        inputs=process.inputs,
        schedule=process.schedule,
        nominal=process.nominal.isoformat() if process.nominal else None,
    )
    message = f"{process.label}" + (f" with {describe_inputs(process.inputs)}" if process.inputs else "")
    state.ledger.record(EventKind.process_rendered, workflow.now(), message=message, data=data)
    # The start's memo has the goal before rendering (a schedule's action cannot know it).
    workflow.upsert_memo({"goal": state.goal, "process": {"name": process.name, "version": process.version}})
