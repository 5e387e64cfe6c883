"""An eval set: goals to plan, each with what a good plan looks like.

    tools: [examples/vendor_onboarding/tools.py]   # the catalogue plans are written against
    cases:
      - id: acme                                   # optional: default case-1, case-2...
        goal: Onboard ACME Supplies as a vendor
        inputs: {vendor: ACME Supplies GmbH}      # optional: the run's inputs, shown to the planner
        reference: plan.yaml                       # optional: a plan file (relative to the set) or an inline plan
        checks:                                    # optional
          - uses: create_vendor_record             # some step calls this tool
          - asks_before: schedule_payment          # a human step (or an approval) comes before it
          - nothing_after: schedule_payment        # no step depends on it, directly or not
          - avoids: delete_vendor                  # no step calls it

A JSONL set holds one case a line (the same fields), and takes its tools from the command line.

`load_eval_set` reads one. Tool modules named by a path are read relative to the set's folder
(else as given: a module name, an `mcp:` source, a path from the current folder); tools from
the command line are added to the set's. A case may name its own `tools:` instead: it is then
planned against those alone (an example's goal against that example's worker), and they become
its `catalog`. A reference plan file is read as `stratagem run --plan` reads one; a process
file's `steps` are its plan. A goal may use its inputs as a process does (`${inputs.NAME}`).
Each mistake is one line naming the file and the case (ConfigError).
"""

from __future__ import annotations

import difflib
import json
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from stratagem.common.errors import ConfigError, StratagemError
from stratagem.domain.catalog import ToolCatalog
from stratagem.domain.plan import PlanDraft, StepKind
from stratagem.io.plan_files import parse_plan_data, parse_process_data, read_document
from stratagem.tools import ToolRegistry


class Check(BaseModel):
    """One thing a plan must do; exactly one field is set. A tool is named by its tool name; a
    step kind (`human`, `llm`) may stand for a tool where a check names one."""

    model_config = ConfigDict(extra="forbid")

    uses: str | None = Field(default=None, description="Some step calls this tool (or is of this kind).")
    avoids: str | None = Field(default=None, description="No step calls this tool (or is of this kind).")
    asks_before: str | None = Field(
        default=None, description="Every step calling this tool has a human step, or waits for approval, before it."
    )
    nothing_after: str | None = Field(
        default=None, description="No step depends, directly or not, on a step calling this tool."
    )

    @property
    def rule(self) -> tuple[str, str]:
        """The one rule it sets and the tool (or kind) it names: ("asks_before", "schedule_payment")."""
        for name in CHECK_RULES:
            value = getattr(self, name)
            if value is not None:
                return name, value
        return "", ""

    def __str__(self) -> str:
        rule, target = self.rule
        return f"{rule} {target}"


CHECK_RULES = ("uses", "avoids", "asks_before", "nothing_after")
KINDS = (StepKind.human.value, StepKind.llm.value)


class EvalCase(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1)
    goal: str = Field(min_length=1)
    inputs: dict[str, Any] = Field(default_factory=dict)
    reference: PlanDraft | None = None
    checks: list[Check] = Field(default_factory=list)
    catalog: ToolCatalog | None = Field(
        default=None, description="The catalogue this goal is planned against, where it is its own (a recorded run's)."
    )


class EvalSet(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    tools: list[str] = Field(default_factory=list, description="Tool modules (files or module names).")
    cases: list[EvalCase] = Field(min_length=1)


_SET_KEYS = ("name", "tools", "cases")
_INPUT_REFERENCE = re.compile(r"\$\{inputs\.([A-Za-z0-9_-]*)\}")


def load_eval_set(path: str | Path, *, tools: tuple[str, ...] | list[str] = ()) -> EvalSet:
    """The set in a YAML (or JSON) file, or a JSONL file of one case a line; `tools` are tool
    modules from the command line, added to the set's. Raises ConfigError, one line naming the
    file and the case, for the first mistake found."""
    file = Path(path)
    where = f"eval set '{file}'"
    if file.suffix.lower() in (".jsonl", ".ndjson"):
        own_tools: list[str] = []
        name, raw_cases = file.stem, _jsonl_cases(file, where)
    else:
        name, own_tools, raw_cases = _document(file, where)
    modules = [*(_module(m, file.parent) for m in own_tools), *tools]
    catalog = _catalogue(modules, where)
    cases: list[EvalCase] = []
    seen: dict[str, str] = {}
    for number, (line, raw) in enumerate(raw_cases, 1):
        case = _case(raw, number, f"{where} {line}".rstrip(), file, catalog)
        if case.id in seen:
            raise ConfigError(
                f"{where}: cases {seen[case.id]} and {number} both have the id '{case.id}'; ids must be unique"
            )
        seen[case.id] = str(number)
        cases.append(case)
    if not cases:
        raise ConfigError(f"{where} has no cases; give each a goal under cases:")
    return EvalSet(name=name, tools=list(dict.fromkeys(modules)), cases=cases)


def _document(file: Path, where: str) -> tuple[str, list[str], list[tuple[str, Any]]]:
    data = _read(file, where)
    if not isinstance(data, dict):
        raise ConfigError(f"{where} must hold a mapping with cases: (and tools:, name:), not a {type(data).__name__}")
    unknown = [str(key) for key in data if key not in _SET_KEYS]
    if unknown:
        raise ConfigError(f"{where} has unknown key {unknown[0]!r}: a set takes {', '.join(_SET_KEYS)}")
    name = data.get("name") or file.stem
    if not isinstance(name, str):
        raise ConfigError(f"{where}: name must be a text")
    tools = _strings(data.get("tools"), f"{where}: tools")
    cases = data.get("cases")
    if not isinstance(cases, list):
        raise ConfigError(f"{where} needs cases: a list of cases, each with a goal")
    return name, tools, [("", raw) for raw in cases]


def _read(file: Path, where: str) -> Any:
    try:
        return read_document(file, "eval set")
    except StratagemError as exc:
        raise ConfigError(str(exc)) from None


def _jsonl_cases(file: Path, where: str) -> list[tuple[str, Any]]:
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{where} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {where}: {getattr(exc, 'strerror', None) or exc}") from None
    cases = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            cases.append((f"line {number}", json.loads(line)))
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{where} line {number} is not valid JSON: {exc.msg} (column {exc.colno})") from None
    return cases


def _strings(value: Any, where: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        raise ConfigError(f"{where} must be a list of tool modules (files or module names)")
    return value


def _module(module: str, folder: Path) -> str:
    """A tool module as the set names it: a file relative to the set's folder when one is there."""
    if module.startswith("mcp") or not module.endswith(".py"):
        return module
    beside = folder / module
    return str(beside) if not Path(module).is_absolute() and beside.exists() else module


def _catalogue(modules: list[str], where: str) -> ToolCatalog:
    try:
        return ToolRegistry.from_modules(modules).catalog()
    except StratagemError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _case(raw: Any, number: int, where: str, file: Path, catalog: ToolCatalog) -> EvalCase:
    """Case `number` of the set (`where` names the file, and the line of a JSONL file)."""
    if not isinstance(raw, dict):
        raise ConfigError(
            f"{where}: case {number} must be a mapping with goal: (and id:, inputs:, reference:, checks:)"
        )
    fields = dict(raw)
    if "id" in fields and (not isinstance(fields["id"], str) or not fields["id"].strip()):
        raise ConfigError(f"{where}: case {number} has an empty or non-text id")
    named = f"{where}, case '{fields.setdefault('id', f'case-{number}')}'"
    own = fields.pop("tools", None)
    if own is not None:
        modules = [_module(m, file.parent) for m in _strings(own, f"{named}: tools")]
        catalog = _catalogue(modules, named)
        fields["catalog"] = catalog
    reference = fields.get("reference")
    if reference is not None:
        fields["reference"] = _reference(reference, file, named)
    try:
        case = EvalCase.model_validate(fields)
    except ValidationError as exc:
        raise ConfigError(f"{named}: " + "; ".join(_describe(e) for e in exc.errors())) from None
    problems = [*_check_problems(case, catalog), *_goal_problems(case), *_reference_problems(case, catalog)]
    if problems:
        raise ConfigError(f"{named}: " + "; ".join(problems))
    return case


def _reference(value: Any, file: Path, named: str) -> PlanDraft:
    """A reference plan: a plan (or process) file relative to the set, or one written inline."""
    source = f"{named}: reference"
    if isinstance(value, str):
        plan_file = file.parent / value
        try:
            value = read_document(plan_file, "reference plan file")
        except StratagemError as exc:
            raise ConfigError(f"{named}: {exc}") from None
        source = f"{named}: reference plan file '{plan_file}'"
    try:
        if isinstance(value, dict) and ("inputs" in value or "process" in value):
            spec = parse_process_data(value, source=source)
            if not spec.steps:
                raise ConfigError(f"{source} is a process without steps: it has no plan to compare with")
            return PlanDraft(goal=spec.goal, steps=spec.steps, reason=spec.reason)
        return parse_plan_data(value, source=source)
    except ConfigError:
        raise
    except StratagemError as exc:
        raise ConfigError(str(exc)) from None


def _describe(error: Any) -> str:
    loc = [str(part) for part in error["loc"]]
    if len(loc) >= 2 and loc[0] == "checks" and loc[1].isdigit():
        where = f"check {int(loc[1]) + 1}"
        if error["type"] == "extra_forbidden":
            return f"{where}: unknown rule '{loc[-1]}' (a check is one of {', '.join(CHECK_RULES)})"
        if error["type"] in ("model_type", "model_attributes_type", "dict_type"):
            return f"{where} must be a mapping such as {{uses: TOOL}}"
        return f"{where}: {loc[-1]}: {error['msg']}"
    if error["type"] == "extra_forbidden":
        return f"unknown field '{'.'.join(loc)}' (a case takes id, goal, inputs, reference, checks, tools)"
    if error["type"] == "missing":
        return f"{'.'.join(loc)} is missing"
    return f"{'.'.join(loc)}: {error['msg']}"


def _check_problems(case: EvalCase, catalog: ToolCatalog) -> list[str]:
    names = (case.catalog or catalog).names
    problems = []
    for number, check in enumerate(case.checks, 1):
        given = [(rule, getattr(check, rule)) for rule in CHECK_RULES if getattr(check, rule) is not None]
        if not given or not all(str(target).strip() for _, target in given):
            problems.append(f"check {number} names nothing: write one of {', '.join(CHECK_RULES)} with a tool name")
        elif len(given) > 1:
            problems.append(f"check {number} sets {' and '.join(r for r, _ in given)}: a check is one rule")
        elif given[0][1] not in names and given[0][1] not in KINDS:
            rule, target = given[0]
            close = difflib.get_close_matches(target, names, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            problems.append(f"check {number} ({rule}: {target}) names no tool in the catalogue nor human/llm{hint}")
    return problems


def _goal_problems(case: EvalCase) -> list[str]:
    missing = [name for name in _INPUT_REFERENCE.findall(case.goal) if name not in case.inputs]
    return [f"the goal uses ${{inputs.{name}}} but inputs: has no {name}" for name in dict.fromkeys(missing)]


def _reference_problems(case: EvalCase, catalog: ToolCatalog) -> list[str]:
    if case.reference is None:
        return []
    names = set((case.catalog or catalog).names)
    return [
        f"reference step '{step.id}' calls '{step.tool}', which is not a tool in the catalogue"
        for step in case.reference.steps
        if step.kind is StepKind.tool and step.tool is not None and step.tool not in names
    ]
