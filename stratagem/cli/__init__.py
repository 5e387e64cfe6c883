"""The `stratagem` command line. Errors a user can cause print one line and exit non-zero."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from importlib.metadata import PackageNotFoundError, version

from pydantic import ValidationError
from temporalio.service import RPCError

from stratagem.cli import (
    console_cmd,
    evals,
    following,
    forking,
    inspection,
    library,
    listing,
    parser_decisions,
    processes,
    protocols,
    render,
    schedules,
    standing,
    start,
)
from stratagem.cli.arguments import Commands
from stratagem.cli.errors import USAGE
from stratagem.cli.session import connection_lost
from stratagem.common.config import Settings
from stratagem.common.errors import StratagemError
from stratagem.common.telemetry import configure_tracing, flush_telemetry


def _version() -> str:
    try:
        return version("stratagem")
    except PackageNotFoundError:
        return "(not installed)"


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="stratagem", description="Durable planner-executor runs on Temporal.")
    top.add_argument("--version", action="version", version=f"stratagem {_version()}")
    commands = Commands(top)
    # Each area's module adds its own commands; this order is the one `stratagem --help` lists.
    for add in (
        start.add_run,
        inspection.add_status,
        listing.add_list,
        parser_decisions.add_decisions,
        forking.add_fork,
        console_cmd.add_console_commands,
        parser_decisions.add_cancel,
        following.add_following,
        processes.add_down,
        parser_decisions.add_keygen,
        inspection.add_views,
        processes.add_processes,
        schedules.add_schedules,
        standing.add_standing,
        library.add_library,
        evals.add_eval,
        protocols.add_protocols,
    ):
        add(commands)
    return top


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv:  # bare `stratagem`: what it can do, not an error about a missing argument
        parser().print_help()
        return 0
    args = parser().parse_args(argv)
    if sys.stdin.isatty() or args.command == "server":
        # A person at a terminal expects Ctrl-C to work, and `stratagem server` stops on SIGINT,
        # even when whatever started them ran them with SIGINT ignored (a background job of a
        # non-interactive shell inherits that; the server's Temporal child was then left behind).
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if args.command == "run" and not (args.goal or args.plan or args.process):
        render.errors.print("error: give a goal, --plan FILE or a process (--process NAME)")
        return USAGE
    try:
        if args.command != "worker":  # the worker configures its own, as stratagem-worker
            configure_tracing("stratagem-cli")
        outcome = args.handler(args)
        return asyncio.run(outcome) if asyncio.iscoroutine(outcome) else outcome
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`stratagem audit ID | head`): not an error. Point stdout at
        # devnull so the interpreter's final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except StratagemError as exc:  # includes invalid plans, whose message lists each problem
        render.errors.print(f"error: {exc}", markup=False)
        return USAGE
    except ValidationError as exc:  # a value the option parser let through but a model refuses
        error = exc.errors()[0]
        where = ".".join(str(p) for p in error["loc"])
        render.errors.print(f"error: {where}: {error['msg']}", markup=False)
        return USAGE
    except Exception as exc:
        # The SDK may wrap a lost connection (a worker's poll failing, for one). Anything that
        # is neither that nor a refusal from Temporal is a bug and keeps its traceback.
        if connection_lost(exc):
            render.errors.print(lost_connection_message(args), markup=False)
        elif isinstance(exc, RPCError):
            render.errors.print(f"error: Temporal refused the request: {exc.message}", markup=False)
        else:
            raise
        return USAGE


def lost_connection_message(args: argparse.Namespace) -> str:
    run_id = getattr(args, "run_id", None) or getattr(args, "id", None) or "RUN_ID"
    address = Settings.from_env().address
    return (
        f"error: lost the connection to Temporal at {address}; runs are safe in the server's database: "
        f"start it again (stratagem server) and follow with stratagem wait {run_id}"
    )


def entry() -> None:
    """The console script. Leaves without interpreter finalization, during which the Temporal
    SDK's native runtime threads can abort the process ("PyGILState_Release") after the work
    is done, turning a success into a crash."""
    code = main()
    flush_telemetry()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


__all__ = ["entry", "main", "parser"]
