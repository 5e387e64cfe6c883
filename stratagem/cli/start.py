"""`stratagem run`: a run's options from the configuration file and the command line, then
starting the run (and the embedded server and background worker when this home has them) and
following it."""

from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path
from typing import overload

from pydantic import ValidationError
from temporalio.client import Client

from stratagem.cli import render
from stratagem.cli.arguments import Commands, positive
from stratagem.cli.bulk import Batch, start_rows
from stratagem.cli.decisions import reviewer
from stratagem.cli.errors import CliError
from stratagem.cli.following import follow_attached
from stratagem.cli.library import add_process_options, run_target, source_file
from stratagem.cli.process_inputs import is_bulk, read_rows, single_run, typed_pairs
from stratagem.cli.session import (
    RUN_TIMEOUT,
    background_worker,
    embedded,
    open_client,
    settings,
    watching_worker,
    workflow_host,
)
from stratagem.client import RunHandle, start_run
from stratagem.common.errors import ModelConfigError
from stratagem.domain.plan import Author, AuthorKind, PlanDraft, StepKind
from stratagem.domain.process import ProcessRun
from stratagem.domain.run_options import escalation_problem
from stratagem.domain.run_types import EscalationTimeoutAction, FailureAction, Mode, RunInput, RunOptions
from stratagem.domain.usage import Budget
from stratagem.domain.validation import plan_notes, validate_plan
from stratagem.io.model_config import load_config, run_prices
from stratagem.io.plan_files import load_plan_file
from stratagem.models import load_model, split_model_string
from stratagem.models.scripted import SCRIPTED_DIRS_ENV, allow_dirs
from stratagem.process_runs import InputsRefusedError, start_process
from stratagem.server import is_local, owns_server
from stratagem.tools import ToolRegistry
from stratagem.worker import build_worker


@overload
def _absolute(model: str) -> str: ...


@overload
def _absolute(model: str | None) -> str | None: ...


def _absolute(model: str | None) -> str | None:
    """Scripted model files are read by the worker, which may run in another folder."""
    if model and model.startswith("scripted:"):
        return "scripted:" + str(Path(model.removeprefix("scripted:")).resolve())
    return model


def scripted_folders(models: list[str]) -> list[Path]:
    """The folders of the scripted model files a command names (made absolute by `_absolute`)."""
    found = [Path(m.removeprefix("scripted:")).parent for m in models if m.startswith("scripted:")]
    return sorted(set(found))


def _default_executor(plan_file: Path | None, draft: PlanDraft | None) -> str | None:
    """An example's scripted responses (models.yaml beside the plan), when no executor is named."""
    if plan_file is None or draft is None or not any(s.kind is StepKind.llm for s in draft.steps):
        return None
    scripted = plan_file.resolve().with_name("models.yaml")
    return f"scripted:{scripted}" if scripted.exists() else None


def add_run(commands: Commands) -> None:
    """`stratagem run`'s options: `run_options` turns them into the run's."""
    run = commands.add("run", cmd_run, "start a run from a goal, a plan file or a process, and follow it")
    source = run.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "goal",
        nargs="?",
        help="what to achieve, a sentence (needs --planner); or, one word, a process's name from the library",
    )
    source.add_argument("--plan", metavar="FILE", help="a plan file (YAML or JSON) written by a person, or a process")
    source.add_argument("--process", metavar="NAME", help="a process from the library (stratagem processes list)")
    add_process_options(run)
    add_run_options(run)
    run.add_argument("--detach", action="store_true", help="print the run id and return at once")
    run.add_argument("--id", metavar="RUN_ID", help="choose the run id")
    run.add_argument("--by", metavar="NAME", help="your name, recorded with your decisions")


def add_run_options(run: argparse.ArgumentParser) -> None:
    """The options a run takes besides what it runs (tools, models, budget, approvers, escalation):
    `run`'s, and `schedule create`'s for the runs a schedule starts. `run_options` reads them."""
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
    run.add_argument("--max-tool-rounds", type=positive(int), metavar="N", help="model calls one llm step may make")
    run.add_argument("--budget-tokens", type=positive(int), metavar="N", help="pause the run past this many tokens")
    run.add_argument(
        "--budget-cost", type=positive(float), metavar="USD", help="pause the run past this estimated cost"
    )
    run.add_argument("--budget-calls", type=positive(int), metavar="N", help="pause the run past this many model calls")
    run.add_argument(
        "--budget-seconds", type=positive(float), metavar="N", help="pause the run this long after it started"
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
        "--quorum",
        type=positive(int),
        metavar="N",
        help="each plan revision needs N different people's approval (a step sets its own: quorum: N)",
    )
    run.add_argument(
        "--four-eyes",
        action="store_true",
        help="whoever started the run, or wrote what is reviewed, may not approve the plan or a gated step",
    )
    run.add_argument(
        "--on-failure",
        choices=[action.value for action in FailureAction],
        help="when a failed step cannot be replanned: wait for a person to repair it (default), fail (the default "
        "with --auto-approve), or compensate (undo the effects that ran: docs/plans.md)",
    )
    run.add_argument(
        "--whole-plan-approval",
        action="store_true",
        help="review every revision as a whole, not only the steps it changed",
    )
    run.add_argument(
        "--escalate-after",
        type=positive(float),
        metavar="SECONDS",
        help="a review or a question left this long escalates to --escalate-to's group, who may then decide",
    )
    run.add_argument(
        "--escalate-to", metavar="GROUP", help="the approver group (groups: in --config) escalations go to"
    )
    run.add_argument(
        "--escalation-timeout",
        type=positive(float),
        metavar="SECONDS",
        help="an escalated decision left this long is settled by --on-escalation-timeout",
    )
    run.add_argument(
        "--on-escalation-timeout",
        choices=["reject", "stop"],
        help="reject what waited (default), or stop the run, once --escalation-timeout passed",
    )


def run_options(args: argparse.Namespace, plan_file: Path | None, draft: PlanDraft | None) -> RunOptions:
    """The run's options: the configuration file, overridden by the command line."""
    file = load_config(args.config)
    fallbacks: dict[str, list[str]] = {}

    def chain(value: str | list[str] | None) -> str | None:
        """A model, or a failover list's first model (the others answer when it cannot)."""
        if not isinstance(value, list):
            return value
        first, *rest = [_absolute(m) or m for m in value]
        if rest:
            fallbacks[first] = rest
        return first

    planner: str | None = args.planner or chain(file.planner)
    executor: str | None = args.executor or chain(file.executor)
    synthesizer: str | None = args.synthesizer or chain(file.synthesizer)
    tiers = {**{name: chain(models) or "" for name, models in file.tiers.items()}, **_tiers(args.tier)}
    mode = Mode(args.mode)
    if not executor and not planner:
        executor = _default_executor(plan_file, draft)
        if executor:
            render.note(
                f"note: no API key is used; llm steps answer from scripted responses in {executor.removeprefix('scripted:')}",
                json_mode=args.json,
            )
    # One model may play both roles: without an executor, the planner executes its own plan.
    executor = executor or planner
    if mode is Mode.joint:
        if args.plan:
            raise CliError("--mode joint takes a goal, not --plan")
        if not executor:
            raise CliError("--mode joint needs a model: --executor MODEL (or --planner MODEL)")
    elif args.allow_tools:
        raise CliError("--allow-tool is for --mode joint; in a plan, an llm step lists its tools")
    overrides = {
        "tokens": args.budget_tokens,
        "cost_usd": args.budget_cost,
        "model_calls": args.budget_calls,
        "wall_clock_seconds": args.budget_seconds,
    }
    budget = Budget.model_validate(
        {**file.budget.model_dump(), **{k: v for k, v in overrides.items() if v is not None}}
    )
    options = RunOptions(
        planner=_absolute(planner),
        executor=_absolute(executor),
        synthesizer=_absolute(synthesizer),
        tiers={name: _absolute(model) for name, model in tiers.items()},
        mode=mode,
        joint_tools=args.allow_tools if mode is Mode.joint else None,
        auto_approve=args.auto_approve,
        approvers=args.approvers or file.approvers,
        approver_groups=file.groups,
        on_failure=FailureAction(args.on_failure) if args.on_failure else file.on_failure,
        whole_plan_approval=args.whole_plan_approval or file.whole_plan_approval,
        quorum=args.quorum or file.quorum,
        four_eyes=args.four_eyes or file.four_eyes,
        budget=budget,
        max_tool_rounds=args.max_tool_rounds or file.max_tool_rounds or RunOptions().max_tool_rounds,
    )
    verifier: str | None = args.verifier or file.verifier
    if verifier:
        # A tier's name, else a model string.
        options.verifier = _absolute(options.tiers.get(verifier) or _model_string(verifier, "--verifier"))
    options.final_check = bool(args.final_check or file.final_check)
    options.capabilities = dict(file.models)
    options.fallbacks = fallbacks
    named = {**options.tiers, "executor": options.executor or ""}
    options.escalate = {named[cheap]: named[strong] for cheap, strong in file.escalate.items() if named.get(cheap)}
    options.prices = run_prices(options.models, file.prices, need_all=budget.cost_usd is not None)
    flag = vars(args).get  # flags a caller building its own arguments may leave out
    options.escalate_after_seconds = flag("escalate_after") or file.escalate_after
    options.escalate_to = flag("escalate_to") or file.escalate_to
    options.escalation_timeout_seconds = flag("escalation_timeout") or file.escalation_timeout
    then = flag("on_escalation_timeout")
    options.on_escalation_timeout = EscalationTimeoutAction(then) if then else file.on_escalation_timeout
    if problem := escalation_problem(options):
        raise CliError(problem)
    return options


def _model_string(model: str, where: str) -> str:
    try:
        split_model_string(model)
    except ModelConfigError as exc:
        raise CliError(f"{where}: '{model}' is neither a tier nor a model: {exc}") from None
    return model


def _tiers(specs: list[str]) -> dict[str, str]:
    tiers: dict[str, str] = {}
    for spec in specs:
        name, sep, model = spec.partition("=")
        if not sep or not name.strip() or not model.strip():
            raise CliError(f"--tier '{spec}' is not NAME=MODEL (for example fast=openai:gpt-4.1-nano)")
        split_model_string(model.strip())
        tiers[name.strip()] = model.strip()
    return tiers


def plan_folder_tools(args: argparse.Namespace, plan_file: Path | None) -> None:
    """A plan folder may carry its own tools (as the examples do: plan.yaml + tools.py): used
    when the command names none."""
    if not args.tools and plan_file is not None and plan_file.resolve().with_name("tools.py").exists():
        args.tools = [str(plan_file.resolve().with_name("tools.py"))]
        render.note(f"note: loading tools from {args.tools[0]}", json_mode=args.json)


async def cmd_run(args: argparse.Namespace) -> int:
    config = settings()
    spec = run_target(args)
    if spec is None and args.time_zone is not None:
        raise CliError(
            "--time-zone says where a process's ${nominal.X} dates are read; a plain plan or a goal has none"
        )
    args.time_zone = args.time_zone or "UTC"
    plan_file = Path(args.plan) if args.plan else (source_file(spec) if spec else None)
    plan_folder_tools(args, plan_file)
    bulk = spec is not None and is_bulk(args.inputs)
    if bulk and args.id:
        raise CliError("a bulk run names each run from the process and its row; --id names one run")
    rows = read_rows(spec, args.inputs) if spec is not None and bulk else []
    registry = ToolRegistry.from_modules(args.tools)
    given: dict = {}
    if spec is None:
        draft = load_plan_file(plan_file) if plan_file else None
    elif bulk:
        # --input gives every row that value; each row's plan is checked as it starts.
        given, problems = typed_pairs(spec, args.input)
        if problems:
            raise InputsRefusedError(spec, problems)
        draft = spec.template()
    else:
        given, draft = single_run(spec, args.input, args.inputs, args.time_zone)
    options = run_options(args, plan_file, draft)
    if spec is not None and not spec.steps and not options.planner:
        raise CliError(f"process {spec.name} plans from its goal: it needs a planner model, --planner provider:name")
    if draft is not None and not bulk:
        validate_plan(draft, registry.catalog(), **options.plan_rules())
        for line in plan_notes(draft, registry.catalog()):
            render.note(f"note: {line}", json_mode=args.json)
    elif options.mode.value == "joint":
        unknown = sorted(set(options.joint_tools or []) - set(registry.catalog().names))
        if unknown:
            raise CliError(
                f"--allow-tool names unknown tool(s): {', '.join(unknown)} (available: {', '.join(registry.catalog().names)})"
            )
    elif not options.planner and spec is None:
        raise CliError("a goal needs a planner model: --planner provider:name (for example scripted:planner.yaml)")
    by = reviewer(args)
    try:
        if spec is not None:
            process = ProcessRun(spec=spec, inputs=given, time_zone=args.time_zone)
            run_input = RunInput(process=process, started_by=by, options=options)
        else:
            run_input = RunInput(
                goal=args.goal,
                plan=draft,
                author=Author(kind=AuthorKind.human, name=by) if draft else None,
                started_by=by,
                options=options,
            )
    except ValidationError as exc:
        raise CliError(str(exc.errors()[0]["msg"]).removeprefix("Value error, ")) from None
    # Scripted files this command names itself (an example's models.yaml beside its plan, a
    # --planner scripted:FILE), in whichever folder it runs from: read by its own checks, the
    # worker it hosts and the background worker it starts. A worker started by hand, and runs
    # that others start, keep to STRATAGEM_SCRIPTED_DIRS.
    folders = scripted_folders(options.models)
    allow_dirs(folders)
    if not (args.detach and not is_local(config.address)):
        # The worker that will call the models runs with this environment (the background
        # worker, or one hosted by this command): check now that each model loads (a script
        # file exists, an API key is set), rather than mid-run.
        for model in options.models:
            load_model(model)
    client = await open_client(config, start_server=True, json_mode=args.json)
    batch = None
    if spec is not None and bulk:
        rules = options.plan_rules()
        batch = Batch(
            spec,
            given,
            args.time_zone,
            config.task_queue,
            run_input.options,
            by,
            registry.catalog(),
            rules,
            RUN_TIMEOUT,
        )

    if owns_server(embedded(config)):
        # One background worker serves every run: runs go on after this command, decisions come from anywhere.
        done = await asyncio.to_thread(background_worker(config).ensure, args.tools, scripted_dirs=folders)
        if done:
            render.note(done, json_mode=args.json)
        # The run keeps this folder's workspace, whichever folder the next run starts from.
        run_input.options.workspace = str(config.workspace.resolve())
        if batch is not None:
            return await start_rows(client, batch, rows, json_mode=args.json)
        run = await _start(client, run_input, config.task_queue, args.id)
        if args.detach:
            return detached(run, json_mode=args.json)
        render.note(f"run {run.id} started", json_mode=args.json)
        # Hosting the workflow here too keeps questions and decisions working if the background
        # worker (just ensured: beside us) dies while we follow (steps wait until it is back).
        host = workflow_host(client, config.task_queue, beside_a_worker=True)
        async with host, watching_worker(config, run.id, json_mode=args.json):
            return await follow_attached(run, args, by)

    if args.detach or batch is not None:
        # A worker started by hand reads scripted files only where STRATAGEM_SCRIPTED_DIRS says.
        scripted = f"{SCRIPTED_DIRS_ENV}={os.pathsep.join(map(str, folders))} " if folders else ""
        render.note(
            f"(a worker must serve task queue {config.task_queue}: {scripted}stratagem worker --tools ...)",
            json_mode=args.json,
        )
        if batch is not None:
            return await start_rows(client, batch, rows, json_mode=args.json)
        return detached(await _start(client, run_input, config.task_queue, args.id), json_mode=args.json)

    # A server this command does not manage: host a worker here for as long as we follow the run.
    try:
        async with build_worker(client, task_queue=config.task_queue, registry=registry, workspace=config.workspace):
            run = await _start(client, run_input, config.task_queue, args.id)
            render.note(f"run {run.id} started", json_mode=args.json)
            return await follow_attached(run, args, by)
    finally:
        await registry.aclose()


async def _start(client: Client, run: RunInput, task_queue: str, run_id: str | None) -> RunHandle:
    """A run of a process starts as the Python API starts one (stratagem.start_process); any other as `start_run`."""
    if run.process is not None:
        return await start_process(
            client,
            run.process.spec,
            run.process.inputs,
            task_queue=task_queue,
            options=run.options,
            run_id=run_id,
            started_by=run.started_by,
            time_zone=run.process.time_zone,
            rpc_timeout=RUN_TIMEOUT,
        )
    return await start_run(client, run, task_queue=task_queue, run_id=run_id, rpc_timeout=RUN_TIMEOUT)


def detached(run: RunHandle, *, json_mode: bool) -> int:
    if json_mode:
        render.emit_json({"run_id": run.id})
    else:
        render.console.print(run.id)
        render.note(f"follow it with: stratagem wait {run.id}    (status: stratagem status {run.id})")
    return 0
