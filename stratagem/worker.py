"""Building and running a Stratagem worker: the run workflow plus the planning and execution activities."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from pathlib import Path
from typing import Sequence

from temporalio.client import Client
from temporalio.runtime import Runtime
from temporalio.service import RPCError
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from .client import REGISTER_STATUS_HINT, connect, ensure_status_attribute
from .run import AWAITING_APPROVAL, STATUS_SEARCH_ATTRIBUTE, WORKFLOW_NAME
from .config import Settings
from .store import OutputStore
from .telemetry import configure_tracing, flush_telemetry, metrics_runtime, worker_plugins
from .tools import ToolRegistry

logger = logging.getLogger(__name__)

# Pure modules the workflow imports. Passing them through the sandbox keeps one copy of the
# pydantic models (and their validators) instead of re-importing them per workflow task.
PASSTHROUGH_MODULES = (
    "stratagem", "jsonschema", "jsonschema_specifications", "referencing", "rpds", "yaml", "attrs", "opentelemetry",
)


def workflow_runner() -> SandboxedWorkflowRunner:
    return SandboxedWorkflowRunner(restrictions=SandboxRestrictions.default.with_passthrough_modules(*PASSTHROUGH_MODULES))


def build_worker(
    client: Client,
    *,
    task_queue: str,
    registry: ToolRegistry,
    workspace: Path,
    max_concurrent_activities: int | None = None,
    store: OutputStore | None = None,
) -> Worker:
    from activities import build_activities
    from workflows import StratagemRun

    return Worker(
        client,
        task_queue=task_queue,
        workflows=[StratagemRun],
        activities=build_activities(registry, workspace, store),
        workflow_runner=workflow_runner(),
        max_concurrent_activities=max_concurrent_activities,
        # Tracing, when a replay-safe tracer provider is installed (stratagem.telemetry).
        plugins=worker_plugins(),
    )


async def run_worker(settings: Settings, tool_modules: Sequence[str] = ()) -> None:
    """Serve runs until cancelled, with traces and metrics where the OTEL_* environment asks."""
    registry = ToolRegistry.from_modules(list(tool_modules))
    configure_tracing()
    runtime = metrics_runtime()
    client = await connect(settings, runtime=runtime)
    has_status = await ensure_status_attribute(client)
    if not has_status:
        logger.warning(
            "namespace %s has no %s search attribute and this worker may not add it: runs will not appear in "
            "`stratagem list --status awaiting-approval`; register it with `%s --namespace %s`",
            settings.namespace, STATUS_SEARCH_ATTRIBUTE, REGISTER_STATUS_HINT, settings.namespace,
        )
    worker = build_worker(client, task_queue=settings.task_queue, registry=registry, workspace=settings.workspace)
    gauge = asyncio.create_task(_count_waiting_runs(client, runtime)) if runtime is not None and has_status else None
    try:
        await _run_until_signalled(worker)
    finally:
        if gauge is not None:
            gauge.cancel()
        flush_telemetry()


async def _count_waiting_runs(client: Client, runtime: Runtime) -> None:
    """Publish `stratagem_runs_awaiting_approval`: the runs of the namespace waiting for a person,
    counted by a visibility query every STRATAGEM_INBOX_POLL_SECONDS (30). Every worker publishes
    the same namespace-wide figure; dashboards take the maximum."""
    gauge = runtime.metric_meter.create_gauge(
        "stratagem_runs_awaiting_approval", "Runs in the namespace waiting for a person (approval, answer, budget)."
    )
    query = (
        f"WorkflowType = '{WORKFLOW_NAME}' AND ExecutionStatus = 'Running' "
        f"AND {STATUS_SEARCH_ATTRIBUTE} = '{AWAITING_APPROVAL}'"
    )
    interval = float(os.environ.get("STRATAGEM_INBOX_POLL_SECONDS") or 30)
    while True:
        try:
            gauge.set((await client.count_workflows(query)).count)
        except RPCError as exc:  # the server is away for a moment: keep the last figure
            logger.debug("cannot count runs awaiting approval: %s", exc)
        await asyncio.sleep(interval)


async def _run_until_signalled(worker: Worker) -> None:
    """Run the worker until SIGTERM or SIGINT (`docker stop`, a supervisor, Ctrl-C), then shut it
    down: polling stops and the spans still buffered are exported before the process leaves."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for number in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(number, stop.set)
        except (NotImplementedError, RuntimeError, ValueError):  # Windows, or not the main thread
            pass
    running = asyncio.create_task(worker.run())
    stopping = asyncio.create_task(stop.wait())
    await asyncio.wait({running, stopping}, return_when=asyncio.FIRST_COMPLETED)
    if not running.done():
        await worker.shutdown()
    stopping.cancel()
    await running  # a worker that failed raises here
