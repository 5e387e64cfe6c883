"""Starting runs of a process from Python: what `stratagem run` does with a process, and what bulk
runs, schedules and the console build on.

    spec = stratagem.load_process_file("month_end.yaml")         # or ProcessLibrary.from_env().get(NAME)
    run = await stratagem.start_process(client, spec, {"month": "2026-10"}, task_queue="stratagem")

Every problem with the inputs (an unknown name, a missing required input, a value outside its
schema, a `${nominal.X}` that does not exist) is found before anything starts, and raised together
as one `InputsRefusedError`. The run renders its plan itself, at its start, from the process and
the values as given (`ProcessRun`); the checks here render it the same way, at this moment.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from temporalio.client import Client

from stratagem.client import RunHandle, start_run
from stratagem.common.errors import StratagemError
from stratagem.common.signing import input_digest
from stratagem.domain.plan import PlanDraft
from stratagem.domain.process import ProcessRun, ProcessSpec, render_plan, run_values
from stratagem.domain.run_types import RunInput, RunOptions


class InputsRefusedError(StratagemError):
    """A process's inputs do not check: `problems` lists each; the message holds them all in one line."""

    def __init__(self, spec: ProcessSpec, problems: list[str]):
        super().__init__(f"{spec.label} refused its inputs: " + "; ".join(problems))
        self.problems = problems


def preview(
    spec: ProcessSpec, inputs: Mapping[str, Any], *, time_zone: str = "UTC", now: datetime | None = None
) -> tuple[dict[str, Any], PlanDraft | None]:
    """The values a run given `inputs` would take if it started `now` (default: this moment), and
    the plan it would render (None for a process that plans from its goal). InputsRefusedError
    lists every problem."""
    values, problems = run_values(spec, inputs, now or datetime.now(UTC), time_zone)
    if problems:
        raise InputsRefusedError(spec, problems)
    return values, render_plan(spec, values)


def process_run_id(spec: ProcessSpec, values: Mapping[str, Any]) -> str:
    """A run id that is the same for the same process, version and values, and for nothing else:
    `NAME-<12 hex>`. Bulk runs start each row under it, so starting the same rows again starts none."""
    digest = input_digest({"process": spec.name, "version": spec.version, "inputs": dict(values)})
    return f"{spec.name}-{digest[:12]}"


async def start_process(
    client: Client,
    spec: ProcessSpec,
    inputs: Mapping[str, Any] | None = None,
    *,
    task_queue: str,
    options: RunOptions | None = None,
    run_id: str | None = None,
    started_by: str | None = None,
    time_zone: str = "UTC",
    once: bool = False,
    **start: Any,
) -> RunHandle:
    """Start a run of `spec` with `inputs` (typed values; `coerce_input` types a command line's
    text). Checked first (`preview`): nothing starts if any input is wrong. `once=True`: an id a
    run already had (running or closed) is refused with RunAlreadyStartedError rather than
    started again, as bulk runs with `process_run_id` want. The rest is `start_run`'s (memo,
    rpc_timeout, signer, keyring, signed_at)."""
    given = dict(inputs or {})
    preview(spec, given, time_zone=time_zone)
    run = RunInput(
        process=ProcessRun(spec=spec, inputs=given, time_zone=time_zone),
        started_by=started_by,
        options=options or RunOptions(),
    )
    return await start_run(client, run, task_queue=task_queue, run_id=run_id, reuse_id=not once, **start)
