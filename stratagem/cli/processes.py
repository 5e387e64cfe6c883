"""The commands that run or stop long-lived processes: a worker, the embedded Temporal server,
and `down`, which stops what `run` started in this home."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import signal

from stratagem.cli import render
from stratagem.cli.arguments import Commands
from stratagem.cli.errors import CliError
from stratagem.cli.session import background_worker, embedded, settings
from stratagem.common.config import stratagem_home
from stratagem.common.signing import DecisionPolicy
from stratagem.server import is_listening
from stratagem.tools import ToolRegistry
from stratagem.worker import run_worker
from stratagem.worker_options import add_worker_arguments, check_worker_args, child_argv, describe_worker, run_processes


def add_processes(commands: Commands) -> None:
    worker = commands.add("worker", cmd_worker, "run a worker: every role, or those named by --role", json=False)
    add_worker_arguments(worker)

    commands.add("server", cmd_server, "run the embedded Temporal server (SQLite under STRATAGEM_HOME)", json=False)


def cmd_worker(args: argparse.Namespace) -> int:
    config = settings()
    options = check_worker_args(args)
    if not is_listening(config.address):
        raise CliError(f"no Temporal server is reachable at {config.address}; start one with `stratagem server`")
    if not options.tools:
        recorded = background_worker(config).recorded_tools()
        if recorded:
            # Every worker on a task queue must offer the same tools as the others.
            options = dataclasses.replace(options, tools=tuple(recorded))
            render.note(f"using the tools of this home's background worker: {', '.join(recorded)}")
    ToolRegistry.from_modules(list(options.tools))  # fail fast, before connecting, on a bad tool module
    if options.processes > 1:
        render.note(f"starting {options.processes} worker processes")
        return run_processes(child_argv(options), options.processes)
    policy = DecisionPolicy.from_env()  # a malformed key list fails here, in one line
    render.note(
        f"worker on {config.address}, namespace {config.namespace}; {describe_worker(options, config.task_queue)}"
    )
    render.note(policy.describe())
    asyncio.run(run_worker(config, options, policy))
    return 0


def cmd_server(args: argparse.Namespace) -> int:
    config = settings()
    server = embedded(config)
    server.check()  # a bad address or home fails here, before any address is printed
    if is_listening(config.address):
        raise CliError(f"something already listens on {config.address}; is a server already running?")
    render.console.print(f"Temporal server: {config.address}  (data: {server.database})")
    render.console.print(f"Web UI:          {server.ui_url}")
    render.console.print(f"log:             {server.log_file}")
    status = server.run_foreground()
    if status not in (0, 130, -signal.SIGINT, -signal.SIGTERM):
        render.errors.print(f"the Temporal server stopped with status {status}; see {server.log_file}", markup=False)
    return status


def add_down(commands: Commands) -> None:
    commands.add("down", cmd_down, "stop this home's embedded Temporal server and background worker (runs are kept)")


async def cmd_down(args: argparse.Namespace) -> int:
    """Stop what `run` started in this home: the background worker, then the embedded server.
    Runs are safe in the server's database; the next `run` or `stratagem server` carries on."""
    config = settings()
    home = stratagem_home()
    worker = await asyncio.to_thread(background_worker(config).stop)
    server = await asyncio.to_thread(embedded(config).stop)
    if args.json:
        render.emit_json({"home": str(home), "worker_pid": worker, "server_pid": server})
        return 0
    stopped = []
    if worker is not None:
        stopped.append(f"the background worker (pid {worker})")
    if server is not None:
        stopped.append(f"the embedded server (pid {server})")
    if stopped:
        render.console.print(f"stopped {' and '.join(stopped)} of {home}; runs are kept in its database")
    else:
        render.console.print(f"nothing of {home} is running")
    return 0
