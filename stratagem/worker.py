"""Building and running a Stratagem worker: the run workflow plus the planning and execution activities."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Callable, Mapping, Sequence

from temporalio.client import Client
from temporalio.runtime import Runtime
from temporalio.service import RPCError
from temporalio import activity, workflow
from temporalio.exceptions import ApplicationError
from temporalio.worker import (
    ExecuteWorkflowInput,
    HandleSignalInput,
    HandleUpdateInput,
    Interceptor,
    StartActivityInput,
    StartLocalActivityInput,
    Worker,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
    WorkflowOutboundInterceptor,
)
from temporalio.worker import UnsandboxedWorkflowRunner, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from . import activity_io
from .client import AWAITING_QUERY, REGISTER_STATUS_HINT, connect, ensure_status_attribute
from .run import STATUS_SEARCH_ATTRIBUTE, DecisionInput, RunInput
from .handlers import DECISION_SIGNALS, DECISION_UPDATES
from .signing import DecisionPolicy, Verdict
from .config import Settings
from .errors import ConfigError
from .roles import ALL_ROLES, QueueLayout, Role, default_layout, is_role_queue, role_queue
from .store import OutputStore
from .telemetry import configure_tracing, flush_telemetry, metrics_runtime, worker_plugins
from .tools import ToolRegistry
from .tools.builtin import protect_address

logger = logging.getLogger(__name__)

# Pure modules the workflow imports. Passing them through the sandbox keeps one copy of the
# pydantic models (and their validators) instead of re-importing them per workflow task.
PASSTHROUGH_MODULES = (
    "stratagem", "jsonschema", "jsonschema_specifications", "referencing", "rpds", "yaml", "attrs", "opentelemetry",
    "cryptography",  # signed decisions are verified inside the workflow task (stratagem.signing)
)
# Tests set this: they run the workflow code the way the sandbox runs a user's, imported inside
# it, so a call that would make it non-deterministic (a clock, randomness, I/O) fails loudly in
# every test and every replay of a test's history, which is what the sandbox is for.
STRICT_SANDBOX_ENV = "STRATAGEM_STRICT_SANDBOX"


def workflow_runner(strict: bool | None = None) -> WorkflowRunner:
    """How a worker runs Stratagem's workflows.

    Production workers run them outside Temporal's sandbox. The sandbox re-imports a workflow's
    module for every run and routes every payload conversion through code executed inside it;
    on a long plan it was 40% of the instructions a worker spent per step (the replay of a
    200-step chain: 15.3 million per step sandboxed, 9.3 million outside; bench/README.md). What
    it guards against, a call that is not deterministic, is guarded in the tests instead:
    `strict` (default: $STRATAGEM_STRICT_SANDBOX=1, which the test suite sets) runs the workflow
    code imported inside the sandbox, as Temporal runs a user's, so every test and every replay
    of a test's history fails on such a call. The code runs the same either way."""
    if strict is None:
        strict = os.environ.get(STRICT_SANDBOX_ENV, "").strip() in ("1", "true", "yes")
    if not strict:
        return UnsandboxedWorkflowRunner()
    return SandboxedWorkflowRunner(restrictions=SandboxRestrictions.default.with_passthrough_modules(*PASSTHROUGH_MODULES))


# How many of the steps a workflow task starts at once come back with its completion, to run
# here at once (eager activities), on a worker serving every role. The SDK's default is 3: a
# step fanning out to 16 branches started 3 at once and the rest a poll each, 25-35 ms apart
# from first to last on the dev server; with 16, all within a few ms (bench: parallelism).
EAGER_ACTIVITIES = 16


class SharedQueues(Interceptor):
    """Keeps a run's activities on its workflow's own task queue (`QueueLayout.shared`).

    Temporal can hand an activity to the worker whose workflow task scheduled it, in the reply
    that completes the task (eager dispatch), but only on the workflow's own queue. On a role
    queue every step pays one more trip through the server's matching: on the overhead bench,
    101 against 46 ms per step. A worker that serves every role gains nothing from the split, so
    it folds the role queues back. Replay does not compare task queues, so a run may move between
    shared and split workers at any point (RELIABILITY.md).
    """

    def workflow_interceptor_class(self, input: WorkflowInterceptorClassInput) -> type[WorkflowInboundInterceptor]:
        return _SharedQueuesInbound


class _SharedQueuesInbound(WorkflowInboundInterceptor):
    def init(self, outbound: WorkflowOutboundInterceptor) -> None:
        super().init(_SharedQueuesOutbound(outbound))


class _SharedQueuesOutbound(WorkflowOutboundInterceptor):
    def start_activity(self, input: StartActivityInput) -> workflow.ActivityHandle[Any]:
        own = workflow.info().task_queue
        if input.task_queue and input.task_queue != own and is_role_queue(own, input.task_queue):
            input.task_queue = own
        return super().start_activity(input)


class VerifyDecisions(Interceptor):
    """Checks every decision against the worker's keys before the workflow sees it (stratagem.signing).

    An update that fails is rejected in its validator (it never reaches history); a signal that
    fails reaches the workflow marked refused, which records it as ignored. The verdict rides
    on the decision as a private attribute, which no payload can set. With keys configured, runs
    that would approve themselves (`auto_approve`) are refused at their start.
    """

    def __init__(self, policy: DecisionPolicy):
        self.policy = policy
        # Made once per worker: the SDK asks for the class at every workflow run.
        self._inbound = type("VerifyDecisionsInbound", (_VerifyDecisionsInbound,), {"policy": policy})

    def workflow_interceptor_class(self, input: WorkflowInterceptorClassInput) -> type[WorkflowInboundInterceptor]:
        return self._inbound


class _VerifyDecisionsInbound(WorkflowInboundInterceptor):
    policy: DecisionPolicy

    def _judge(self, kind: str | None, args: Sequence[Any]) -> Verdict | None:
        if kind is None or not args or not isinstance(args[0], DecisionInput):
            return None
        verdict = self.policy.verify(workflow.info().workflow_id, kind, args[0])
        args[0]._verdict = verdict
        return verdict

    def handle_update_validator(self, input: HandleUpdateInput) -> None:
        verdict = self._judge(input.update if input.update in DECISION_UPDATES else None, input.args)
        if verdict is not None and verdict.refused:
            raise ApplicationError(verdict.refused, type="DecisionRefused", non_retryable=True)
        super().handle_update_validator(input)

    async def handle_update_handler(self, input: HandleUpdateInput) -> Any:
        self._judge(input.update if input.update in DECISION_UPDATES else None, input.args)
        return await super().handle_update_handler(input)

    async def handle_signal(self, input: HandleSignalInput) -> None:
        self._judge(DECISION_SIGNALS.get(input.signal), input.args)
        await super().handle_signal(input)

    async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
        run = input.args[0] if input.args else None
        first = workflow.info().continued_run_id is None
        if first and self.policy.requires_signatures and isinstance(run, RunInput) and run.options.auto_approve:
            raise ApplicationError(
                "this deployment accepts only signed decisions, so a run may not approve itself (auto_approve)",
                type="DecisionRefused", non_retryable=True,
            )
        return await super().execute_workflow(input)


# What a host has no tools to run. The catalogue's local activity is not among them: a host
# answers it "no tools here", and the run asks the tools role instead, without failing the task.
HOST_UNAVAILABLE = (activity_io.DESCRIBE_TOOLS, activity_io.RUN_TOOL)


class HostOnly(Interceptor):
    """For a process that hosts the run workflow without its activities (the command line, for
    the length of a command): a workflow task that would run a tool here (HOST_UNAVAILABLE) fails,
    and Temporal gives it to another worker, one with the tools. Replaying history (to answer a
    query, say) reads local activities' results from it and runs nothing, so it goes on."""

    def workflow_interceptor_class(self, input: WorkflowInterceptorClassInput) -> type[WorkflowInboundInterceptor]:
        return _HostOnlyInbound


class _HostOnlyInbound(WorkflowInboundInterceptor):
    def init(self, outbound: WorkflowOutboundInterceptor) -> None:
        super().init(_HostOnlyOutbound(outbound))


class HostedWorkflowError(RuntimeError):
    """Not an ApplicationError: it fails the workflow task (retried elsewhere), not the run."""


class _HostOnlyOutbound(WorkflowOutboundInterceptor):
    def start_local_activity(self, input: StartLocalActivityInput) -> workflow.ActivityHandle[Any]:
        if input.activity in HOST_UNAVAILABLE and not workflow.unsafe.is_replaying():
            raise HostedWorkflowError(f"this process only hosts the workflow; {input.activity} needs a Stratagem worker")
        return super().start_local_activity(input)


def host_activities() -> list[Callable[..., Any]]:
    """What a host registers so that replaying a history with local activities in it passes the
    SDK's registration check; `HostOnly` keeps them from ever running. The catalogue's local
    activity does run here: it answers that this process has no tools."""
    from activities import describe_tools_here

    def unavailable(name: str) -> Callable[..., Any]:
        async def run(*_args: Any) -> None:
            raise ApplicationError(f"this process only hosts the workflow; a Stratagem worker runs {name}")

        return activity.defn(name=name)(run)

    return [*(unavailable(name) for name in HOST_UNAVAILABLE), describe_tools_here(None)]


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
    queue: stratagem/roles.py). `layout` says where the runs this worker drives send their
    activities; by default shared when it serves every role, split otherwise. `rate_limits` caps
    a role's activities per second across every worker of its queue (Temporal enforces it on the
    server), e.g. to stay within a provider's quota. `extra_*` join the workflow role's worker
    (benchmarks register baselines there).

    A shared worker still polls the role queues: activities that runs of split workers, or runs
    from before, scheduled there must find a worker."""
    from activities import activities_by_role
    from workflows import StratagemRun

    roles = list(dict.fromkeys(roles))
    layout = layout or default_layout(roles)
    if layout is QueueLayout.shared and set(roles) != set(ALL_ROLES):
        raise ConfigError("a shared queue layout needs a worker that serves every role; drop --role or the layout")
    protect_address(client.service_client.config.target_host)  # steps may never call it (http_request)
    policy = decision_policy or DecisionPolicy.from_env()
    by_role = activities_by_role(registry, workspace, store, roles)
    limits = rate_limits or {}
    extra_interceptors = list(worker_options.pop("interceptors", []))
    workers: dict[Role, Worker] = {}
    for role in roles:
        is_workflow = role is Role.workflow
        interceptors: list[Interceptor] = [VerifyDecisions(policy)] if is_workflow else []
        options = dict(worker_options)
        if is_workflow and layout is QueueLayout.shared:
            interceptors.append(SharedQueues())
            options.setdefault("max_eager_activity_reservations_per_workflow_task", EAGER_ACTIVITIES)
        workers[role] = Worker(
            client,
            task_queue=role_queue(task_queue, role),
            workflows=[StratagemRun, *extra_workflows] if is_workflow else [],
            activities=[*by_role[role], *(extra_activities if is_workflow else ())],
            workflow_runner=workflow_runner(),
            max_concurrent_activities=max_concurrent_activities,
            max_task_queue_activities_per_second=limits.get(role),
            interceptors=[*interceptors, *extra_interceptors],
            # Tracing, when a replay-safe tracer provider is installed (stratagem.telemetry).
            plugins=worker_plugins(),
            **options,
        )
    return WorkerGroup(workers)


@dataclass(frozen=True)
class WorkerOptions:
    """What a worker process serves, from `stratagem worker`'s and `worker.py`'s options."""

    tools: tuple[str, ...] = ()
    roles: tuple[Role, ...] = ALL_ROLES
    layout: QueueLayout = QueueLayout.shared
    rate_limits: Mapping[Role, float] = field(default_factory=dict)
    max_concurrent: int | None = None
    processes: int = 1


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


async def run_worker(settings: Settings, options: WorkerOptions = WorkerOptions()) -> None:
    """Serve `options.roles` until SIGTERM or SIGINT, with traces and metrics where the OTEL_*
    environment asks."""
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
            settings.namespace, STATUS_SEARCH_ATTRIBUTE, REGISTER_STATUS_HINT, settings.namespace,
        )
    worker = build_worker(
        client, task_queue=settings.task_queue, registry=registry, workspace=settings.workspace, roles=options.roles,
        layout=options.layout, rate_limits=options.rate_limits, max_concurrent_activities=options.max_concurrent,
    )
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


# ---------------------------------------------------------------------- command-line options
# Shared by `stratagem worker` and `python worker.py`.


def add_worker_arguments(parser: argparse.ArgumentParser) -> None:
    roles = ", ".join(r.value for r in ALL_ROLES)
    parser.add_argument("--tools", action="append", default=[], metavar="MODULE", help="tool module (dotted name or .py file); repeatable")
    parser.add_argument(
        "--role", action="append", dest="roles", choices=[r.value for r in ALL_ROLES], metavar="ROLE",
        help=f"serve only this role's task queue ({roles}); repeatable; default: $STRATAGEM_WORKER_ROLES or all",
    )
    parser.add_argument(
        "--rate-limit", action="append", dest="rate_limits", default=[], metavar="ROLE=N",
        help="at most N activities per second on ROLE's queue, across all its workers (enforced by Temporal); "
        "repeatable; default: $STRATAGEM_RATE_LIMITS, e.g. planner=1,executor=5",
    )
    parser.add_argument(
        "--split-queues", action="store_true", default=None,
        help="send each role's activities to its own queue even when this worker serves every role (default: "
        "$STRATAGEM_SPLIT_QUEUES; a worker serving only some roles always splits)",
    )
    parser.add_argument("--max-concurrent", type=int, metavar="N", help="activities one worker of each role runs at once")
    parser.add_argument("--processes", type=int, default=1, metavar="N", help="run N worker processes (Python runs one thread at a time per process)")


def roles_from(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> list[Role]:
    env = os.environ if env is None else env
    names = args.roles or [n.strip() for n in (env.get("STRATAGEM_WORKER_ROLES") or "").split(",") if n.strip()]
    if not names:
        return list(ALL_ROLES)
    known = {r.value: r for r in ALL_ROLES}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ConfigError(f"unknown worker role '{unknown[0]}' (STRATAGEM_WORKER_ROLES); the roles are {', '.join(known)}")
    return [known[n] for n in dict.fromkeys(names)]


def rate_limits_from(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> dict[Role, float]:
    env = os.environ if env is None else env
    items = list(args.rate_limits) or [i.strip() for i in (env.get("STRATAGEM_RATE_LIMITS") or "").split(",") if i.strip()]
    known = {r.value: r for r in ALL_ROLES if r is not Role.workflow}
    limits: dict[Role, float] = {}
    for item in items:
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or name not in known:
            raise ConfigError(f"rate limit '{item}' is not ROLE=N with ROLE one of {', '.join(known)}")
        try:
            number = float(value)
        except ValueError:
            number = -1.0
        if not number > 0 or number != number or number == float("inf"):
            raise ConfigError(f"rate limit '{item}': N must be a positive number of activities per second")
        limits[known[name]] = number
    return limits


def layout_from(args: argparse.Namespace, roles: Sequence[Role], env: Mapping[str, str] | None = None) -> QueueLayout:
    env = os.environ if env is None else env
    split = args.split_queues
    if split is None:
        raw = (env.get("STRATAGEM_SPLIT_QUEUES") or "").strip().lower()
        if raw not in ("", "0", "1", "true", "false", "yes", "no"):
            raise ConfigError(f"STRATAGEM_SPLIT_QUEUES={raw} is not a yes/no value (1 or 0)")
        split = raw in ("1", "true", "yes")
    return QueueLayout.split if split else default_layout(roles)


def check_worker_args(args: argparse.Namespace) -> WorkerOptions:
    """The worker asked for; ConfigError (one line) for anything wrong."""
    if args.max_concurrent is not None and args.max_concurrent < 1:
        raise ConfigError("--max-concurrent must be at least 1")
    if args.processes < 1:
        raise ConfigError("--processes must be at least 1")
    roles = roles_from(args)
    return WorkerOptions(
        tools=tuple(args.tools), roles=tuple(roles), layout=layout_from(args, roles), rate_limits=rate_limits_from(args),
        max_concurrent=args.max_concurrent, processes=args.processes,
    )


def run_processes(argv: Sequence[str], count: int) -> int:
    """Run `count` worker processes (`stratagem worker` with `argv`, minus --processes) and wait
    for them; SIGTERM and SIGINT reach every one. Each serves Prometheus metrics on its own port
    (OTEL_EXPORTER_PROMETHEUS_PORT, plus one per process). Returns the worst exit status."""
    import subprocess
    import sys

    children = []
    base_port = int(os.environ.get("OTEL_EXPORTER_PROMETHEUS_PORT") or 9464)
    for index in range(count):
        env = {**os.environ, "OTEL_EXPORTER_PROMETHEUS_PORT": str(base_port + index)}
        children.append(subprocess.Popen([sys.executable, "-m", "stratagem.cli", "worker", *argv], env=env))

    def forward(number: int, _frame: object) -> None:
        for child in children:
            if child.poll() is None:
                child.send_signal(number)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    codes = [child.wait() for child in children]
    return max(codes, key=abs)


def child_argv(options: WorkerOptions) -> list[str]:
    """The `stratagem worker` arguments of each of --processes' children: the same worker, one process."""
    argv = [a for t in options.tools for a in ("--tools", t)] + [a for r in options.roles for a in ("--role", r.value)]
    argv += [a for role, n in options.rate_limits.items() for a in ("--rate-limit", f"{role.value}={n:g}")]
    if options.layout is QueueLayout.split and default_layout(options.roles) is QueueLayout.shared:
        argv.append("--split-queues")
    if options.max_concurrent:
        argv += ["--max-concurrent", str(options.max_concurrent)]
    return argv


def describe_worker(options: WorkerOptions, task_queue: str) -> str:
    """One line saying what a worker serves and where its runs' activities go."""
    queues = ", ".join(role_queue(task_queue, r) for r in options.roles)
    where = (
        f"activities of the runs it drives stay on {task_queue}" if options.layout is QueueLayout.shared
        else "each role's activities go to its own queue"
    )
    return f"roles {', '.join(r.value for r in options.roles)} on {queues}; {where}"
