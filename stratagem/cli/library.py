"""`stratagem processes list|show`: the process library (stratagem.io.process_library), and which
process `stratagem run` means.

`stratagem run` takes a goal or a process where one argument goes: a process by `--process NAME`,
or by its NAME alone, which has no spaces; a goal for the planner is a sentence. So a mistyped
name is refused, with the nearest names, rather than given to a planner as a goal.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
from pathlib import Path
from typing import Any

from stratagem.cli import render
from stratagem.cli.arguments import Commands
from stratagem.cli.errors import CliError
from stratagem.domain.answers import describe_field
from stratagem.domain.process import ProcessSpec, field_schema, inputs_schema
from stratagem.io.plan_files import is_process_file, load_process_file
from stratagem.io.process_library import ProcessLibrary, ProcessNotFound

_SOURCE = re.compile(r"^process file '(.*)'$", re.S)


def add_library_options(command: argparse._ActionsContainer) -> None:
    command.add_argument(
        "--processes",
        action="append",
        default=[],
        metavar="DIR",
        help="a folder of process files, looked in before STRATAGEM_PROCESSES and $STRATAGEM_HOME/processes; repeatable",
    )


def add_process_options(run: argparse.ArgumentParser) -> None:
    """`stratagem run`'s options for a process."""
    process = run.add_argument_group("a process's inputs (docs/processes.md)")
    process.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an input's value, typed as the process declares; repeatable; wins over --inputs",
    )
    process.add_argument(
        "--inputs",
        metavar="FILE",
        help="a YAML or JSON object of input values; or rows.csv / rows.jsonl: one run per row (a bulk run)",
    )
    process.add_argument("--version", metavar="V", help="the process's version (default: the highest)")
    process.add_argument(
        "--time-zone", metavar="TZ", help="where a process's ${nominal.X} dates are read (default: UTC)"
    )
    add_library_options(process)


def add_library(commands: Commands) -> None:
    processes = commands.add("processes", _usage, "the process library: list processes, or show one", json=False)
    sub = processes.add_subparsers(dest="library_command", required=True, metavar="list|show")
    listing = sub.add_parser("list", help="every process: its latest version, description and inputs")
    listing.set_defaults(handler=cmd_list)
    show = sub.add_parser("show", help="one process: its inputs, versions, digest and steps")
    show.add_argument("name", metavar="NAME", help="a process's name (or a process file)")
    show.add_argument("--version", metavar="V", help="this version (default: the highest)")
    show.set_defaults(handler=cmd_show)
    for command in (listing, show):
        command.add_argument("--json", action="store_true", help="machine-readable output (docs/cli.md)")
        add_library_options(command)


def _usage(args: argparse.Namespace) -> int:  # argparse requires list or show first
    raise CliError("say list or show: stratagem processes list")


def library(args: argparse.Namespace) -> ProcessLibrary:
    return ProcessLibrary.from_env(extra=getattr(args, "processes", None) or [])


def source_file(spec: ProcessSpec) -> Path | None:
    """The file a process was read from, where it says."""
    match = _SOURCE.match(spec.source or "")
    return Path(match.group(1)) if match else None


def find(found: ProcessLibrary, name: str, version: str | None) -> ProcessSpec:
    """A process by name (and version), or a CliError naming the nearest names."""
    try:
        return found.get(name, version)
    except ProcessNotFound as exc:
        near = difflib.get_close_matches(name, found.names(), n=3, cutoff=0.6)
        hint = f"; did you mean {' or '.join(near)}?" if near else ""
        raise CliError(f"{exc}{hint}") from None


def run_target(args: argparse.Namespace) -> ProcessSpec | None:
    """The process `stratagem run` starts, or None for a goal or a plain plan file. A process is
    `--plan FILE` declaring inputs, `--process NAME`, or a goal without spaces (a name)."""
    version = args.version
    if args.plan and is_process_file(args.plan):
        spec = load_process_file(args.plan)
        if version is not None and version != spec.version:
            raise CliError(f"process file '{args.plan}' is {spec.label}, not version {version}")
        return spec
    name = args.process or (
        args.goal.strip() if args.goal and not any(c.isspace() for c in args.goal.strip()) else None
    )
    if name:
        found = library(args)
        try:
            return find(found, name, version)
        except CliError as exc:
            if args.process:
                raise
            # A word where a goal goes: a process's name, or a typo of one; never a goal.
            if Path(name).is_file():
                raise CliError(f"{exc}; to run the plan file '{name}', write --plan {name}") from None
            raise CliError(f"{exc} (one word is a process's name; a goal for the planner is a sentence)") from None
    if args.input or args.inputs:
        what = f"plan file '{args.plan}' declares no inputs" if args.plan else "a goal takes no inputs"
        raise CliError(f"--input and --inputs are for a process (a plan file with inputs:, or --process NAME); {what}")
    if version is not None:
        raise CliError("--version chooses a process's version: give --process NAME (or a process's name)")
    if args.time_zone is not None:
        raise CliError(
            "--time-zone says where a process's ${nominal.X} dates are read; a plain plan or a goal has none"
        )
    return None


def cmd_list(args: argparse.Namespace) -> int:
    found = library(args)
    if args.json:
        render.emit_json(
            {"processes": [_summary(found, spec) for spec in found.latest()], "problems": list(found.problems)}
        )
        return 0
    for problem in found.problems:
        render.note(f"note: {problem}", json_mode=True)
    specs = found.latest()
    if not specs:
        where = ", ".join(str(folder) for folder in found.folders)
        render.console.print(
            f"no processes (looked in {where}, and the stratagem.processes entry points)", markup=False
        )
        return 0
    table = [["NAME", "VERSION", "INPUTS", "DESCRIPTION"]]
    for spec in specs:
        older = len(found.versions(spec.name)) - 1
        version = spec.version + (f" (+{older} older)" if older else "")
        table.append(
            [
                spec.name,
                version,
                ", ".join(spec.inputs) or "-",
                spec.description.splitlines()[0] if spec.description else "",
            ]
        )
    widths = [max(render.cell_width(row[i]) for row in table) for i in range(3)]
    for row in table:
        cells = [cell + " " * (width - render.cell_width(cell)) for cell, width in zip(row, widths, strict=False)]
        render.console.print("  ".join([*cells, row[3]]).rstrip(), markup=False)
    return 0


def _summary(found: ProcessLibrary, spec: ProcessSpec) -> dict[str, Any]:
    return {
        "name": spec.name,
        "version": spec.version,
        "versions": [s.version for s in found.versions(spec.name)],
        "description": spec.description,
        "inputs": list(spec.inputs),
        "required": spec.required,
        "digest": spec.digest,
        "source": spec.source,
    }


def cmd_show(args: argparse.Namespace) -> int:
    found = library(args)
    if Path(args.name).suffix.lower() in (".yaml", ".yml", ".json") and Path(args.name).is_file():
        spec, versions = load_process_file(args.name), None
    else:
        spec = find(found, args.name, args.version)
        versions = [s.version for s in found.versions(spec.name)]
    if args.json:
        render.emit_json(
            {
                **_summary(found, spec),
                "versions": versions or [spec.version],
                "inputs_schema": inputs_schema(spec),
                "goal": spec.goal,
                "steps": [step.model_dump(mode="json", exclude_defaults=True) for step in spec.steps],
            }
        )
        return 0
    out = render.console
    out.print(f"{spec.label}" + (f"  (versions: {', '.join(versions)})" if versions else ""), markup=False)
    if spec.description:
        out.print(spec.description, markup=False)
    out.print(f"source: {spec.source or '-'}", markup=False)
    out.print(f"digest: {spec.digest}", markup=False)
    out.print(f"goal:   {spec.goal}", markup=False)
    out.print("inputs:" if spec.inputs else "inputs: none", markup=False)
    rows = [[name, describe_input(field), str(field.get("description", ""))] for name, field in spec.inputs.items()]
    width = [max((render.cell_width(row[i]) for row in rows), default=0) for i in range(2)]
    for row in rows:
        cells = [cell + " " * (w - render.cell_width(cell)) for cell, w in zip(row, width, strict=False)]
        out.print(("  " + "  ".join([*cells, row[2]])).rstrip(), markup=False)
    if spec.steps:
        out.print("steps:", markup=False)
        for step in spec.steps:
            what = f"tool {step.tool}" if step.tool else step.kind.value
            after = f", after {', '.join(step.depends_on)}" if step.depends_on else ""
            out.print(f"  {step.id}: {step.title} ({what}{after})", markup=False)
    else:
        out.print("steps: none; the planner plans the goal (needs --planner)", markup=False)
    example = " ".join(f"--input {name}=..." for name in spec.required)
    out.print(f"run it: stratagem run {spec.name} {example}".rstrip(), markup=False)
    return 0


def describe_input(field: dict[str, Any]) -> str:
    """An input's type and constraints in a few words: `integer >= 1, <= 12, default 3`, `one of a / b, required`."""
    schema = field_schema(field)
    text = f"one of {describe_field(schema)}" if "enum" in schema else describe_field(schema)
    bounds = [
        f"{sign} {schema[key]}"
        for key, sign in (("minimum", ">="), ("exclusiveMinimum", ">"), ("maximum", "<="), ("exclusiveMaximum", "<"))
        if key in schema
    ]
    if bounds:
        text += " " + ", ".join(bounds)
    low, high = schema.get("minLength"), schema.get("maxLength")
    if low is not None or high is not None:
        text += f", {low} characters" if low == high else f", {low or 0}..{high if high is not None else ''} characters"
    if "default" in field:
        shown = field["default"] if isinstance(field["default"], str) else json.dumps(field["default"])
        return f"{text}, default {shown}"
    return f"{text}, required"
