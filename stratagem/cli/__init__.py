"""The `stratagem` command line. Errors a user can cause print one line and exit non-zero."""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import signal
import sys
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from pydantic import ValidationError
from temporalio.service import RPCError

from ..config import Settings
from ..errors import StratagemError
from ..telemetry import configure_tracing, flush_telemetry
from ..worker_options import add_worker_arguments
from . import console_cmd, decisions, following, forking, inspection, listing, processes, render, start
from .errors import USAGE
from .session import connection_lost


def _version() -> str:
    try:
        return version("stratagem")
    except PackageNotFoundError:
        return "(not installed)"


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="stratagem", description="Durable planner-executor runs on Temporal.")
    top.add_argument("--version", action="version", version=f"stratagem {_version()}")
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, handler: Callable[..., Any], help: str, *, json: bool = True) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        p.set_defaults(handler=handler)
        if json:
            p.add_argument("--json", action="store_true", help="machine-readable output (docs/cli.md)")
        return p

    run = command("run", start.cmd_run, "start a run from a goal or a plan file, and follow it")
    source = run.add_mutually_exclusive_group(required=True)
    source.add_argument("goal", nargs="?", help="what to achieve (needs --planner)")
    source.add_argument("--plan", metavar="FILE", help="a plan file (YAML or JSON) written by a person")
    run.add_argument(
        "--tools",
        action="append",
        default=[],
        metavar="MODULE",
        help="tool module, .py file, or MCP server (mcp:stdio:COMMAND [ARGS], mcp:http:URL); repeatable",
    )
    run.add_argument("--planner", metavar="MODEL", help="planner model, e.g. openai:gpt-4.1 or scripted:planner.yaml")
    run.add_argument("--executor", metavar="MODEL", help="executor model for llm steps (default: the planner)")
    run.add_argument(
        "--tier", action="append", default=[], metavar="NAME=MODEL", help="a model tier llm steps may name; repeatable"
    )
    run.add_argument("--synthesizer", metavar="MODEL", help="model that summarises the outcome at the end")
    run.add_argument(
        "--verifier", metavar="TIER|MODEL", help="checks llm steps' success criteria (default: the step's own model)"
    )
    run.add_argument(
        "--final-check",
        action="store_true",
        help="before the run counts as a success, the verifier judges the final outputs against the goal",
    )
    run.add_argument("--config", metavar="FILE", help="models, tiers, budget and prices (default: $STRATAGEM_CONFIG)")
    run.add_argument(
        "--mode", choices=["plan", "joint"], default="plan", help="joint: one model thinks and acts in one loop"
    )
    run.add_argument(
        "--allow-tool",
        action="append",
        dest="allow_tools",
        metavar="TOOL",
        help="joint mode: a tool the model may call; repeatable (default: all)",
    )
    run.add_argument("--max-tool-rounds", type=_positive(int), metavar="N", help="model calls one llm step may make")
    run.add_argument("--budget-tokens", type=_positive(int), metavar="N", help="pause the run past this many tokens")
    run.add_argument(
        "--budget-cost", type=_positive(float), metavar="USD", help="pause the run past this estimated cost"
    )
    run.add_argument(
        "--budget-calls", type=_positive(int), metavar="N", help="pause the run past this many model calls"
    )
    run.add_argument(
        "--budget-seconds", type=_positive(float), metavar="N", help="pause the run this long after it started"
    )
    run.add_argument("--auto-approve", action="store_true", help="approve the plan and gated steps without asking")
    run.add_argument(
        "--approver",
        action="append",
        dest="approvers",
        metavar="NAME",
        help="only these people may approve, reject, revise or change the budget; repeatable",
    )
    run.add_argument(
        "--on-failure",
        choices=["repair", "fail"],
        help="when a failed step cannot be replanned: wait for a person to repair it (default), or fail "
        "(the default with --auto-approve)",
    )
    run.add_argument(
        "--whole-plan-approval",
        action="store_true",
        help="review every revision as a whole, not only the steps it changed",
    )
    run.add_argument("--detach", action="store_true", help="print the run id and return at once")
    run.add_argument("--id", metavar="RUN_ID", help="choose the run id")
    run.add_argument("--by", metavar="NAME", help="your name, recorded with your decisions")

    status = command("status", inspection.cmd_status, "show a run's phase, plan, steps and pending decisions")
    status.add_argument("run_id")

    list_runs = command("list", listing.cmd_list, "list runs, newest first; or the approval inbox")
    list_runs.add_argument(
        "--status",
        choices=sorted([*listing.LIST_STATUSES, listing.AWAITING]),
        help=f"only runs in this state; {listing.AWAITING}: every run waiting for a person, oldest first",
    )
    list_runs.add_argument(
        "--limit",
        type=_positive(int),
        default=50,
        metavar="N",
        help="show at most N runs (default: 50): the newest, or in the inbox the longest waiting",
    )

    approve = command("approve", decisions.cmd_approve, "approve the plan awaiting review, or a gated step")
    approve.add_argument("run_id")
    approve.add_argument("--revision", type=int, help="refuse if the plan under review is not this revision")
    approve.add_argument("--step", metavar="STEP_ID", help="approve this gated step instead of the plan")
    approve.add_argument("--call", metavar="CALL_ID", help="with --step: approve this tool call of the llm step")
    approve.add_argument("--by", metavar="NAME")
    approve.add_argument("--comment", default="")

    reject = command("reject", decisions.cmd_reject, "reject the plan (ending the run) or a gated step")
    reject.add_argument("run_id")
    reject.add_argument("--reason", required=True)
    reject.add_argument("--revision", type=int)
    reject.add_argument("--step", metavar="STEP_ID")
    reject.add_argument("--call", metavar="CALL_ID", help="with --step: reject this tool call (the step is told)")
    reject.add_argument("--by", metavar="NAME")

    revise = command(
        "revise",
        decisions.cmd_revise,
        "replace the plan with an edited plan file: under review, while it runs, or as a repair",
    )
    revise.add_argument("run_id")
    revise.add_argument("plan_file")
    revise.add_argument("--revision", type=int, help="the revision your edit is based on")
    revise.add_argument("--reason", default="")
    revise.add_argument("--by", metavar="NAME")

    answer = command("answer", decisions.cmd_answer, "answer a human step")
    answer.add_argument("run_id")
    answer.add_argument("step_id")
    answer.add_argument("text")
    answer.add_argument("--json-value", action="store_true", help="parse TEXT as JSON")
    answer.add_argument("--by", metavar="NAME")

    budget = command("budget", decisions.cmd_budget, "raise a run's budget, or stop a run that used it up")
    budget.add_argument("run_id")
    budget.add_argument("--tokens", type=_positive(int), metavar="N", help="new token limit (input + output)")
    budget.add_argument("--cost", type=_positive(float), metavar="USD", help="new cost limit in US dollars")
    budget.add_argument("--calls", type=_positive(int), metavar="N", help="new limit on model calls")
    budget.add_argument(
        "--seconds", type=_positive(float), metavar="N", help="new wall-clock limit, from the run's start"
    )
    budget.add_argument("--stop", action="store_true", help="end the run instead (it must be waiting on its budget)")
    budget.add_argument("--reason", default="")
    budget.add_argument("--by", metavar="NAME")

    retry = command("retry", decisions.cmd_retry, "repair: run a failed step again, with new arguments if given")
    retry.add_argument("run_id")
    retry.add_argument("step_id")
    retry.add_argument("--args", metavar="JSON", help="the tool step's new arguments, a JSON object")
    retry.add_argument("--reason", default="")
    retry.add_argument("--by", metavar="NAME")

    skip = command("skip", decisions.cmd_skip, "repair: count a failed step as done, with its output given by hand")
    skip.add_argument("run_id")
    skip.add_argument("step_id")
    skip.add_argument("--output", required=True, metavar="JSON", help="the step's output, as JSON")
    skip.add_argument("--reason", default="")
    skip.add_argument("--by", metavar="NAME")

    again = command(
        "ask-again",
        decisions.cmd_ask_again,
        "repair: ask a human step's question again; the failed steps using it rerun",
    )
    again.add_argument("run_id")
    again.add_argument("step_id", help="the human step whose answer a failed step used")
    again.add_argument("--reason", default="")
    again.add_argument("--by", metavar="NAME")

    stop = command("stop", decisions.cmd_stop, "repair: end a run that waits for a repair, as failed")
    stop.add_argument("run_id")
    stop.add_argument("--reason", default="")
    stop.add_argument("--by", metavar="NAME")

    fork = command("fork", forking.cmd_fork, "start a new run from a revision of another, carrying what succeeded")
    fork.add_argument("run_id")
    fork.add_argument("--revision", type=int, help="the revision to start from (default: the latest)")
    fork.add_argument("--plan", metavar="FILE", help="start from this edited plan instead; changed steps run again")
    fork.add_argument("--id", metavar="RUN_ID", help="the new run's id")
    fork.add_argument("--detach", action="store_true", help="print the new run's id and return at once")
    fork.add_argument("--by", metavar="NAME")

    console = command(
        "console",
        console_cmd.cmd_console,
        "serve the review console: the inbox and every decision, in a browser and over HTTP",
        json=False,
    )
    console.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    console.add_argument("--port", type=int, default=8400, help="port (default: 8400)")
    console.add_argument(
        "--auth",
        choices=["local", "users", "header"],
        default="local",
        help="who decides: local (your OS user; loopback only), users (passwords in --users), or header (set by "
        "a reverse proxy at --trusted-proxy)",
    )
    console.add_argument("--users", metavar="FILE", help="the users file (default: $STRATAGEM_HOME/console-users.yaml)")
    console.add_argument("--header", default="X-Forwarded-User", help="--auth header: the header naming the person")
    console.add_argument(
        "--trusted-proxy",
        action="append",
        dest="trusted_proxies",
        metavar="ADDRESS",
        help="--auth header: a proxy address or network; repeatable",
    )
    console.add_argument(
        "--public-url",
        action="append",
        dest="public_urls",
        metavar="URL",
        help="an address people open the console at, e.g. https://review.example.com behind a proxy; the "
        "console answers to no other name but its own address (default: $STRATAGEM_CONSOLE_URL); repeatable",
    )

    console_user = command(
        "console-user",
        console_cmd.cmd_console_user,
        "set a console password for NAME (ending their sessions), or remove NAME",
        json=False,
    )
    console_user.add_argument("name")
    console_user.add_argument("--users", metavar="FILE")
    how = console_user.add_mutually_exclusive_group()
    how.add_argument("--password-stdin", action="store_true", help="read the password from standard input")
    how.add_argument(
        "--remove", action="store_true", help="remove NAME and their API tokens; their sessions end at once"
    )

    console_token = command(
        "console-token",
        console_cmd.cmd_console_token,
        "make an API token acting for a person (printed once)",
        json=False,
    )
    console_token.add_argument("label", help="what the token is for, e.g. slack-bot")
    console_token.add_argument("--user", required=True, help="the person its decisions are recorded as")
    console_token.add_argument("--users", metavar="FILE")

    cancel = command("cancel", decisions.cmd_cancel, "cancel a run", json=False)
    cancel.add_argument("run_id")

    wait = command(
        "wait",
        following.cmd_wait,
        "follow a run until it ends, exiting like `run`; at a terminal, ask for its decisions as `run` does",
    )
    wait.add_argument("run_id")
    wait.add_argument("--by", metavar="NAME", help="your name, recorded with the decisions you take here")

    watch = command(
        "watch",
        following.cmd_watch,
        "stream a run's progress events from an offset until it ends; reconnects after a disconnect",
    )
    watch.add_argument("run_id")
    watch.add_argument(
        "--from",
        dest="after",
        type=int,
        default=0,
        metavar="SEQ",
        help="start after this event number (default: from the start)",
    )

    command(
        "down", processes.cmd_down, "stop this home's embedded Temporal server and background worker (runs are kept)"
    )

    keygen = command("keygen", decisions.cmd_keygen, "make a key pair to sign your decisions with (see SECURITY.md)")
    keygen.add_argument("name", help="the name your decisions carry, e.g. alice")
    keygen.add_argument(
        "--out", metavar="FILE", help="where to write the private key (default: $STRATAGEM_HOME/keys/NAME.key)"
    )

    audit = command(
        "audit", inspection.cmd_audit, "print every plan revision, decision and event as JSON Lines", json=False
    )
    audit.add_argument("run_id")

    show = command(
        "show", inspection.cmd_show, "show a plan revision as a graph, as Mermaid, or what changed between revisions"
    )
    show.add_argument("run_id")
    show.add_argument("--revision", type=int, metavar="N", help="this revision instead of the newest")
    shape = show.add_mutually_exclusive_group()
    shape.add_argument("--mermaid", action="store_true", help="print a Mermaid flowchart")
    shape.add_argument("--diff", nargs=2, type=int, metavar=("A", "B"), help="what changed from revision A to B")

    output = command(
        "output",
        inspection.cmd_output,
        "print a step's output (loaded from the output store if it is there): text as it is, other values as indented JSON",
    )
    output.add_argument("run_id")
    output.add_argument("step_id")
    output.add_argument(
        "--transcript", action="store_true", help="print an llm step's conversation instead, one message per block"
    )

    worker = command("worker", processes.cmd_worker, "run a worker: every role, or those named by --role", json=False)
    add_worker_arguments(worker)

    command(
        "server", processes.cmd_server, "run the embedded Temporal server (SQLite under STRATAGEM_HOME)", json=False
    )
    return top


def _positive(kind: type) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}' is not a {'whole ' if kind is int else ''}number") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"'{text}' is not a finite number")
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{text} is not above zero")
        return value

    return parse


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
    if args.command == "run" and not (args.goal or args.plan):
        render.errors.print("error: give a goal or --plan FILE")
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
