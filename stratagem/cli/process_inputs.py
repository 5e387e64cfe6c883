"""A process's inputs as the command line gives them: `--input NAME=VALUE` (typed as the input
declares), `--inputs FILE` (a YAML or JSON object; `--input` wins over it), and the rows of a bulk
run (`--inputs rows.csv` or `rows.jsonl`, one run per row). Nothing here starts anything: every
problem is gathered, so a person fixes them all at once."""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from stratagem.cli.errors import CliError
from stratagem.common.errors import PlanFileError
from stratagem.domain.plan import PlanDraft
from stratagem.domain.process import ProcessSpec, coerce_input, render_plan, run_values
from stratagem.io.plan_files import read_document
from stratagem.process_runs import InputsRefusedError

BULK_SUFFIXES = (".csv", ".jsonl")
# One command starts at most this many runs: a larger batch is a job for a script over the
# Python API (stratagem.start_process), which can pace itself.
MAX_ROWS = 10_000


def is_bulk(path: str | None) -> bool:
    return path is not None and Path(path).suffix.lower() in BULK_SUFFIXES


def typed_pairs(spec: ProcessSpec, pairs: list[str]) -> tuple[dict[str, Any], list[str]]:
    """`--input NAME=VALUE`s, each typed as its input declares; the values and the problems."""
    values: dict[str, Any] = {}
    problems: list[str] = []
    for pair in pairs:
        name, sep, text = pair.partition("=")
        name = name.strip()
        if not sep or not name:
            problems.append(f"--input '{pair[:64]}' is not NAME=VALUE (for example month=2026-10)")
            continue
        try:
            values[name] = coerce_input(spec, name, text)
        except ValueError as exc:
            problems.append(str(exc))
    return values, problems


def file_object(spec: ProcessSpec, path: str) -> tuple[dict[str, Any], list[str]]:
    """`--inputs FILE`: one YAML or JSON object of input values, typed as written. A text where the
    input wants another type is typed as `--input` would type it (`"120"` for a number)."""
    try:
        data = read_document(Path(path), "inputs file")
    except PlanFileError as exc:
        raise CliError(str(exc)) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise CliError(
            f"inputs file '{path}' must hold a mapping of input names to values, not a {type(data).__name__}"
        )
    return _typed_mapping(spec, {str(name): value for name, value in data.items()})


def _typed_mapping(spec: ProcessSpec, data: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    values: dict[str, Any] = {}
    problems: list[str] = []
    for name, value in data.items():
        field_type = spec.inputs.get(name, {}).get("type")
        if isinstance(value, str) and name in spec.inputs and field_type not in (None, "string"):
            try:
                value = coerce_input(spec, name, value)
            except ValueError as exc:
                problems.append(str(exc))
                continue
        values[name] = value
    return values, problems


def checked(
    spec: ProcessSpec, values: dict[str, Any], problems: list[str], time_zone: str
) -> tuple[dict[str, Any], list[str]]:
    """The values a run takes now, and every problem: those found while typing the values first,
    then what `run_values` finds (a name whose value could not be typed is not also "required")."""
    failed = {name for name in spec.inputs if any(p.startswith(f"input '{name}'") for p in problems)}
    final, found = run_values(spec, values, datetime.now(UTC), time_zone)
    found = [p for p in found if not any(p.startswith(f"input '{name}' is required") for name in failed)]
    return final, problems + found


def single_inputs(spec: ProcessSpec, pairs: list[str], path: str | None) -> tuple[dict[str, Any], list[str]]:
    """The values of one run as given (the file's, then `--input`'s over them), and the problems
    found while typing them."""
    values: dict[str, Any] = {}
    problems: list[str] = []
    if path is not None:
        values, problems = file_object(spec, path)
    given, more = typed_pairs(spec, pairs)
    return {**values, **given}, problems + more


def single_run(
    spec: ProcessSpec, pairs: list[str], path: str | None, time_zone: str
) -> tuple[dict[str, Any], PlanDraft | None]:
    """One run's inputs as given, and the plan they render now; InputsRefusedError lists every
    problem (the command line's one line, exit 2), before anything starts."""
    given, problems = single_inputs(spec, pairs, path)
    values, problems = checked(spec, given, problems, time_zone)
    if problems:
        raise InputsRefusedError(spec, problems)
    return given, render_plan(spec, values)


@dataclass
class Row:
    """One row of a bulk file: its line, the values it gives (typed), the problems typing them."""

    line: int
    values: dict[str, Any]
    problems: list[str] = field(default_factory=list)


def read_rows(spec: ProcessSpec, path: str) -> list[Row]:
    """The rows of a CSV file (its header names the inputs; an empty cell gives no value, so the
    default applies) or a JSON Lines file (an object a line). A problem with the whole file (it
    cannot be read, a column no input has) raises CliError; a row's own problems stay with it."""
    file = Path(path)
    try:
        with file.open(newline="", encoding="utf-8-sig") as handle:
            rows = _csv_rows(spec, handle, path) if file.suffix.lower() == ".csv" else _jsonl_rows(spec, handle, path)
    except FileNotFoundError:
        raise CliError(f"inputs file '{path}' does not exist") from None
    except UnicodeDecodeError as exc:
        raise CliError(f"inputs file '{path}' is not UTF-8 text (byte {exc.start + 1} cannot be read)") from None
    except csv.Error as exc:
        raise CliError(f"inputs file '{path}' is not valid CSV: {exc}") from None
    except OSError as exc:
        raise CliError(f"cannot read inputs file '{path}': {exc.strerror}") from None
    if not rows:
        raise CliError(f"inputs file '{path}' has no rows")
    return rows


def _csv_rows(spec: ProcessSpec, handle: Any, path: str) -> list[Row]:
    reader = csv.reader(handle)
    header = next(reader, None)
    if header is None:
        return []
    names = [cell.strip() for cell in header]
    unknown = [name for name in names if name not in spec.inputs]
    if unknown:
        known = ", ".join(spec.inputs) or "none"
        raise CliError(
            f"inputs file '{path}': column(s) {', '.join(repr(n[:64]) for n in unknown[:5])} name no input of "
            f"{spec.label} (its inputs: {known}); nothing was started"
        )
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise CliError(f"inputs file '{path}': column(s) {', '.join(twice)} appear more than once; nothing was started")
    rows: list[Row] = []
    line = reader.line_num + 1
    for cells in reader:
        start, line = line, reader.line_num + 1
        if not any(cell.strip() for cell in cells):
            continue  # a blank line
        _count(rows, path)
        if len(cells) != len(names):
            rows.append(Row(start, {}, [f"has {len(cells)} cells where the header has {len(names)}"]))
            continue
        values, problems = typed_pairs(
            spec, [f"{name}={cell}" for name, cell in zip(names, cells, strict=True) if cell]
        )
        rows.append(Row(start, values, problems))
    return rows


def _jsonl_rows(spec: ProcessSpec, handle: Any, path: str) -> list[Row]:
    rows: list[Row] = []
    for number, text in enumerate(handle, start=1):
        if not text.strip():
            continue
        _count(rows, path)
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            rows.append(Row(number, {}, [f"is not JSON: {exc.msg} at column {exc.colno}"]))
            continue
        if not isinstance(data, dict):
            rows.append(Row(number, {}, [f"must be a JSON object of input values, not a {type(data).__name__}"]))
            continue
        values, problems = _typed_mapping(spec, {str(name): value for name, value in data.items()})
        rows.append(Row(number, values, problems))
    return rows


def _count(rows: list[Row], path: str) -> None:
    if len(rows) >= MAX_ROWS:
        raise CliError(
            f"inputs file '{path}' has more than {MAX_ROWS:,} rows; start larger batches from Python "
            "(stratagem.start_process) or split the file; nothing was started"
        )
