"""Building and running a Stratagem worker: the run workflow plus the planning and execution activities."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Sequence

from temporalio.client import Client
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from .client import REGISTER_STATUS_HINT, connect, ensure_status_attribute
from .run import STATUS_SEARCH_ATTRIBUTE
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
    client = await connect(settings, runtime=metrics_runtime())
    if not await ensure_status_attribute(client):
        logger.warning(
            "namespace %s has no %s search attribute and this worker may not add it: runs will not appear in "
            "`stratagem list --status awaiting-approval`; register it with `%s --namespace %s`",
            settings.namespace, STATUS_SEARCH_ATTRIBUTE, REGISTER_STATUS_HINT, settings.namespace,
        )
    worker = build_worker(client, task_queue=settings.task_queue, registry=registry, workspace=settings.workspace)
    try:
        await worker.run()
    finally:
        flush_telemetry()
