"""Rendering a run of a process: its inputs checked, its nominal time read in the run's time
zone, its plan written (stratagem/domain/process.py). An activity because the time zone's rules
come from the machine's zone database, which the workflow may not read."""

from __future__ import annotations

from zoneinfo import ZoneInfo

from temporalio import activity

from stratagem.domain import activity_io
from stratagem.domain.process import (
    ProcessRecord,
    render_goal,
    render_plan,
    run_values,
    spec_problems,
)


@activity.defn(name=activity_io.PREPARE_PROCESS)
async def prepare_process(request: activity_io.ProcessInput) -> activity_io.PreparedProcess:
    process, spec = request.process, request.process.spec
    # The process is checked again here: a start through the plain Temporal client skipped the
    # checks the command line makes.
    final, problems = run_values(spec, process.inputs, request.nominal, process.time_zone)
    problems = spec_problems(spec) + problems
    if problems:
        return activity_io.PreparedProcess(goal=spec.goal, problems=problems)
    record = ProcessRecord(
        name=spec.name,
        version=spec.version,
        digest=spec.digest,
        inputs=final,
        schedule=process.schedule,
        nominal=request.nominal.astimezone(ZoneInfo(process.time_zone)),
        time_zone=process.time_zone,
    )
    return activity_io.PreparedProcess(goal=render_goal(spec, final), plan=render_plan(spec, final), record=record)
