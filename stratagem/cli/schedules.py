"""`stratagem schedule create|list|describe|pause|unpause|trigger|update|delete`: a plan or a
process on a calendar, each a real Temporal Schedule (stratagem.schedules does the Temporal part;
stratagem.cli.schedule_runs builds and checks what the schedule runs)."""

from __future__ import annotations

import argparse
import asyncio
import getpass
import os
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from temporalio.client import Client

from stratagem.cli import render
from stratagem.cli.arguments import Commands
from stratagem.cli.decisions import reviewer
from stratagem.cli.errors import CliError
from stratagem.cli.library import add_library_options
from stratagem.cli.schedule_runs import (
    Source,
    apply_policy,
    check_run,
    checked_id,
    given_inputs,
    read_source,
    reread_source,
    scheduled_run,
    source_record,
    timing_of,
)
from stratagem.cli.session import background_worker, embedded, open_client, settings
from stratagem.cli.standing import grant_for, standing_of
from stratagem.cli.start import add_run_options, plan_folder_tools, run_options, scripted_folders
from stratagem.common.config import Settings
from stratagem.domain.schedule_rules import OVERLAP_POLICIES, describe_duration
from stratagem.domain.standing import BOUND_SYNTAX
from stratagem.models import load_model
from stratagem.models.scripted import SCRIPTED_DIRS_ENV, allow_dirs
from stratagem.schedules import (
    ScheduleRequest,
    ScheduleTiming,
    ScheduleView,
    create_schedule,
    delete_schedule,
    describe_schedule,
    list_schedules,
    pause_schedule,
    preview_times,
    replace_schedule,
    request_of,
    schedule_runs,
    trigger_schedule,
    unpause_schedule,
)
from stratagem.server import is_local, owns_server
from stratagem.tools import ToolRegistry


def add_schedules(commands: Commands) -> None:
    schedule = commands.add(
        "schedule", _usage, "put a plan or a process on a calendar (a Temporal Schedule)", json=False
    )
    sub = schedule.add_subparsers(dest="schedule_command", required=True, metavar="ACTION")
    create_parser(sub)
    listed = _add(sub, "list", cmd_list, "the schedules, with their next run times and whether they are paused")
    listed.set_defaults(schedule_id=None)
    _add(
        sub,
        "describe",
        cmd_describe,
        "a schedule: when it fires, what it runs, its recent runs, its next 5 times",
        True,
    )
    for name, handler, text in (
        ("pause", cmd_pause, "pause a schedule: it starts no runs until unpaused"),
        ("unpause", cmd_unpause, "unpause a schedule"),
    ):
        _add(sub, name, handler, text, True).add_argument("--note", help="why (shown by describe and Temporal's UI)")
    trigger = _add(sub, "trigger", cmd_trigger, "start the schedule's run now, paused or not", True)
    trigger.add_argument("--overlap", choices=OVERLAP_POLICIES, help="this time only: what if a run still runs")
    update_parser(sub)
    _add(sub, "delete", cmd_delete, "delete a schedule (the runs it started go on)", True)


def _usage(args: argparse.Namespace) -> int:  # argparse requires an action; never reached
    raise CliError("give an action: stratagem schedule create|list|describe|pause|unpause|trigger|update|delete")


def _add(sub: Any, name: str, handler: Any, text: str, with_id: bool = False) -> argparse.ArgumentParser:
    command: argparse.ArgumentParser = sub.add_parser(name, help=text, description=text)
    command.set_defaults(handler=handler)
    if with_id:
        command.add_argument("schedule_id", metavar="ID", help="the schedule's id")
    command.add_argument("--json", action="store_true", help="machine-readable output (docs/cli.md)")
    return command


def _timing_options(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--cron", action="append", default=[], metavar="EXPR", help="when, as cron ('0 6 1 * *'); repeatable"
    )
    command.add_argument("--every", metavar="DURATION", help="an interval: 30m, 1h, 7d (counted from 1970, UTC)")
    command.add_argument("--time-zone", metavar="ZONE", help="IANA zone the cron and nominal dates are read in")
    command.add_argument("--overlap", choices=OVERLAP_POLICIES, help="when a run is due while one runs (default skip)")
    command.add_argument(
        "--catchup-window", metavar="DURATION", help="how late a missed run may still start (default 1 year)"
    )
    command.add_argument("--jitter", metavar="DURATION", help="start each run up to this much later, at random")
    command.add_argument("--note", help="a note kept with the schedule (describe and Temporal's UI show it)")
    command.add_argument(
        "--input", action="append", default=[], dest="inputs_given", metavar="NAME=VALUE",
        help="a process input; may use the nominal time: 'month=${nominal.previous_month}'; repeatable",
    )  # fmt: skip
    command.add_argument("--inputs", dest="inputs_file", metavar="FILE", help="the inputs as a YAML or JSON object")


def create_parser(sub: Any) -> argparse.ArgumentParser:
    """`schedule create`'s options, in one place: what `run` takes, and when. (Standing approvals
    add theirs here.)"""
    create = _add(sub, "create", cmd_create, "create a schedule that starts a plan's or a process's runs", True)
    create.add_argument("process", nargs="?", metavar="PROCESS", help="a library process's name (stratagem processes)")
    create.add_argument("--plan", metavar="FILE", help="a plan or process file instead")
    create.add_argument("--version", metavar="V", help="the library process's version (default: its latest)")
    add_library_options(create)
    _timing_options(create)
    create.add_argument("--paused", action="store_true", help="create it paused")
    add_run_options(create)
    create.add_argument("--by", metavar="NAME", help="your name: the runs' starter (four eyes) and the plan's author")
    create.add_argument(
        "--standing-approval",
        action="store_true",
        help="approve the process once, as --by: its runs go through unreviewed while unchanged and in --bound",
    )
    create.add_argument(
        "--bound", action="append", default=[], metavar="EXPR", help=f"with --standing-approval: {BOUND_SYNTAX}"
    )
    create.add_argument(
        "--approve-step", action="append", default=[], metavar="ID", help="with --standing-approval: a gated step too"
    )
    return create


def update_parser(sub: Any) -> argparse.ArgumentParser:
    update = _add(sub, "update", cmd_update, "change a schedule's times, inputs, process version or time zone", True)
    _timing_options(update)
    update.add_argument(
        "--reload", action="store_true", help="read the process (its latest version) or the plan file again"
    )
    update.add_argument("--version", metavar="V", help="switch to this version of the library process")
    return update


async def _client(config: Settings, args: argparse.Namespace, *, start_server: bool = False) -> Client:
    return await open_client(config, start_server=start_server, json_mode=args.json)


# ------------------------------------------------------------------ the commands


async def cmd_create(args: argparse.Namespace) -> int:
    schedule_id = checked_id(args)
    if args.process and args.plan:
        raise CliError("give a process's name or --plan FILE, not both")
    if args.mode != "plan" or args.allow_tools:
        raise CliError("a schedule runs a plan or a process; --mode joint and --allow-tool are for `run GOAL`")
    if args.auto_approve:
        raise CliError(
            "a schedule's runs cannot approve themselves with --auto-approve (its signature names one run); "
            "approve each run, or grant a standing approval: stratagem standing grant PROCESS --schedule ID"
        )
    timing = timing_of(args)
    config = settings()
    source = read_source(args.process, args.plan, args.version, args.processes)
    standing = standing_of(args, source.spec)
    plan_folder_tools(args, source.folder_file)
    registry = ToolRegistry.from_modules(args.tools)
    try:
        options = run_options(args, source.folder_file, source.template)
        values = given_inputs(source.spec, args.inputs_given, args.inputs_file)
        by = reviewer(args)
        folders = scripted_folders(options.models)
        allow_dirs(folders)
        if is_local(config.address):  # the worker that runs them is likely this machine's: check the models load
            for model in options.models:
                load_model(model)
        client = await _client(config, args, start_server=True)
        times = await preview_times(client, timing)
        check_run(source, values, options, registry, nominal=times[0] if times else None, time_zone=timing.time_zone)
        hosted = owns_server(embedded(config))
        if hosted:
            options.workspace = str(config.workspace.resolve())
        record = source_record(source, args, list(args.tools), by)
        record.cron, record.every_seconds = list(timing.cron), _seconds(timing)
        request = ScheduleRequest(
            schedule_id=schedule_id,
            run=scheduled_run(source, values, options, schedule_id=schedule_id, time_zone=timing.time_zone, by=by),
            source=record,
            timing=timing,
            task_queue=config.task_queue,
            paused=args.paused,
        )
        apply_policy(args, request)
        view = await create_schedule(client, request)
        if standing:
            granted = await grant_for(client, config, args, source.spec, schedule_id, by)
            render.note(f"granted {granted.describe()}", json_mode=args.json)
        if hosted:  # the runs it starts need this home's background worker, with these tools
            done = await asyncio.to_thread(background_worker(config).ensure, args.tools, scripted_dirs=folders)
            if done:
                render.note(done, json_mode=args.json)
        elif not args.json:
            scripted = f"{SCRIPTED_DIRS_ENV}={os.pathsep.join(map(str, folders))} " if folders else ""
            render.note(f"(its runs need a worker on task queue {config.task_queue}: {scripted}stratagem worker ...)")
    finally:
        await registry.aclose()
    if args.json:
        render.emit_json(view.to_json())
        return 0
    render.console.print(f"schedule {view.id} created: {view.what}, {view.timing.describe()}", markup=False)
    _print_next(view)
    render.console.print(
        f"its runs are named {view.id}-<nominal time, UTC>; see them with: stratagem schedule describe {view.id}",
        markup=False,
    )
    return 0


def _seconds(timing: ScheduleTiming) -> int | None:
    return int(timing.every.total_seconds()) if timing.every else None


async def cmd_update(args: argparse.Namespace) -> int:
    schedule_id = checked_id(args)
    config = settings()
    client = await _client(config, args)
    view = await describe_schedule(client, schedule_id)
    request = request_of(view)
    timing = timing_of(args, request.timing)
    apply_policy(args, request)
    run = request.run
    reload = args.reload or args.version
    source = reread_source(view.source, args.version) if reload else None
    if source is None:
        source = Source(spec=run.process.spec if run.process else None, draft=run.plan)
    base = dict(run.process.inputs) if run.process else {}
    values = given_inputs(source.spec, args.inputs_given, args.inputs_file, base if source.spec else None)
    registry = ToolRegistry.from_modules(view.source.tools)
    try:
        times = await preview_times(client, timing)
        check_run(
            source, values, run.options, registry, nominal=times[0] if times else None, time_zone=timing.time_zone
        )
    finally:
        await registry.aclose()
    by = run.started_by or view.source.created_by or getpass.getuser()
    request.run = scheduled_run(source, values, run.options, schedule_id=schedule_id, time_zone=timing.time_zone, by=by)
    request.timing = timing
    request.source.cron, request.source.every_seconds = list(timing.cron), _seconds(timing)
    if args.version:
        request.source.pinned_version = args.version
    updated = await replace_schedule(client, request)
    if args.json:
        render.emit_json(updated.to_json())
        return 0
    render.console.print(f"schedule {updated.id} updated: {updated.what}, {updated.timing.describe()}", markup=False)
    _print_next(updated)
    return 0


async def cmd_list(args: argparse.Namespace) -> int:
    client = await _client(settings(), args)
    views = await list_schedules(client)
    if args.json:
        render.emit_json([view.to_json() for view in views])
        return 0
    if not views:
        render.console.print("no schedules (create one with: stratagem schedule create ID --plan FILE --cron EXPR)")
        return 0
    from rich.table import Table

    table = Table(box=None, pad_edge=False)
    for column in ("ID", "RUNS", "WHEN", "NEXT", "STATE"):
        table.add_column(column)
    for view in views:
        table.add_row(
            view.id,
            view.what,
            view.timing.describe(),
            _local(view.next_times[0], view.timing.time_zone) if view.next_times and not view.paused else "-",
            "paused" + (f": {view.note}" if view.note else "") if view.paused else "active",
        )
    render.console.print(table)
    return 0


async def cmd_describe(args: argparse.Namespace) -> int:
    client = await _client(settings(), args)
    view = await describe_schedule(client, checked_id(args))
    runs = await schedule_runs(client, view.id)
    if args.json:
        render.emit_json({**view.to_json(), "runs": runs})
        return 0
    out = render.console.print
    out(f"schedule {view.id}: {'paused' if view.paused else 'active'}" + (f" ({view.note})" if view.note else ""))
    goal = f": {view.run.plan.goal}" if view.run and view.run.plan else ""
    out(
        f"  runs:      {view.what}{goal}" + (f" ({view.source.plan_file})" if view.source.plan_file else ""),
        markup=False,
    )
    if view.inputs:
        out("  inputs:    " + ", ".join(f"{k}={v}" for k, v in view.inputs.items()), markup=False)
    out(f"  when:      {view.timing.describe()}", markup=False)
    extra = [f"overlap {view.overlap}"]
    if view.catchup_window:
        extra.append(f"catch-up window {describe_duration(view.catchup_window)}")
    if view.timing.jitter:
        extra.append(f"jitter {describe_duration(view.timing.jitter)}")
    out(f"  policy:    {', '.join(extra)}; task queue {view.task_queue}", markup=False)
    _print_next(view)
    phases = {run["run_id"]: run["phase"] for run in runs}
    if view.recent:
        out(f"  recent runs ({view.actions} in all):")
        for run in view.recent[-10:]:
            when = _local(run.scheduled_at, view.timing.time_zone)
            out(f"    {run.run_id}  for {when}  {phases.get(run.run_id, '')}".rstrip(), markup=False)
    else:
        out("  no runs yet")
    return 0


async def cmd_pause(args: argparse.Namespace) -> int:
    view = await pause_schedule(await _client(settings(), args), checked_id(args), args.note)
    return _said(
        args, view, f"schedule {view.id} paused; it starts no runs until: stratagem schedule unpause {view.id}"
    )


async def cmd_unpause(args: argparse.Namespace) -> int:
    view = await unpause_schedule(await _client(settings(), args), checked_id(args), args.note)
    when = f"; next run {_local(view.next_times[0], view.timing.time_zone)}" if view.next_times else ""
    return _said(args, view, f"schedule {view.id} unpaused{when}")


async def cmd_trigger(args: argparse.Namespace) -> int:
    config = settings()
    client = await _client(config, args)
    schedule_id = checked_id(args)
    view = await describe_schedule(client, schedule_id)
    if owns_server(embedded(config)) and view.source.tools is not None:
        # A triggered run needs the background worker, as a scheduled one does.
        await asyncio.to_thread(background_worker(config).ensure, view.source.tools)
    run_id, view = await trigger_schedule(client, schedule_id, args.overlap)
    if args.json:
        render.emit_json({**view.to_json(), "run_id": run_id})
        return 0
    if run_id is None:
        render.console.print(
            f"schedule {view.id} triggered, but no run started: its overlap policy ({args.overlap or view.overlap}) "
            f"holds it while {', '.join(view.running) or 'another run'} runs (--overlap allow-all starts it anyway)",
            markup=False,
        )
        return 0
    render.console.print(f"schedule {view.id} started run {run_id}", markup=False)
    render.note(f"follow it with: stratagem wait {run_id}")
    return 0


async def cmd_delete(args: argparse.Namespace) -> int:
    schedule_id = checked_id(args)
    await delete_schedule(await _client(settings(), args), schedule_id)
    if args.json:
        render.emit_json({"id": schedule_id, "deleted": True})
    else:
        render.console.print(f"schedule {schedule_id} deleted; the runs it started go on", markup=False)
    return 0


def _said(args: argparse.Namespace, view: ScheduleView, line: str) -> int:
    if args.json:
        render.emit_json(view.to_json())
    else:
        render.console.print(line, markup=False)
    return 0


def _local(moment: datetime, zone: str) -> str:
    return moment.astimezone(ZoneInfo(zone)).strftime("%Y-%m-%d %H:%M %Z")


def _print_next(view: ScheduleView) -> None:
    if view.paused:
        render.console.print("  paused: no runs until it is unpaused", markup=False)
        return
    times = ", ".join(_local(t, view.timing.time_zone) for t in view.next_times[:5]) or "none"
    render.console.print(f"  next runs: {times}", markup=False)


__all__ = ["add_schedules", "create_parser", "update_parser"]
