"""What a command needs to reach Temporal: the settings, a client (starting the embedded server
for `run`), the run it names, a workflow host for the command's length, the home's background
worker, and telling a lost connection from other failures."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker

from stratagem.activities import describe_tools_here
from stratagem.workflows import StratagemRun

from ..client import RunHandle, connect, get_run
from ..codec import codec_from
from ..config import DEFAULT_ADDRESS, Settings, stratagem_home
from ..interceptors import HOST_UNAVAILABLE, HostOnly
from ..plugin import worker_plugins
from ..run_types import WORKFLOW_NAME
from ..server import BackgroundWorker, EmbeddedServer, is_listening, is_local, owns_server
from . import render
from .errors import CliError


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


# How long `run` waits for a local server that listens but does not serve yet.
STARTING_SERVER_WAIT = 30.0
# Each query and decision the CLI sends a run: generous (a long run's replay on the host), but
# bounded, so that one lost as the run ends is asked again rather than waited on for ever.
RUN_TIMEOUT = timedelta(seconds=60)


async def open_client(config: Settings, *, start_server: bool = False, json_mode: bool = False) -> Client:
    """Connect; for `run`, first start the embedded server if nothing listens at a local address."""
    if (
        start_server
        and is_listening(config.address)
        and not address_named(config)
        and not owns_server(embedded(config))
    ):
        # Another home's server (or another program's) on the default port: using it silently
        # shared one task queue and one worker between homes, and one home's run wrote its files
        # into the other's workspace.
        raise CliError(
            f"a Temporal server that this STRATAGEM_HOME ({stratagem_home()}) did not start listens at {config.address}; "
            f"to use it, set TEMPORAL_ADDRESS={config.address}; to give this home a server of its own, "
            "set TEMPORAL_ADDRESS=localhost:PORT with a free port"
        )
    if not is_listening(config.address):
        if not (start_server and is_local(config.address)) or config.secured:
            # With TLS or an API key configured, the server meant is a real cluster: never stand
            # an embedded one in for it.
            raise CliError(
                f"no Temporal server is reachable at {config.address}; start one with `stratagem server` "
                "or set TEMPORAL_ADDRESS (or a profile: TEMPORAL_PROFILE, TEMPORAL_CONFIG_FILE)"
            )
        server = embedded(config)
        pid = await asyncio.to_thread(server.start_detached)
        render.note(
            f"started the embedded Temporal server (pid {pid}) at {config.address}, data in {server.database}; "
            f"Web UI: {server.ui_url}; log: {server.log_file}",
            json_mode=json_mode,
        )
    # A server that was just started listens a moment before its frontend serves ("Frontend is
    # not healthy yet"): keep trying for a while when it is ours and busy starting.
    deadline = time.monotonic() + (STARTING_SERVER_WAIT if start_server and is_local(config.address) else 0)
    while True:
        try:
            return await connect(config, quiet=True)
        except RuntimeError as exc:
            if "not healthy yet" not in str(exc) or time.monotonic() >= deadline:
                raise CliError(f"cannot connect to Temporal at {config.address}: {exc}") from None
            await asyncio.sleep(0.25)


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
    activity does run here: it answers that this process has no tools."""

    def unavailable(name: str) -> Callable[..., Any]:
        async def run(*_args: Any) -> None:
            raise ApplicationError(f"this process only hosts the workflow; a Stratagem worker runs {name}")

        return activity.defn(name=name)(run)

    return [*(unavailable(name) for name in HOST_UNAVAILABLE), describe_tools_here(None)]


@asynccontextmanager
async def workflow_host(client: Client, task_queue: str) -> AsyncIterator[None]:
    """A workflow-only worker for the length of a command.

    Queries and update validators run in a workflow worker. Hosting one here means status,
    approve and the rest work even while no `stratagem worker` runs; steps still wait for a
    real worker, which has the activities. No cache, so nothing sticks to this short-lived
    process when it exits. This process has no tools, so it leaves the work a workflow does
    in its own worker (local activities) to real workers (`HostOnly`).
    """
    worker = Worker(
        client,
        task_queue=task_queue,
        workflows=[StratagemRun],
        activities=host_activities(),
        no_remote_activities=True,  # registered only to replay local ones: never take a real activity
        interceptors=[HostOnly()],
        max_cached_workflows=0,
        # Decisions are checked here as a worker checks them, and a decision taken here moves the
        # run on in this process: its spans (the review's end, say) are exported from here, with
        # the same ids the worker would give them (stratagem.plugin).
        plugins=worker_plugins(client),
    )
    async with worker:
        yield


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
