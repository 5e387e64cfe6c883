"""What a command needs to reach Temporal: the settings, a client (starting the embedded server
for `run` and `wait`, refusing another home's), the run it names, a workflow host for the
command's length, the home's background worker and what became of it, and telling a lost
connection from other failures."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

from temporalio import activity
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker

from stratagem.activities import describe_tools_here
from stratagem.cli import render
from stratagem.cli.errors import CliError
from stratagem.client import RunHandle, connect, get_run
from stratagem.common.config import DEFAULT_ADDRESS, Settings, stratagem_home
from stratagem.common.signing import ALLOW_UNSIGNED_ENV, APPROVER_KEYS_ENV, ISSUER_KEYS_ENV, DecisionPolicy
from stratagem.domain.run_types import WORKFLOW_NAME
from stratagem.io.codec import codec_from
from stratagem.server import (
    BackgroundWorker,
    EmbeddedServer,
    WorkerExit,
    is_listening,
    is_local,
    mark_home,
    marked_home,
    owns_server,
)
from stratagem.temporal.interceptors import HOST_UNAVAILABLE, HOSTED_ONLY, HostOnly, quiet_hosted_failures
from stratagem.temporal.plugin import worker_plugins
from stratagem.workflows import StandingApprovals, StratagemRun


def settings() -> Settings:
    config = Settings.from_env()
    codec_from(config)  # a malformed encryption key is reported before anything starts
    return config


def address_named(config: Settings) -> bool:
    """Whether the user chose the address (TEMPORAL_ADDRESS, or a profile), not the default."""
    return bool(os.environ.get("TEMPORAL_ADDRESS", "").strip()) or config.address != DEFAULT_ADDRESS


def embedded(config: Settings) -> EmbeddedServer:
    return EmbeddedServer(config.address, stratagem_home(), namespace=config.namespace)


def background_worker(config: Settings, task_queue: str | None = None) -> BackgroundWorker:
    """The worker `run` leaves running for this home's embedded server, serving `task_queue`
    (by default the configured one) in this folder's workspace."""
    return BackgroundWorker(stratagem_home(), task_queue or config.task_queue, config.workspace.resolve())


def worker_gone(config: Settings, run_id: str) -> str | None:
    """In the embedded setup, if this home's background worker is not running: what became of it
    (stopped, or exited with the last error line of its log) and what to do, in one line."""
    if not owns_server(embedded(config)):
        return None
    ended = background_worker(config).exited()
    return None if ended is None else _gone_line(ended, run_id)


def _gone_line(ended: WorkerExit, run_id: str) -> str:
    fix = "" if ended.stopped else "fix what stopped it (see its log), then "
    return (
        f"{ended.describe()}; the steps of run {run_id} wait until a worker serves them: "
        f"{fix}`stratagem wait {run_id}` starts it again (log: {ended.log})"
    )


# How often a command following a run looks whether this home's background worker still runs.
WORKER_WATCH_SECONDS = 1.0


@asynccontextmanager
async def watching_worker(config: Settings, run_id: str, *, json_mode: bool) -> AsyncIterator[None]:
    """While `run` or `wait` follows a run in the embedded setup: say once when this home's
    background worker stops or exits, and why, and again when one is back. Without this, a worker
    that died at its start left `wait` waiting without a word."""
    if not owns_server(embedded(config)):
        yield
        return
    worker = background_worker(config)

    async def watch() -> None:
        said, seen = False, None
        while True:
            await asyncio.sleep(WORKER_WATCH_SECONDS)
            ended = await asyncio.to_thread(worker.exited)
            # Seen gone twice: a `run` elsewhere restarting the worker leaves worker.json naming the
            # old one, stopped, for the moment it takes to start the new one.
            if ended is not None and not said and seen == ended.pid:
                render.note(f"warning: {_gone_line(ended, run_id)}", json_mode=json_mode)
                said = True
            elif ended is None and said and (pid := worker.running_pid()) is not None:
                render.note(f"this home's background worker is back (pid {pid})", json_mode=json_mode)
                said = False
            seen = ended.pid if ended is not None else None

    task = asyncio.create_task(watch())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


# How long `run` waits for a local server that listens but does not serve yet.
STARTING_SERVER_WAIT = 30.0
# How long `run` asks a server this home did not start, at an address nobody named, whose it is.
UNNAMED_SERVER_WAIT = 5.0
# Each query and decision the CLI sends a run: generous (a long run's replay on the host), but
# bounded, so that one lost as the run ends is asked again rather than waited on for ever.
RUN_TIMEOUT = timedelta(seconds=60)


async def open_client(config: Settings, *, start_server: bool = False, json_mode: bool = False) -> Client:
    """Connect; with `start_server` (`run`; `wait` at this home's own address), first start the
    embedded server if nothing listens at a local address.

    A local server that another home started (its namespace names that home: stratagem.server.marks)
    is refused in one line, by every command and on any port: this home's commands would have
    hosted their workflows and started a worker with this home's tools on that home's task
    queue. A server that no home started (docker compose, a dev server started by hand) is used
    when TEMPORAL_ADDRESS names it, as before."""
    server = embedded(config)
    if not is_listening(config.address):
        if not (start_server and is_local(config.address)) or config.secured:
            # With TLS or an API key configured, the server meant is a real cluster: never stand
            # an embedded one in for it.
            raise CliError(
                f"no Temporal server is reachable at {config.address}; start one with `stratagem server` "
                "or set TEMPORAL_ADDRESS (or a profile: TEMPORAL_PROFILE, TEMPORAL_CONFIG_FILE)"
            )
        pid = await asyncio.to_thread(server.start_detached)
        render.note(
            f"started the embedded Temporal server (pid {pid}) at {config.address}, data in {server.database}; "
            f"Web UI: {server.ui_url}; log: {server.log_file}",
            json_mode=json_mode,
        )
    # Something this home did not start listens at the default address, which nobody named:
    # using it silently shared one task queue and one worker between homes, and one home's run
    # wrote its files into the other's workspace.
    unnamed = start_server and not address_named(config) and not owns_server(server)
    try:
        if unnamed:
            # Refused either way; connecting only finds which home's server it is. Something
            # that listens but speaks no Temporal kept the SDK trying for 30 s.
            client = await asyncio.wait_for(_connect(config, patient=False), UNNAMED_SERVER_WAIT)
        else:
            client = await _connect(config, patient=start_server and is_local(config.address))
    except (CliError, TimeoutError):
        if unnamed:
            raise _not_ours(config) from None
        raise
    if is_local(config.address) and not config.secured:
        await _claim_or_refuse(client, config, server, unnamed=unnamed)
    return client


async def _connect(config: Settings, *, patient: bool) -> Client:
    # A server that was just started listens a moment before its frontend serves ("Frontend is
    # not healthy yet"): keep trying for a while when it is ours and busy starting.
    deadline = time.monotonic() + (STARTING_SERVER_WAIT if patient else 0)
    while True:
        try:
            return await connect(config, quiet=True)
        except RuntimeError as exc:
            if "not healthy yet" not in str(exc) or time.monotonic() >= deadline:
                raise CliError(f"cannot connect to Temporal at {config.address}: {exc}") from None
            await asyncio.sleep(0.25)


async def _claim_or_refuse(client: Client, config: Settings, server: EmbeddedServer, *, unnamed: bool) -> None:
    """Name this home in its own server (one it just started, or one an older Stratagem started
    without naming it), or refuse a server another home started."""
    home = server.home.resolve()
    named = await marked_home(client, config.namespace)
    if owns_server(server):
        if named != home:
            with contextlib.suppress(RPCError):  # a namespace the server lacks: the command says so later
                await mark_home(client, server.namespaces, home)
        return
    if named is not None and named.resolve() != home:
        raise CliError(
            f"the Temporal server at {config.address} is the embedded server of another STRATAGEM_HOME ({named}); "
            f"this home ({home}) does not use it: to work in that home, set STRATAGEM_HOME={named}; to give this "
            "home a server of its own, set TEMPORAL_ADDRESS=localhost:PORT with a free port"
        )
    if named is None and unnamed:
        raise _not_ours(config)


def _not_ours(config: Settings) -> CliError:
    return CliError(
        f"a Temporal server that this STRATAGEM_HOME ({stratagem_home()}) did not start listens at {config.address}; "
        f"to use it, set TEMPORAL_ADDRESS={config.address}; to give this home a server of its own, "
        "set TEMPORAL_ADDRESS=localhost:PORT with a free port"
    )


async def find_run(client: Client, run_id: str) -> tuple[RunHandle, str]:
    """The run and its task queue, or a clear error if there is no such run."""
    run = get_run(client, run_id, rpc_timeout=RUN_TIMEOUT)
    try:
        description = await run.handle.describe()
    except RPCError as exc:
        if exc.status is RPCStatusCode.NOT_FOUND:
            raise CliError(f"no run with id '{run_id}' (see `stratagem list`)") from None
        raise
    if description.workflow_type != WORKFLOW_NAME:
        raise CliError(f"'{run_id}' is a {description.workflow_type} workflow, not a Stratagem run")
    return run, description.task_queue or config_task_queue()


def config_task_queue() -> str:
    return settings().task_queue


@asynccontextmanager
async def hosted_run(run_id: str) -> AsyncIterator[RunHandle]:
    """A run to query or decide on, with its workflow hosted here meanwhile (see workflow_host)."""
    client = await open_client(settings())
    run, task_queue = await find_run(client, run_id)
    async with workflow_host(client, task_queue):
        yield run


def host_activities() -> list[Callable[..., Any]]:
    """What a host registers so that replaying a history with local activities in it passes the
    SDK's registration check; `HostOnly` keeps them from ever running. The catalogue's local
    activity runs here when no worker is beside this process: it answers that it has no tools."""

    def unavailable(name: str) -> Callable[..., Any]:
        async def run(*_args: Any) -> None:
            raise ApplicationError(f"{HOSTED_ONLY}; a Stratagem worker runs {name}")

        return activity.defn(name=name)(run)

    return [*(unavailable(name) for name in HOST_UNAVAILABLE), describe_tools_here(None)]


def host_policy(config: Settings) -> DecisionPolicy | None:
    """The keys a command checks decisions with while it hosts a run's workflow, or None when it
    must not host it. On this home's own server: the home's keys and the configured ones, as the
    home's workers. On any other server: only keys configured here (the operator gives the CLI the
    workers' own), for a key this command's home made is no key that server's workers trust. A
    command that trusted it once took, while no worker held the run, a decision its user had
    signed with a key just made for someone else (`--by dana`)."""
    if owns_server(embedded(config)):
        return DecisionPolicy.from_env()
    if not any(os.environ.get(name, "").strip() for name in (APPROVER_KEYS_ENV, ISSUER_KEYS_ENV, ALLOW_UNSIGNED_ENV)):
        return None
    return DecisionPolicy.from_env({k: v for k, v in os.environ.items() if k != "STRATAGEM_HOME"})


@asynccontextmanager
async def workflow_host(client: Client, task_queue: str, *, beside_a_worker: bool = False) -> AsyncIterator[None]:
    """A workflow-only worker for the length of a command.

    Queries and update validators run in a workflow worker. Hosting one here means status,
    approve and the rest work even while no `stratagem worker` runs; steps still wait for a
    real worker, which has the activities. No cache, so nothing sticks to this short-lived
    process when it exits. This process has no tools, so it leaves the work a workflow does
    in its own worker (local activities) to real workers (`HostOnly`). It hosts only where it
    knows which keys the workers trust (`host_policy`); elsewhere the workers answer alone.
    `beside_a_worker`: the caller knows one runs (this home's background worker, just ensured);
    otherwise the queue's pollers say (`workers_polling`).
    """
    policy = host_policy(settings())
    if policy is None:
        yield
        return
    quiet_hosted_failures()
    worker = Worker(
        client,
        task_queue=task_queue,
        workflows=[StratagemRun, StandingApprovals],  # and the queue's standing approvals
        activities=host_activities(),
        no_remote_activities=True,  # registered only to replay local ones: never take a real activity
        interceptors=[HostOnly(beside_a_worker=beside_a_worker or await workers_polling(client, task_queue))],
        max_cached_workflows=0,
        # Decisions are checked here as a worker checks them, and a decision taken here moves the
        # run on in this process: its spans (the review's end, say) are exported from here, with
        # the same ids the worker would give them (stratagem.temporal.plugin).
        plugins=worker_plugins(client, policy),
    )
    async with worker:
        yield


# A worker long-polls its queue for up to a minute, so one that polled within this long runs.
POLLED_WITHIN = timedelta(seconds=75)


async def workers_polling(client: Client, task_queue: str) -> bool:
    """Whether a worker (or another command's host) polls `task_queue` for workflow tasks: one
    did lately, and is not a process of this machine that has ended. True when that cannot be
    told, which only makes a host leave more to workers."""
    request = DescribeTaskQueueRequest(
        namespace=client.namespace,
        task_queue=TaskQueue(name=task_queue),
        task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
    )
    try:
        described = await client.workflow_service.describe_task_queue(request, timeout=timedelta(seconds=5))
    except RPCError:
        return True
    now = time.time()
    recent = POLLED_WITHIN.total_seconds()
    return any(
        now - poller.last_access_time.ToSeconds() < recent and not _gone_from_here(poller.identity)
        for poller in described.pollers
    )


def _gone_from_here(identity: str) -> bool:
    """Whether a poller named as the SDK names one (`pid@host`) was a process of this machine
    that has ended: the server lists it for minutes after (a background worker that was just
    restarted, or died)."""
    pid, _, host = identity.partition("@")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    # Not stratagem.server.processes.alive: another user's process (a worker run as a service
    # account) answers PermissionError, and it runs.
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass
    return False


def connection_lost(exc: BaseException) -> bool:
    """True if `exc`, or an exception it wraps, says the Temporal server went away."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, RPCError) and current.status is RPCStatusCode.UNAVAILABLE:
            return True
        if "tcp connect error" in str(current).lower():
            return True
        current = current.__cause__ or current.__context__
    return False
