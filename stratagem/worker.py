"""Building and running a Stratagem worker: the run workflow and the activities of the roles it
serves, one Temporal worker per role in one process (`WorkerGroup`)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from temporalio.client import Client
from temporalio.runtime import Runtime
from temporalio.service import RPCError
from temporalio.worker import Interceptor, Worker

from stratagem.activities import activities_by_role
from stratagem.client import AWAITING_QUERY, REGISTER_STATUS_HINT, connect, ensure_status_attribute
from stratagem.common.config import Settings
from stratagem.common.errors import ConfigError
from stratagem.common.signing import DecisionPolicy
from stratagem.common.telemetry import configure_tracing, flush_telemetry, metrics_runtime
from stratagem.domain.process import PROCESS_SEARCH_ATTRIBUTE
from stratagem.domain.roles import ALL_ROLES, QueueLayout, Role, default_layout, role_queue
from stratagem.domain.run_types import STATUS_SEARCH_ATTRIBUTE
from stratagem.domain.secret_bindings import unbound_secrets
from stratagem.io.store import OutputStore
from stratagem.status_attribute import REGISTER_PROCESS_HINT, has_process_attribute
from stratagem.temporal.interceptors import SharedQueues
from stratagem.temporal.plugin import StratagemPlugin, worker_plugins
from stratagem.tools import ToolRegistry
from stratagem.tools.builtin import protect_address
from stratagem.worker_options import WorkerOptions
from stratagem.workflows import StandingApprovals, StratagemRun

logger = logging.getLogger(__name__)

# How many of the steps a workflow task starts at once come back with its completion, to run
# here at once (eager activities), on a worker serving every role. The SDK's default is 3: a
# step fanning out to 16 branches started 3 at once and the rest a poll each, 25-35 ms apart
# from first to last on the dev server; with 16, all within a few ms (bench: parallelism).
EAGER_ACTIVITIES = 16
# How many payloads of a workflow task the SDK hands to external storage at once. Above 1, it
# visits every payload of every activation and completion in a task of its own, even with no
# external storage configured (Stratagem's claim checks are a codec: stratagem.io.payloads); one at
# a time, that pass costs nothing. A completion with a step's input and summary: 71 -> 46 us.
SEQUENTIAL_STORAGE = 1


class WorkerGroup:
    """One Temporal worker per role, in one process, run and stopped together. Used like a
    `Worker`: `async with group:` or `await group.run()`."""

    def __init__(self, workers: dict[Role, Worker]):
        self.workers = workers

    @property
    def roles(self) -> list[Role]:
        return list(self.workers)

    async def __aenter__(self) -> WorkerGroup:
        started: list[Worker] = []
        try:
            for worker in self.workers.values():
                await worker.__aenter__()
                started.append(worker)
        except BaseException:
            await asyncio.gather(*(w.__aexit__(None, None, None) for w in started), return_exceptions=True)
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        await asyncio.gather(*(w.__aexit__(exc_type, exc, traceback) for w in self.workers.values()))

    async def run(self) -> None:
        """Run until `shutdown()`; if one worker fails, stop the others and raise its error."""
        tasks = [asyncio.create_task(w.run()) for w in self.workers.values()]
        done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        if pending:
            await self.shutdown()
            await asyncio.wait(pending)
        for task in tasks:
            task.result()

    async def shutdown(self) -> None:
        await asyncio.gather(*(w.shutdown() for w in self.workers.values() if w.is_running), return_exceptions=True)


def build_worker(
    client: Client,
    *,
    task_queue: str,
    registry: ToolRegistry,
    workspace: Path,
    max_concurrent_activities: int | None = None,
    store: OutputStore | None = None,
    roles: Sequence[Role] = ALL_ROLES,
    layout: QueueLayout | None = None,
    rate_limits: Mapping[Role, float] | None = None,
    decision_policy: DecisionPolicy | None = None,
    extra_workflows: Sequence[type] = (),
    extra_activities: Sequence[Callable[..., Any]] = (),
    **worker_options: Any,
) -> WorkerGroup:
    """Workers for `roles` of the runs whose workflows run on `task_queue` (each role on its own
    queue: stratagem/domain/roles.py). `layout` says where the runs this worker drives send their
    activities; by default shared when it serves every role, split otherwise. `rate_limits` caps
    a role's activities per second across every worker of its queue (Temporal enforces it on the
    server), e.g. to stay within a provider's quota. `extra_*` join the workflow role's worker
    (benchmarks register baselines there).

    A shared worker still polls the role queues: activities that runs of split workers, or runs
    from before, scheduled there must find a worker."""
    roles = list(dict.fromkeys(roles))
    layout = layout or default_layout(roles)
    if layout is QueueLayout.shared and set(roles) != set(ALL_ROLES):
        raise ConfigError("a shared queue layout needs a worker that serves every role; drop --role or the layout")
    protect_address(client.service_client.config.target_host)  # steps may never call it (http_request)
    # A malformed STRATAGEM_SECRET_*_HOSTS is refused now, not at a step's request.
    if unbound := unbound_secrets():
        logger.warning(
            "secrets bound to no host, which steps may not use: %s; set STRATAGEM_SECRET_<NAME>_HOSTS to the hosts "
            "each may be sent to",
            ", ".join(unbound),
        )
    # The keys a run's standing approval is verified with: the ones its decisions are checked with.
    plugged = (p.decision_policy for p in client.config().get("plugins", []) if isinstance(p, StratagemPlugin))
    policy = decision_policy or next((p for p in plugged if p is not None), None)
    by_role = activities_by_role(registry, workspace, store, roles, policy)
    limits = rate_limits or {}
    extra_interceptors = list(worker_options.pop("interceptors", []))
    workers: dict[Role, Worker] = {}
    for role in roles:
        is_workflow = role is Role.workflow
        interceptors: list[Interceptor] = []
        options = dict(worker_options)
        if is_workflow and layout is QueueLayout.shared:
            interceptors.append(SharedQueues())
            options.setdefault("max_eager_activity_reservations_per_workflow_task", EAGER_ACTIVITIES)
        if is_workflow and client.data_converter.external_storage is None:
            options.setdefault("max_workflow_task_external_storage_concurrency", SEQUENTIAL_STORAGE)
        workers[role] = Worker(
            client,
            task_queue=role_queue(task_queue, role),
            workflows=[StratagemRun, StandingApprovals, *extra_workflows] if is_workflow else [],
            activities=[*by_role[role], *(extra_activities if is_workflow else ())],
            max_concurrent_activities=max_concurrent_activities,
            max_task_queue_activities_per_second=limits.get(role),
            interceptors=[*interceptors, *extra_interceptors],
            # How the workflow runs, decision checks, tracing (stratagem.temporal.plugin), unless the client has them.
            plugins=worker_plugins(client, decision_policy),
            **options,
        )
    return WorkerGroup(workers)


# glibc gives each thread that allocates under contention an arena of its own, up to eight per
# core, and memory freed in one arena serves no other. Workflow tasks run on a pool of threads,
# and a long plan's continue-as-new reads and writes megabytes from whichever thread runs it. On
# the 10,000-step bench (long_horizon) the worker's peak resident memory was 168 and 168 MiB with
# glibc's default, 142-158 with two arenas and 144-154 with one, at the same wall time (the
# Python code holds the GIL, so threads seldom allocate at once). MALLOC_ARENA_MAX in the
# environment still decides, as glibc documents.
MALLOC_ARENAS = 1
_M_ARENA_MAX = -8  # mallopt's parameter number, from glibc's malloc.h


def limit_malloc_arenas(arenas: int = MALLOC_ARENAS) -> bool:
    """Cap glibc's malloc arenas for this process, before its threads start. True if it took
    effect; False on another C library, or when MALLOC_ARENA_MAX is set."""
    if os.environ.get("MALLOC_ARENA_MAX") or not sys.platform.startswith("linux"):
        return False
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.mallopt(_M_ARENA_MAX, arenas))
    except (OSError, AttributeError):  # musl and others have no mallopt
        return False


async def run_worker(
    settings: Settings, options: WorkerOptions | None = None, decision_policy: DecisionPolicy | None = None
) -> None:
    """Serve `options.roles` until SIGTERM or SIGINT, with traces and metrics where the OTEL_*
    environment asks. `decision_policy`: the keys decisions are checked against (default: the
    configured ones and the home's, stratagem.common.signing)."""
    options = options or WorkerOptions()
    limit_malloc_arenas()
    tool_modules = options.tools
    registry = ToolRegistry.from_modules(list(tool_modules))
    configure_tracing()
    runtime = metrics_runtime()
    client = await connect(settings, runtime=runtime)
    has_status = await ensure_status_attribute(client)
    if not has_status:
        logger.warning(
            "namespace %s has no %s search attribute and this worker may not add it: runs will not appear in "
            "`stratagem list --status awaiting-approval`; register it with `%s --namespace %s`",
            settings.namespace,
            STATUS_SEARCH_ATTRIBUTE,
            REGISTER_STATUS_HINT,
            settings.namespace,
        )
    elif not await has_process_attribute(client):  # registered with StratagemStatus; a server may refuse one
        logger.warning(
            "namespace %s has no %s search attribute: `stratagem list --process` reads every run's memo; "
            "register it with `%s --namespace %s`",
            settings.namespace,
            PROCESS_SEARCH_ATTRIBUTE,
            REGISTER_PROCESS_HINT,
            settings.namespace,
        )
    worker = build_worker(
        client,
        task_queue=settings.task_queue,
        registry=registry,
        workspace=settings.workspace,
        roles=options.roles,
        layout=options.layout,
        rate_limits=options.rate_limits,
        max_concurrent_activities=options.max_concurrent,
        decision_policy=decision_policy,
    )
    gauge = asyncio.create_task(_count_waiting_runs(client, runtime)) if runtime is not None and has_status else None
    try:
        await _run_until_signalled(worker)
    finally:
        if gauge is not None:
            gauge.cancel()
        await registry.aclose()  # MCP sessions: the stdio servers this worker started stop
        flush_telemetry()


async def _count_waiting_runs(client: Client, runtime: Runtime) -> None:
    """Publish `stratagem_runs_awaiting_approval`: the runs of the namespace waiting for a person,
    counted by a visibility query every STRATAGEM_INBOX_POLL_SECONDS (30). Every worker publishes
    the same namespace-wide figure; dashboards take the maximum."""
    gauge = runtime.metric_meter.create_gauge(
        "stratagem_runs_awaiting_approval", "Runs in the namespace waiting for a person (approval, answer, budget)."
    )
    interval = float(os.environ.get("STRATAGEM_INBOX_POLL_SECONDS") or 30)
    while True:
        try:
            gauge.set((await client.count_workflows(AWAITING_QUERY)).count)
        except RPCError as exc:  # the server is away for a moment: keep the last figure
            logger.debug("cannot count runs awaiting approval: %s", exc)
        await asyncio.sleep(interval)


async def _run_until_signalled(worker: WorkerGroup) -> None:
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
