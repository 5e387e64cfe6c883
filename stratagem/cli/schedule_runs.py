"""What a schedule runs, built and checked before anything is sent: the process (from the
library, or a process file) or the plain plan, its inputs (`--input NAME=VALUE`, `--inputs FILE`),
and the run's options as `run` builds them. Every problem found is put in one line.

Inputs that use the nominal time are rendered with the schedule's next time, and the plan they
render is validated against the tools, so a wrong input is refused at `create` (or `update`),
not when the schedule first fires."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from stratagem.cli.errors import CliError
from stratagem.common.errors import PlanFileError
from stratagem.domain.plan import Author, AuthorKind, PlanDraft
from stratagem.domain.process import ProcessRun, ProcessSpec, coerce_input
from stratagem.domain.run_types import RunInput, RunOptions
from stratagem.domain.schedule_rules import (
    MAX_NOTE,
    MIN_INTERVAL,
    ScheduleSource,
    check_scheduled_inputs,
    cron_problems,
    parse_duration,
    schedule_id_problem,
    time_zone_problem,
)
from stratagem.domain.validation import plan_problems
from stratagem.io.plan_files import is_process_file, load_plan_file, load_process_file, read_document
from stratagem.io.process_library import ProcessLibrary, ProcessNotFound
from stratagem.schedules import ScheduleRequest, Timing
from stratagem.tools import ToolRegistry


@dataclass
class Source:
    """A schedule's process (`spec`) or plain plan (`draft`), and where it was read."""

    spec: ProcessSpec | None = None
    draft: PlanDraft | None = None
    plan_file: Path | None = None

    @property
    def template(self) -> PlanDraft | None:
        """What `run_options` looks at for an example's scripted models: the plan before rendering."""
        return self.spec.template() if self.spec is not None else self.draft


def read_source(process: str | None, plan: str | None, version: str | None) -> Source:
    """The library's process `process` (its `version`, or the latest), or the file `plan`: a
    process file (it declares `inputs:`) or a plain plan."""
    if process:
        try:
            return Source(spec=ProcessLibrary.from_env().get(process, version))
        except ProcessNotFound as exc:
            raise CliError(str(exc)) from None
    if not plan:
        raise CliError("give a process's name or --plan FILE")
    if version:
        raise CliError("--version picks a library process's version; a plan file has the version it declares")
    file = Path(plan).resolve()
    if is_process_file(file):
        return Source(spec=load_process_file(file), plan_file=file)
    return Source(draft=load_plan_file(file), plan_file=file)


def reread_source(source: ScheduleSource, version: str | None) -> Source:
    """The schedule's process or plan read again from where it came from (`update --reload`)."""
    if source.process:
        return read_source(source.process, None, version or source.pinned_version)
    if source.plan_file:
        try:
            return read_source(None, source.plan_file, version)
        except PlanFileError as exc:
            raise CliError(f"cannot read the schedule's plan again: {exc}") from None
    raise CliError("this schedule does not say where its plan came from; create it again")


def given_inputs(
    spec: ProcessSpec | None, pairs: list[str], file: str | None, base: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The inputs as given: `base` (an update's current inputs), replaced by `file`'s object,
    then each `NAME=VALUE` typed as its input declares. Every problem in one CliError."""
    if spec is None:
        if pairs or file:
            raise CliError("this plan declares no inputs; --input and --inputs are for a process")
        return {}
    values: dict[str, Any] = dict(base or {})
    problems: list[str] = []
    if file:
        data = read_document(Path(file), "inputs file")
        if not isinstance(data, dict):
            raise CliError(f"inputs file '{file}' must hold an object of NAME: VALUE, not a {type(data).__name__}")
        values = {str(name): value for name, value in data.items()}
        unknown = [name for name in values if name not in spec.inputs]
        if unknown:
            problems.append(
                f"{spec.name} has no input {', '.join(repr(n[:64]) for n in unknown[:5])} "
                f"(its inputs: {', '.join(spec.inputs) or 'none'})"
            )
    for pair in pairs:
        name, sep, text = pair.partition("=")
        if not sep or not name.strip():
            problems.append(f"--input '{pair[:60]}' is not NAME=VALUE")
            continue
        try:
            values[name.strip()] = coerce_input(spec, name.strip(), text)
        except ValueError as exc:
            problems.append(str(exc))
    if problems:
        raise CliError("; ".join(problems))
    return values


def check_run(
    source: Source,
    values: dict[str, Any],
    options: RunOptions,
    registry: ToolRegistry,
    *,
    nominal: datetime | None,
    time_zone: str,
) -> None:
    """Refuse, in one line, a scheduled run that would fail at its start: inputs that do not fit
    once the nominal time `nominal` (the schedule's next) is put in, or a plan the tools and
    rules refuse."""
    plan: PlanDraft | None = source.draft
    problems: list[str] = []
    if source.spec is not None:
        if nominal is None:
            raise CliError("the schedule never fires (its times lie in the past); check --cron")
        _, plan, problems = check_scheduled_inputs(source.spec, values, nominal, time_zone)
        if problems:
            when = nominal.astimezone(ZoneInfo(time_zone)).strftime("%Y-%m-%d %H:%M %Z")
            raise CliError(f"the inputs of the run at {when} would be refused: " + "; ".join(problems))
    if plan is not None:
        problems = plan_problems(plan, registry.catalog(), **options.plan_rules())
    if problems:
        raise CliError("the plan would be refused: " + "; ".join(problems))


def scheduled_run(
    source: Source, values: dict[str, Any], options: RunOptions, *, schedule_id: str, time_zone: str, by: str
) -> RunInput:
    """The RunInput every run of the schedule starts with."""
    if source.spec is not None:
        process = ProcessRun(spec=source.spec, inputs=values, time_zone=time_zone, schedule=schedule_id)
        return RunInput(process=process, started_by=by, options=options)
    return RunInput(plan=source.draft, author=Author(kind=AuthorKind.human, name=by), started_by=by, options=options)


def source_record(source: Source, args: argparse.Namespace, tools: list[str], by: str) -> ScheduleSource:
    return ScheduleSource(
        process=source.spec.name if source.spec is not None and source.plan_file is None else None,
        pinned_version=getattr(args, "version", None),
        plan_file=str(source.plan_file) if source.plan_file else None,
        tools=[str(Path(t).resolve()) if t.endswith(".py") else t for t in tools],
        created_by=by,
    )


def checked_id(args: argparse.Namespace) -> str:
    problem = schedule_id_problem(args.schedule_id)
    if problem:
        raise CliError(problem)
    return str(args.schedule_id)


def timing_of(args: argparse.Namespace, base: Timing | None = None) -> Timing:
    """The schedule's times from the options, over `base` (an update's current ones). Every
    problem in one line."""
    problems = cron_problems(args.cron)
    timing = Timing(**vars(base)) if base else Timing()
    if args.cron or args.every:
        timing.cron, timing.every = list(args.cron), None
    if args.every:
        try:
            timing.every = parse_duration(args.every, "--every")
            if timing.every < MIN_INTERVAL:
                problems.append(f"--every {args.every} is more often than once a minute")
        except ValueError as exc:
            problems.append(str(exc))
    if args.time_zone is not None:
        zone_problem = time_zone_problem(args.time_zone)
        if zone_problem:
            problems.append(zone_problem)
        timing.time_zone = args.time_zone
    if args.jitter is not None:
        try:
            timing.jitter = parse_duration(args.jitter, "--jitter")
        except ValueError as exc:
            problems.append(str(exc))
    if not timing.cron and not timing.every:
        problems.append("say when: --cron EXPR (for example '0 6 1 * *') or --every DURATION (for example 1h)")
    if args.note is not None and len(args.note) > MAX_NOTE:
        problems.append(f"--note takes at most {MAX_NOTE} characters")
    if problems:
        raise CliError("; ".join(problems))
    return timing


def apply_policy(args: argparse.Namespace, request: ScheduleRequest) -> None:
    if args.overlap:
        request.overlap = args.overlap
    if args.catchup_window:
        try:
            request.catchup_window = parse_duration(args.catchup_window, "--catchup-window")
        except ValueError as exc:
            raise CliError(str(exc)) from None
    if args.note is not None:
        request.note = args.note
