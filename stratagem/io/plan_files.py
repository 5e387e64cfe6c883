"""Plans written by people, as YAML or JSON files. A human is a planner too."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from stratagem.common.errors import PlanFileError
from stratagem.domain.plan import STEP_ID_PATTERN, PlanDraft
from stratagem.domain.process import ProcessSpec, spec_problems


def load_plan_file(path: str | Path) -> PlanDraft:
    """Read a plan draft from a .yaml/.yml/.json file, with an exact message for each problem."""
    file = Path(path)
    data = read_document(file, "plan file")
    if isinstance(data, dict) and ("inputs" in data or "process" in data):
        raise PlanFileError(
            f"plan file '{file}' is a process (it declares {'inputs' if 'inputs' in data else 'process'}:); "
            "run it with its inputs (`stratagem run --plan FILE --input NAME=VALUE`)"
        )
    return parse_plan_data(data, source=f"plan file '{file}'")


def is_process_file(path: str | Path) -> bool:
    """Whether a plan file declares `inputs:` or a `process:` header (a ProcessSpec, not a plan)."""
    data = read_document(Path(path), "plan file")
    return isinstance(data, dict) and ("inputs" in data or "process" in data)


def load_process_file(path: str | Path) -> ProcessSpec:
    """Read a process: a plan file with `inputs:` and, optionally, a `process:` header (name,
    version, description). Without a header its name is the file's stem and its version 1."""
    file = Path(path)
    return parse_process_data(read_document(file, "process file"), source=f"process file '{file}'", stem=file.stem)


def parse_process_data(data: Any, *, source: str, stem: str = "process") -> ProcessSpec:
    if not isinstance(data, dict):
        raise PlanFileError(
            f"{source} must hold a mapping with 'goal', 'inputs' and 'steps', not a {type(data).__name__}"
        )
    header = data.get("process") or {}
    if not isinstance(header, dict):
        raise PlanFileError(f"{source}: 'process' must be a mapping of name, version and description")
    unknown = sorted(set(header) - {"name", "version", "description"})
    if unknown:
        raise PlanFileError(f"{source}: 'process' takes name, version and description, not {', '.join(unknown)}")
    body = {key: value for key, value in data.items() if key != "process"}
    name = header.get("name") or re.sub(r"[^a-z0-9_.-]+", "-", stem.lower()).strip("-.") or "process"
    version = header.get("version", 1)
    fields = {"name": name, "version": str(version), "description": header.get("description") or "", **body}
    try:
        spec = ProcessSpec.model_validate({**fields, "source": source})
    except ValidationError as exc:
        raise PlanFileError(f"{source} is invalid: " + "; ".join(describe_draft_errors(exc, data))) from None
    problems = spec_problems(spec)
    if problems:
        raise PlanFileError(f"{source} is invalid: " + "; ".join(problems))
    return spec


def read_document(file: Path, what: str) -> Any:
    """A YAML or JSON file's content, or a PlanFileError saying exactly why not."""
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PlanFileError(f"{what} '{file}' does not exist") from None
    except UnicodeDecodeError as exc:
        raise PlanFileError(f"{what} '{file}' is not UTF-8 text (byte {exc.start + 1} cannot be read)") from None
    except OSError as exc:
        raise PlanFileError(f"cannot read {what} '{file}': {exc.strerror}") from None
    try:
        return json.loads(text) if file.suffix.lower() == ".json" else yaml.safe_load(text)
    except json.JSONDecodeError as exc:
        raise PlanFileError(
            f"{what} '{file}' is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}"
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise PlanFileError(f"{what} '{file}' is not valid YAML{where}: {getattr(exc, 'problem', exc)}") from None
    except RecursionError:
        raise PlanFileError(f"{what} '{file}' is nested too deeply to be a plan") from None


def parse_plan_data(data: Any, *, source: str = "plan") -> PlanDraft:
    if not isinstance(data, dict):
        raise PlanFileError(f"{source} must hold a mapping with 'goal' and 'steps', not a {type(data).__name__}")
    try:
        return PlanDraft.model_validate(data)
    except ValidationError as exc:
        problems = describe_draft_errors(exc, data)
        raise PlanFileError(f"{source} is invalid: " + "; ".join(problems)) from None


def describe_draft_errors(exc: ValidationError, data: Any = None) -> list[str]:
    """Every problem at once, a step named by its id where it has one (else by its place)."""
    steps = data.get("steps") if isinstance(data, dict) else None
    return [_describe(error, steps if isinstance(steps, list) else []) for error in exc.errors()]


def _describe(error: Mapping[str, Any], steps: list[Any]) -> str:
    loc = list(error["loc"])
    if len(loc) >= 2 and loc[0] == "steps" and isinstance(loc[1], int):
        given = steps[loc[1]] if loc[1] < len(steps) else None
        name = given.get("id") if isinstance(given, dict) else None
        # By its id when it is a valid one (an invalid id is the problem, not a name to repeat).
        valid = isinstance(name, str) and re.fullmatch(STEP_ID_PATTERN, name) is not None
        where = f"step '{name}'" if valid else f"step #{loc[1] + 1}"
        rest = ".".join(str(p) for p in loc[2:])
        if rest:
            where += f" field '{rest}'"
    elif loc:
        where = f"field '{'.'.join(str(p) for p in loc)}'"
    else:
        where = "the plan"
    return f"{where}: {error['msg']}"


def dump_plan(plan: PlanDraft) -> str:
    """A plan as YAML a person can edit and load again."""
    # Only the draft's fields: a Plan's revision and author are not part of a plan file.
    data = plan.model_dump(mode="json", exclude_defaults=True, include=set(PlanDraft.model_fields))
    # YAML reads these characters back as line breaks, so a text holding one is written escaped.
    readable = not any(c in json.dumps(data, ensure_ascii=False) for c in _YAML_LINE_BREAKS)
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=readable)


_YAML_LINE_BREAKS = ("\x85", "\u2028", "\u2029")
