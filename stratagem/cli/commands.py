"""What each `stratagem` command does. Every function returns the process exit status."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import getpass
import json
import math
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator, Callable

from pydantic import ValidationError
from rich.text import Text
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.exceptions import ApplicationError, CancelledError, TerminatedError
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker

from ..client import AWAITING_QUERY, REGISTER_STATUS_HINT, Run, connect, get_run, has_status_attribute, start_run
from ..codec import codec_from
from ..config import DEFAULT_ADDRESS, Settings, stratagem_home
from ..errors import DecisionRefusedError, PlanFileError
from ..ledger import EventKind
from ..model_config import load_config, run_prices, with_defaults
from ..models import load_model, split_model_string
from ..plan import Author, AuthorKind, PlanDraft, StepKind
from ..plan_files import dump_plan, load_plan_file
from ..run import (
    STATUS_SEARCH_ATTRIBUTE,
    WORKFLOW_NAME,
    AnswerInput,
    ApproveInput,
    BudgetInput,
    DecisionKind,
    PendingDecision,
    Phase,
    RejectInput,
    ReviseInput,
    RunInput,
    RunOptions,
    RunResult,
)
from ..server import BackgroundWorker, EmbeddedServer, is_listening, is_local, owns_server
from ..store import default_store, is_stored, load_value
from ..tools import ToolRegistry
from ..usage import Budget
from ..validation import validate_plan
from ..telemetry import worker_plugins
from ..signing import SIGNING_KEY_ENV, DecisionPolicy, Signer
from ..worker import HostOnly, VerifyDecisions, build_worker, check_worker_args, host_activities, child_argv, describe_worker, run_processes, run_worker, workflow_runner

from . import render, show
from .errors import CliError


# Exit statuses: 0 the run succeeded (or the command did its job), 1 the run failed, was
# rejected or cancelled, 2 the user's input or environment is wrong, 130 interrupted.
FAILED, USAGE = 1, 2


def settings() -> Settings:
    config = Settings.from_env()
    codec_from(config)  # a malformed encryption key is reported before anything starts
    return config


def address_named(config: Settings) -> bool:
    """Whether the user chose the address (TEMPORAL_ADDRESS, or a profile), not the default."""
    return bool(os.environ.get("TEMPORAL_ADDRESS", "").strip()) or config.address != DEFAULT_ADDRESS


def embedded(config: Settings) -> EmbeddedServer:
    return EmbeddedServer(config.address, stratagem_home(), namespace=config.namespace)


def note(message: str, *, json_mode: bool = False) -> None:
    """Human-facing remarks; in --json mode they go to stderr so stdout stays one JSON document."""
    (render.errors if json_mode else render.console).print(message)


# How long `run` waits for a local server that listens but does not serve yet.
STARTING_SERVER_WAIT = 30.0


async def open_client(config: Settings, *, start_server: bool = False, json_mode: bool = False) -> Client:
    """Connect; for `run`, first start the embedded server if nothing listens at a local address."""
    if start_server and is_listening(config.address) and not address_named(config) and not owns_server(embedded(config)):
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
        note(
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


async def find_run(client: Client, run_id: str) -> tuple[Run, str]:
    """The run and its task queue, or a clear error if there is no such run."""
    run = get_run(client, run_id)
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
async def hosted_run(run_id: str) -> AsyncIterator[Run]:
    """A run to query or decide on, with its workflow hosted here meanwhile (see workflow_host)."""
    client = await open_client(settings())
    run, task_queue = await find_run(client, run_id)
    async with workflow_host(client, task_queue):
        yield run


@asynccontextmanager
async def workflow_host(client: Client, task_queue: str) -> AsyncIterator[None]:
    """A workflow-only worker for the length of a command.

    Queries and update validators run in a workflow worker. Hosting one here means status,
    approve and the rest work even while no `stratagem worker` runs; steps still wait for a
    real worker, which has the activities. No cache, so nothing sticks to this short-lived
    process when it exits. This process has no tools, so it leaves the work a workflow does
    in its own worker (local activities) to real workers (`HostOnly`).
    """
    from workflows import StratagemRun

    worker = Worker(
        client,
        task_queue=task_queue,
        workflows=[StratagemRun],
        activities=host_activities(),
        no_remote_activities=True,  # registered only to replay local ones: never take a real activity
        interceptors=[HostOnly(), VerifyDecisions(DecisionPolicy.from_env())],
        workflow_runner=workflow_runner(),
        max_cached_workflows=0,
        # A decision taken here moves the run on in this process: its spans (the review's end,
        # say) are exported from here, with the same ids the worker would give them.
        plugins=worker_plugins(),
    )
    async with worker:
        yield


# ---------------------------------------------------------------------------- run


def _absolute(model: str | None) -> str | None:
    """Scripted model files are read by the worker, which may run in another folder."""
    if model and model.startswith("scripted:"):
        return "scripted:" + str(Path(model.removeprefix("scripted:")).resolve())
    return model


def _default_executor(plan_file: Path | None, draft: PlanDraft | None) -> str | None:
    """An example's scripted responses (models.yaml beside the plan), when no executor is named."""
    if plan_file is None or draft is None or not any(s.kind is StepKind.llm for s in draft.steps):
        return None
    scripted = plan_file.resolve().with_name("models.yaml")
    return f"scripted:{scripted}" if scripted.exists() else None


def run_options(args: argparse.Namespace, plan_file: Path | None, draft: PlanDraft | None) -> RunOptions:
    """The run's options: the configuration file, overridden by the command line."""
    file = load_config(args.config)
    values: dict[str, object] = {
        "planner": args.planner or file.planner,
        "executor": args.executor or file.executor,
        "synthesizer": args.synthesizer or file.synthesizer,
        "tiers": {**file.tiers, **_tiers(args.tier)},
        "mode": args.mode,
        "auto_approve": args.auto_approve,
        "approvers": args.approvers or file.approvers,
    }
    if not values["executor"] and not values["planner"]:
        values["executor"] = _default_executor(plan_file, draft)
        if values["executor"]:
            note(
                f"note: no API key is used; llm steps answer from scripted responses in "
                f"{str(values['executor']).removeprefix('scripted:')}",
                json_mode=args.json,
            )
    values = with_defaults(values)
    for key in ("planner", "executor", "synthesizer"):
        values[key] = _absolute(values[key])  # type: ignore[arg-type]
    values["tiers"] = {name: _absolute(model) for name, model in values["tiers"].items()}  # type: ignore[union-attr]
    if args.mode == "joint":
        if args.plan:
            raise CliError("--mode joint takes a goal, not --plan")
        if not values["executor"]:
            raise CliError("--mode joint needs a model: --executor MODEL (or --planner MODEL)")
        values["joint_tools"] = args.allow_tools
    elif args.allow_tools:
        raise CliError("--allow-tool is for --mode joint; in a plan, an llm step lists its tools")
    overrides = {
        "tokens": args.budget_tokens, "cost_usd": args.budget_cost,
        "model_calls": args.budget_calls, "wall_clock_seconds": args.budget_seconds,
    }
    budget = Budget.model_validate({**file.budget.model_dump(), **{k: v for k, v in overrides.items() if v is not None}})
    rounds = args.max_tool_rounds or file.max_tool_rounds
    options = RunOptions(**values, budget=budget, **({"max_tool_rounds": rounds} if rounds else {}))
    options.prices = run_prices(options.models, file.prices, need_all=budget.cost_usd is not None)
    return options


def _tiers(specs: list[str]) -> dict[str, str]:
    tiers = {}
    for spec in specs:
        name, sep, model = spec.partition("=")
        if not sep or not name.strip() or not model.strip():
            raise CliError(f"--tier '{spec}' is not NAME=MODEL (for example fast=openai:gpt-4.1-nano)")
        split_model_string(model.strip())
        tiers[name.strip()] = model.strip()
    return tiers


async def cmd_run(args: argparse.Namespace) -> int:
    config = settings()
    plan_file = Path(args.plan) if args.plan else None
    if not args.tools and plan_file is not None and plan_file.resolve().with_name("tools.py").exists():
        # A plan folder may carry its own tools (as the examples do): plan.yaml + tools.py.
        args.tools = [str(plan_file.resolve().with_name("tools.py"))]
        note(f"note: loading tools from {args.tools[0]}", json_mode=args.json)
    registry = ToolRegistry.from_modules(args.tools)
    draft = load_plan_file(plan_file) if plan_file else None
    options = run_options(args, plan_file, draft)
    if draft is not None:
        validate_plan(draft, registry.catalog(), **options.plan_rules())
    elif options.mode.value == "joint":
        unknown = sorted(set(options.joint_tools or []) - set(registry.catalog().names))
        if unknown:
            raise CliError(f"--allow-tool names unknown tool(s): {', '.join(unknown)} (available: {', '.join(registry.catalog().names)})")
    elif not options.planner:
        raise CliError("a goal needs a planner model: --planner provider:name (for example scripted:planner.yaml)")
    by = reviewer(args)
    try:
        run_input = RunInput(
            goal=args.goal, plan=draft, author=Author(kind=AuthorKind.human, name=by) if draft else None, options=options
        )
    except ValidationError as exc:
        raise CliError(str(exc.errors()[0]["msg"]).removeprefix("Value error, ")) from None
    if not (args.detach and not is_local(config.address)):
        # The worker that will call the models runs with this environment (the background
        # worker, or one hosted by this command): check now that each model loads (a script
        # file exists, an API key is set), rather than mid-run.
        for model in options.models:
            load_model(model)
    client = await open_client(config, start_server=True, json_mode=args.json)

    if owns_server(embedded(config)):
        # The embedded setup: one background worker serves every run, so runs go on after this
        # command ends and decisions from other terminals take effect.
        background = BackgroundWorker(stratagem_home(), config.task_queue, config.workspace.resolve())
        done = await asyncio.to_thread(background.ensure, args.tools)
        if done:
            note(done, json_mode=args.json)
        # The run keeps this folder's workspace, whichever folder the next run starts from.
        run_input.options.workspace = str(config.workspace.resolve())
        run = await start_run(client, run_input, task_queue=config.task_queue, run_id=args.id)
        if args.detach:
            return detached(run, json_mode=args.json)
        note(f"run {run.id} started", json_mode=args.json)
        # Hosting the workflow here too keeps questions and decisions working if the
        # background worker dies while we follow (steps then wait until it is back).
        async with workflow_host(client, config.task_queue):
            return await follow_attached(run, args, by)

    if args.detach:
        run = await start_run(client, run_input, task_queue=config.task_queue, run_id=args.id)
        note(f"(a worker must serve task queue {config.task_queue}: stratagem worker --tools ...)", json_mode=args.json)
        return detached(run, json_mode=args.json)

    # A server this command does not manage: host a worker here for as long as we follow the run.
    async with build_worker(client, task_queue=config.task_queue, registry=registry, workspace=config.workspace):
        run = await start_run(client, run_input, task_queue=config.task_queue, run_id=args.id)
        note(f"run {run.id} started", json_mode=args.json)
        return await follow_attached(run, args, by)


def detached(run: Run, *, json_mode: bool) -> int:
    if json_mode:
        render.emit_json({"run_id": run.id})
    else:
        render.console.print(run.id)
        note(f"follow it with: stratagem wait {run.id}    (status: stratagem status {run.id})")
    return 0


def at_terminal(args: argparse.Namespace) -> bool:
    """Whether a person sits at this command: it may ask them (stdin and stdout a terminal, not --json)."""
    return sys.stdin.isatty() and sys.stdout.isatty() and not args.json


async def follow_attached(run: Run, args: argparse.Namespace, by: str) -> int:
    """Follow a run as `run` and `wait` do: asking for its decisions at a terminal, printing
    the commands that take them otherwise. Ctrl-C stops following, never the run."""
    try:
        return await follow(run, interactive=at_terminal(args), json_mode=args.json, by=by)
    except (KeyboardInterrupt, asyncio.CancelledError):
        note(
            f"\nstopped following; run {run.id} goes on. Follow it again (at a terminal, it asks what is still open) "
            f"with: stratagem wait {run.id}",
            json_mode=args.json,
        )
        return 130


def _key(pending: PendingDecision) -> tuple[str, int, str | None]:
    return (pending.kind.value, pending.revision, pending.step_id)


class Prompter:
    """Questions at the terminal that never block the event loop.

    stdin is read only when a line is ready (`loop.add_reader`), so progress keeps printing
    while a question is open, a question decided elsewhere can be dropped, one Ctrl-C stops
    everything, and an editor owns the terminal while it runs.
    """

    def __init__(self) -> None:
        self.closed = False

    async def line(self, timeout: float | None) -> str | None:
        """The next line typed, or None on timeout. End of input closes the prompter."""
        if self.closed:
            await asyncio.sleep(timeout or 0)
            return None
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[str] = loop.create_future()
        descriptor = sys.stdin.fileno()

        def on_readable() -> None:
            if not ready.done():
                ready.set_result(sys.stdin.readline())

        loop.add_reader(descriptor, on_readable)
        try:
            text = await asyncio.wait_for(ready, timeout)
        except asyncio.TimeoutError:
            return None
        finally:
            loop.remove_reader(descriptor)
        if text == "":
            self.closed = True
            return None
        return text.strip()


def _question(pending: PendingDecision) -> str:
    if pending.kind is DecisionKind.plan_approval:
        return f"approve revision {pending.revision}? [a]pprove / [r]eject / [e]dit / [l]ater: "
    if pending.kind is DecisionKind.step_approval:
        return f"{pending.prompt}? [y]es / [n]o / [l]ater: "
    if pending.kind is DecisionKind.budget:
        return (
            f"paused: {pending.prompt}\n"
            "raise it (for example: tokens=200000 cost=5 calls=100 seconds=3600), [s]top, or [l]ater: "
        )
    return f"{pending.step_id} asks: {pending.prompt}\n(type the answer; JSON if it starts with {{ or [; empty for later)\n> "


async def follow(run: Run, *, interactive: bool, json_mode: bool, by: str) -> int:
    """Print progress until the run ends; in a terminal, ask for the decisions it waits on."""
    seen = 0
    hinted: set[tuple[str, int, str | None]] = set()
    later: set[tuple[str, int, str | None]] = set()
    drafts: dict[int, Path] = {}
    asking: PendingDecision | None = None
    prompter = Prompter() if interactive else None
    while True:
        status = await run.status()
        ledger = await run.ledger()
        fresh = ledger.events[seen:]
        if not json_mode:
            for event in fresh:
                render.console.print(render.event_line(event))
                if event.kind is EventKind.plan_proposed and event.revision is not None:
                    plan = ledger.revision(event.revision)
                    render.console.print(render.plan_table(plan, title=f"Plan revision {plan.revision}: {plan.goal}"))
                    if plan.revision > 1:  # what a reviewer of a revision needs first: what changed
                        previous = ledger.revision(plan.revision - 1)
                        for line in show.diff_lines(show.diff_revisions(previous, plan)):
                            render.console.print(line)
        seen = len(ledger.events)
        pending = {_key(p): p for p in status.pending}
        if asking is not None and _key(asking) not in pending:
            render.console.print("(decided elsewhere)")
            asking = None
        if status.phase.finished:
            break
        if prompter is not None and not prompter.closed:
            if asking is None:
                asking = next((p for k, p in pending.items() if k not in later), None)
                if asking is not None:
                    render.console.print(_question(asking), end="", markup=False)
            elif fresh:
                render.console.print(_question(asking), end="", markup=False)
            if asking is not None:
                reply = await prompter.line(timeout=0.3)
                if reply is not None:
                    if await respond(run, asking, reply, by, prompter, drafts) == "later":
                        later.add(_key(asking))
                        render.console.print(
                            f"later: still following run {run.id}; decide with the command below from any terminal, "
                            f"or press Ctrl-C and run `stratagem wait {run.id}` to be asked again",
                            markup=False,
                        )
                    asking = None
                continue
        for key, waiting in pending.items():
            if key not in hinted:
                note(render.decision_hint(run.id, waiting), json_mode=json_mode)
                hinted.add(key)
        await asyncio.sleep(0.3)
    return await finish(run, json_mode=json_mode)


async def finish(run: Run, *, json_mode: bool) -> int:
    try:
        result = await run.result()
    except WorkflowFailureError as exc:
        cause = exc.cause
        revision = (await run.status()).revision
        if isinstance(cause, CancelledError):
            result = RunResult(run_id=run.id, status=Phase.cancelled, revision=revision, reason="cancelled")
        elif isinstance(cause, TerminatedError):
            result = RunResult(run_id=run.id, status=Phase.failed, revision=revision, reason=f"terminated: {cause.message}")
        else:
            reason = cause.message if isinstance(cause, ApplicationError) else str(cause)
            result = RunResult(run_id=run.id, status=Phase.failed, revision=revision, reason=reason)
    if json_mode:
        render.emit_json(result.model_dump(mode="json"))
    else:
        render.result_view(result)
    return 0 if result.status is Phase.succeeded else FAILED


async def _reason(prompter: Prompter) -> str:
    render.console.print("reason: ", end="")
    return await prompter.line(timeout=None) or "rejected at the terminal"


async def respond(
    run: Run, pending: PendingDecision, reply: str, by: str, prompter: Prompter, drafts: dict[int, Path]
) -> str:
    """Act on a reply. Returns "later" when the person deferred the question."""
    choice = reply.lower()
    try:
        if pending.kind is DecisionKind.plan_approval:
            if choice.startswith("a"):
                await run.approve(ApproveInput(by=by, revision=pending.revision))
            elif choice.startswith("r"):
                await run.reject(RejectInput(by=by, revision=pending.revision, reason=await _reason(prompter)))
            elif choice.startswith("e"):
                await edit_plan(run, pending.revision, by, drafts)
            elif choice.startswith("l"):
                return "later"
            else:
                render.console.print("please answer a, r, e or l")
        elif pending.kind is DecisionKind.step_approval:
            if choice.startswith("y"):
                await run.approve(ApproveInput(by=by, step_id=pending.step_id))
            elif choice.startswith("n"):
                await run.reject(RejectInput(by=by, step_id=pending.step_id, reason=await _reason(prompter)))
            elif choice.startswith("l"):
                return "later"
            else:
                render.console.print("please answer y, n or l")
        elif pending.kind is DecisionKind.budget:
            if choice in ("", "l", "later"):
                return "later"
            if choice in ("s", "stop"):
                await run.budget(BudgetInput(by=by, stop=True, reason=await _reason(prompter)))
            else:
                try:
                    limits = parse_limits(reply)
                except CliError as exc:
                    render.errors.print(f"error: {exc}", markup=False)
                    return "retry"
                await run.budget(BudgetInput(by=by, **limits))
        else:
            if not reply:
                return "later"
            answer: object = reply
            if reply.startswith(("{", "[")):
                try:
                    answer = json.loads(reply)
                except json.JSONDecodeError as exc:
                    render.errors.print(f"error: that answer is not valid JSON: {json_problem(exc)}; try again", markup=False)
                    return "retry"
            await run.answer(AnswerInput(step_id=pending.step_id or "", answer=answer, by=by))
    except DecisionRefusedError as exc:
        render.errors.print(f"error: {exc}", markup=False)
    return "done"


async def edit_plan(run: Run, revision: int, by: str, drafts: dict[int, Path]) -> None:
    """Open $EDITOR on the plan under review; a saved, valid plan becomes the next revision.

    An edit that cannot be used is kept, and the next edit reopens it, so no work is lost."""
    path = drafts.get(revision)
    if path is None or not path.exists():
        plan = await run.plan()
        if plan is None:
            return
        draft = plan.draft().model_copy(update={"reason": ""})  # the reason for *this* edit, which the reviewer writes
        succeeded = sorted(sid for sid, record in (await run.ledger()).steps.items() if record.status.value == "succeeded")
        header = (
            f"# Revision {revision} of run {run.id}. Edit the steps, then write why in `reason:` and save;\n"
            "# Nothing changes until a valid plan is saved; a broken edit is kept for the next `e`.\n"
            + (f"# Steps that already succeeded keep their results and do not run again: {', '.join(succeeded)}.\n" if succeeded else "")
        )
        text = dump_plan(draft)
        if "\nreason:" not in "\n" + text:
            text += "reason: ''\n"
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", prefix=f"{run.id}-r{revision}-", delete=False) as handle:
            handle.write(header + text)
            path = drafts[revision] = Path(handle.name)
    editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
    try:
        status = await asyncio.to_thread(subprocess.call, [*shlex.split(editor), str(path)])
    except OSError as exc:
        render.errors.print(f"error: cannot start the editor '{editor}': {exc.strerror}; set EDITOR", markup=False)
        return
    if status != 0:
        render.errors.print(f"error: the editor exited with status {status}; the plan was not changed (your edit is kept in {path})", markup=False)
        return
    try:
        draft = load_plan_file(path)
        reason = draft.reason.strip() or "edited in the terminal"
        outcome = await run.revise(ReviseInput(by=by, plan=draft, revision=revision, reason=reason))
    except (PlanFileError, DecisionRefusedError) as exc:
        render.errors.print(f"error: {exc}\nyour edit is kept in {path}; choose e to fix it", markup=False)
        return
    path.unlink(missing_ok=True)
    drafts.pop(revision, None)
    render.console.print(outcome.message)


# ---------------------------------------------------------------------------- other commands


async def cmd_status(args: argparse.Namespace) -> int:
    async with hosted_run(args.run_id) as run:
        status = await run.status()
        if args.json:
            render.emit_json(status.model_dump(mode="json"))
            return 0
        ledger = await run.ledger()
        plan = await run.plan()
    render.status_view(status, ledger, plan)
    return 0


LIST_STATUSES = {
    "running": "Running",
    "completed": "Completed",
    "failed": "Failed",
    "cancelled": "Canceled",
    "terminated": "Terminated",
    "timed-out": "TimedOut",
}
_EXECUTION_STATUS = {
    WorkflowExecutionStatus.RUNNING: "running",
    WorkflowExecutionStatus.COMPLETED: "completed",
    WorkflowExecutionStatus.FAILED: "failed",
    WorkflowExecutionStatus.CANCELED: "cancelled",
    WorkflowExecutionStatus.TERMINATED: "terminated",
    WorkflowExecutionStatus.TIMED_OUT: "timed-out",
}


UNREADABLE_MEMO = {"goal": "(unreadable: encrypted with a key this shell lacks)"}


async def _memo(execution: Any) -> dict[str, Any]:
    """A listed run's memo; a run whose memo this shell cannot decode (encrypted with another
    key) is still listed, saying so, rather than ending the listing with a traceback."""
    try:
        return await execution.memo()
    except Exception:
        return dict(UNREADABLE_MEMO)


AWAITING = "awaiting-approval"
_WAITING_FOR = {
    "plan_approval": "approval of revision {revision}",
    "step_approval": "approval of step {step_id}",
    "human_answer": "an answer for step {step_id}",
    "budget": "a budget decision",
}


async def _has_pending_activities(client: Client, run_id: str) -> bool:
    try:
        description = await client.get_workflow_handle(run_id).describe()
    except RPCError:
        return False
    return bool(description.raw_description.pending_activities)


async def cmd_list(args: argparse.Namespace) -> int:
    config = settings()
    client = await open_client(config)
    if args.status == AWAITING:
        return await _inbox(client, config, args)
    # A run that continued as new leaves closed executions behind; list each run once.
    query = f"WorkflowType = '{WORKFLOW_NAME}' AND ExecutionStatus != 'ContinuedAsNew'"
    if args.status:
        query += f" AND ExecutionStatus = '{LIST_STATUSES[args.status]}'"
    rows = []
    async for execution in client.list_workflows(query, limit=args.limit):
        memo = await _memo(execution)
        status = _EXECUTION_STATUS.get(execution.status, "unknown") if execution.status else "unknown"
        phase = memo.get("phase", status)
        if status == "running" and phase == Phase.awaiting_approval.value and await _has_pending_activities(client, execution.id):
            # A run writes "running" into its memo one workflow task after the approval (so the
            # first step starts sooner); its steps already in flight say it is running.
            phase = Phase.running.value
        rows.append(
            {
                "run_id": execution.id,
                "status": status,
                # The run's own outcome (succeeded, rejected, ...): a rejected run is a completed
                # workflow. A terminated or timed-out run never recorded its end, so say that.
                "phase": status if status in ("terminated", "timed-out") else phase,
                "started_at": execution.start_time.isoformat() if execution.start_time else None,
                "closed_at": execution.close_time.isoformat() if execution.close_time else None,
                "goal": memo.get("goal", ""),
            }
        )
    return _emit_rows(
        rows, json_mode=args.json, empty="no runs",
        cells=lambda row: [row["run_id"], row["phase"], _when(row["started_at"]), row["goal"]],
    )


def _when(moment: str | None) -> str:
    return (moment or "")[:19].replace("T", " ")


def _emit_rows(
    rows: list[dict[str, Any]], *, json_mode: bool, empty: str, cells: Callable[[dict[str, Any]], list[str]]
) -> int:
    """A listing: the rows as one JSON document, or for people a line each (or `empty`), in
    columns as wide as their widest cell; the last column (the goal) is left as it is."""
    if json_mode:
        render.emit_json(rows)
        return 0
    if not rows:
        render.console.print(empty)
    table = [[render.plain(str(cell)) for cell in cells(row)] for row in rows]
    widths = [max(render.cell_width(line[i]) for line in table) for i in range(len(table[0]) - 1)] if table else []
    for line in table:
        padded = [cell + " " * (width - render.cell_width(cell)) for cell, width in zip(line, widths)]
        render.console.print("  ".join([*padded, line[-1]]).rstrip(), markup=False)
    return 0


async def _inbox(client: Client, config: Settings, args: argparse.Namespace) -> int:
    """Every run in the namespace a person must act on, the longest waiting first: a visibility
    query on the StratagemStatus search attribute, not a scan of the runs."""
    if not await has_status_attribute(client):
        raise CliError(
            f"the approval inbox needs the {STATUS_SEARCH_ATTRIBUTE} search attribute in namespace {config.namespace}; "
            f"register it with `{REGISTER_STATUS_HINT} --namespace {config.namespace}` (runs started afterwards appear)"
        )
    rows = []
    async for execution in client.list_workflows(AWAITING_QUERY):
        memo = await _memo(execution)
        waiting = [w for w in memo.get("waiting") or [] if isinstance(w, dict)]
        if waiting and all(w.get("kind") == "plan_approval" for w in waiting) and await _has_pending_activities(client, execution.id):
            continue  # approved a moment ago: its steps run, and the run says so with its next task
        since = min((str(w.get("since")) for w in waiting if w.get("since")), default=None)
        rows.append(
            {
                "run_id": execution.id,
                "waiting_for": [_WAITING_FOR.get(str(w.get("kind")), str(w.get("kind"))).format(**w) for w in waiting],
                "waiting": waiting,
                "since": since or (execution.start_time.isoformat() if execution.start_time else None),
                "goal": memo.get("goal", ""),
            }
        )
    # Oldest first. Visibility sorts by start time, newest first, so the order is made here.
    rows.sort(key=lambda row: row["since"] or "")
    return _emit_rows(
        rows[: args.limit], json_mode=args.json, empty="no run is waiting for a person",
        cells=lambda row: [row["run_id"], f"since {_when(row['since'])}", "; ".join(row["waiting_for"]), row["goal"]],
    )


def reviewer(args: argparse.Namespace) -> str:
    """Who decides: the signing key's name when one is set (STRATAGEM_SIGNING_KEY), else --by or the login."""
    signer = Signer.from_env()
    if signer is None:
        return args.by or getpass.getuser()
    if args.by and args.by != signer.name:
        raise CliError(f"--by {args.by} does not match the signing key's name '{signer.name}' ({SIGNING_KEY_ENV}); drop --by")
    return signer.name


async def _decide(args: argparse.Namespace, decision: str, payload: object) -> int:
    async with hosted_run(args.run_id) as run:
        outcome = await getattr(run, decision)(payload)
    if args.json:
        render.emit_json(outcome.model_dump(mode="json"))
    else:
        render.console.print(f"{run.id}: {outcome.message} (revision {outcome.revision}, {outcome.phase.value})")
    return 0


async def cmd_approve(args: argparse.Namespace) -> int:
    decision = ApproveInput(by=reviewer(args), revision=args.revision, step_id=args.step, comment=args.comment)
    return await _decide(args, "approve", decision)


async def cmd_reject(args: argparse.Namespace) -> int:
    decision = RejectInput(by=reviewer(args), reason=args.reason, revision=args.revision, step_id=args.step)
    return await _decide(args, "reject", decision)


async def cmd_revise(args: argparse.Namespace) -> int:
    draft = load_plan_file(args.plan_file)
    decision = ReviseInput(by=reviewer(args), plan=draft, revision=args.revision, reason=args.reason)
    return await _decide(args, "revise", decision)


async def cmd_answer(args: argparse.Namespace) -> int:
    answer: object = args.text
    if args.json_value:
        try:
            answer = json.loads(args.text)
        except json.JSONDecodeError as exc:
            raise CliError(f"--json-value: the answer is not JSON: {json_problem(exc)}") from None
    return await _decide(args, "answer", AnswerInput(step_id=args.step_id, answer=answer, by=reviewer(args)))


def json_problem(exc: json.JSONDecodeError) -> str:
    """The parser's whole message: `exc.msg` alone ends mid-sentence ("Unterminated string starting at")."""
    return f"{exc.msg}: line {exc.lineno}, column {exc.colno}"


_LIMIT_NAMES = {"tokens": "tokens", "cost": "cost_usd", "calls": "model_calls", "seconds": "wall_clock_seconds"}


def parse_limits(text: str) -> dict[str, float]:
    """`tokens=200000 cost=5` as BudgetInput fields; a clear error for anything else."""
    limits: dict[str, float] = {}
    for part in text.replace(",", " ").split():
        name, sep, value = part.partition("=")
        if not sep or name not in _LIMIT_NAMES:
            raise CliError(f"'{part}' is not a limit; write name=value with name one of {', '.join(_LIMIT_NAMES)}")
        try:
            number = float(value)
        except ValueError:
            raise CliError(f"'{value}' is not a number (in '{part}')") from None
        if not math.isfinite(number) or number <= 0:
            raise CliError(f"{name} must be a finite number above zero (in '{part}')")
        if name in ("tokens", "calls"):
            if not number.is_integer():
                raise CliError(f"{name} must be a whole number (in '{part}')")
            number = int(number)
        limits[_LIMIT_NAMES[name]] = number
    if not limits:
        raise CliError("give at least one limit, for example tokens=200000")
    return limits


async def cmd_budget(args: argparse.Namespace) -> int:
    by = reviewer(args)
    if args.stop:
        if any(v is not None for v in (args.tokens, args.cost, args.calls, args.seconds)):
            raise CliError("--stop ends the run; give it no limits")
        decision = BudgetInput(by=by, stop=True, reason=args.reason or "stopped at the budget")
    else:
        given = {"tokens": args.tokens, "cost": args.cost, "calls": args.calls, "seconds": args.seconds}
        limits = {_LIMIT_NAMES[k]: v for k, v in given.items() if v is not None}
        if not limits:
            raise CliError("give a limit to raise (--tokens, --cost, --calls, --seconds) or --stop")
        decision = BudgetInput(by=by, reason=args.reason or "", **limits)
    return await _decide(args, "budget", decision)


async def cmd_cancel(args: argparse.Namespace) -> int:
    client = await open_client(settings())
    run, _ = await find_run(client, args.run_id)
    description = await run.handle.describe()
    if description.status != WorkflowExecutionStatus.RUNNING:
        state = _EXECUTION_STATUS.get(description.status, "finished")
        raise CliError(f"run {run.id} has already finished ({state}); there is nothing to cancel")
    await run.cancel()
    render.console.print(f"{run.id}: cancellation requested")
    return 0


async def cmd_wait(args: argparse.Namespace) -> int:
    config = settings()
    client = await open_client(config)
    run, task_queue = await find_run(client, args.run_id)
    if owns_server(embedded(config)):
        # After a restart, the background worker may be gone: bring it back with its tools.
        background = BackgroundWorker(stratagem_home(), task_queue, config.workspace.resolve())
        done = await asyncio.to_thread(background.ensure, [], models=False)
        if done:
            note(done, json_mode=args.json)
    async with workflow_host(client, task_queue):
        # At a terminal, the same questions as `run` asks: after a Ctrl-C or an `l`, this is how
        # a person gets them back.
        return await follow_attached(run, args, reviewer(args) if at_terminal(args) else "")


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


async def cmd_watch(args: argparse.Namespace) -> int:
    """Print the run's events after `--from`, following it to its end. A lost connection is
    retried from the last event printed, so nothing is missed or repeated; `--json` prints one
    event per line with its `seq`, the offset to resume from."""
    if args.after < 0:
        raise CliError("--from takes an event number, 0 or more")
    config = settings()
    client = await open_client(config)
    run, task_queue = await find_run(client, args.run_id)
    after, delay = args.after, 0.5
    async with workflow_host(client, task_queue):
        while True:
            try:
                page = await run.events(after)
            except Exception as exc:
                if not connection_lost(exc):
                    raise
                note(f"lost the connection to Temporal at {config.address}; retrying from event {after + 1}", json_mode=True)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10)
                continue
            delay = 0.5
            for event in page.events:
                if args.json:
                    print(json.dumps(event.model_dump(mode="json"), sort_keys=True), flush=True)
                else:
                    render.console.print(Text.assemble(f"{event.seq:>5} ", render.event_line(event)))
                after = event.seq
            if page.phase.finished and after >= page.last_seq:
                return 0 if page.phase is Phase.succeeded else FAILED
            if after >= page.last_seq:
                await asyncio.sleep(0.3)


async def cmd_down(args: argparse.Namespace) -> int:
    """Stop what `run` started in this home: the background worker, then the embedded server.
    Runs are safe in the server's database; the next `run` or `stratagem server` carries on."""
    config = settings()
    home = stratagem_home()
    worker = await asyncio.to_thread(BackgroundWorker(home, config.task_queue, config.workspace.resolve()).stop)
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


async def cmd_keygen(args: argparse.Namespace) -> int:
    """Write a private key (readable by you only) and print the public entry for the workers."""
    signer = Signer.generate(args.name)
    path = Path(args.out) if args.out else stratagem_home() / "keys" / f"{signer.name}.key"
    if path.exists():
        raise CliError(f"{path} already exists; choose another --out or remove it first")
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        raise CliError(f"cannot write {path}: {exc.strerror}") from None
    with os.fdopen(fd, "w") as file:
        file.write(signer.private_line() + "\n")
    if args.json:
        render.emit_json({"name": signer.name, "private_key_file": str(path), "approver_key": signer.public_line()})
    else:
        render.console.print(f"private key written to {path} (keep it to yourself); sign with:\n  export {SIGNING_KEY_ENV}={path}")
        render.console.print(f"give the workers the public key, in STRATAGEM_APPROVER_KEYS:\n  {signer.public_line()}")
    return 0


async def cmd_audit(args: argparse.Namespace) -> int:
    async with hosted_run(args.run_id) as run:
        ledger = await run.ledger()
    for record in ledger.audit_records():
        print(json.dumps(record, default=str, sort_keys=True))
    return 0


async def cmd_show(args: argparse.Namespace) -> int:

    async with hosted_run(args.run_id) as run:
        ledger = await run.ledger()
        status = None if args.json or args.mermaid or args.diff else await run.status()
    if args.diff:
        old, new = (show.pick_revision(ledger, n) for n in args.diff)
        diff = show.diff_revisions(old, new)
        if args.json:
            render.emit_json(diff)
        else:
            for line in show.diff_lines(diff):
                render.console.print(line, markup=False)
        return 0
    plan = show.pick_revision(ledger, args.revision)
    if args.mermaid:
        print(show.mermaid(plan, ledger), end="")
    elif args.json:
        render.emit_json(show.plan_json(plan, ledger))
    else:
        render.console.print(show.plan_view(plan, ledger, phase=status.phase.value if status else None))
    return 0


async def cmd_output(args: argparse.Namespace) -> int:
    async with hosted_run(args.run_id) as run:
        ledger = await run.ledger()
    record = ledger.steps.get(args.step_id)
    if record is None:
        known = ", ".join(ledger.steps) or "none"
        raise CliError(f"run {run.id} has no step '{args.step_id}' (steps: {known})")
    value = record.transcript if args.transcript else record.output
    if args.transcript and value is None:
        raise CliError(f"step '{args.step_id}' has no transcript (only llm steps that ran have one)")
    if not args.transcript and record.status.value != "succeeded":
        raise CliError(f"step '{args.step_id}' has no output: it is {record.status.value}")
    if is_stored(value):
        value = await asyncio.to_thread(load_value, default_store(), value)
    if args.json:
        render.emit_json(value)
    else:
        text = render.transcript_text(value) if args.transcript and isinstance(value, list) else render.readable(value)
        if sys.stdout.isatty():
            render.console.print(text, markup=False)  # what a model wrote: control characters shown, not obeyed
        else:
            print(text)  # the value itself, for a file or a pipe
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    config = settings()
    options = check_worker_args(args)
    if not is_listening(config.address):
        raise CliError(f"no Temporal server is reachable at {config.address}; start one with `stratagem server`")
    if not options.tools:
        recorded = BackgroundWorker(stratagem_home(), config.task_queue, config.workspace.resolve()).recorded_tools()
        if recorded:
            # Every worker on a task queue must offer the same tools as the others.
            options = dataclasses.replace(options, tools=tuple(recorded))
            note(f"using the tools of this home's background worker: {', '.join(recorded)}")
    ToolRegistry.from_modules(list(options.tools))  # fail fast, before connecting, on a bad tool module
    if options.processes > 1:
        note(f"starting {options.processes} worker processes")
        return run_processes(child_argv(options), options.processes)
    note(f"worker on {config.address}, namespace {config.namespace}; {describe_worker(options, config.task_queue)}")
    asyncio.run(run_worker(config, options))
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
