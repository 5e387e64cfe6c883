"""Planning: turn a goal (and, when replanning, the progress so far) into a valid plan draft.

The planner model gets the goal, the tools' schemas and the plan schema. Output that does not
parse or breaks a rule is sent back with the exact problems, a bounded number of times.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml
from pydantic import ValidationError

from .catalog import ToolCatalog
from .errors import ModelOutputError
from .ledger import StepRecord
from .models.base import Message, Model, ModelRequest, Purpose, Usage
from .plan import OutputFormat, PlanDraft, Risk
from .plan_files import describe_draft_errors
from .scheduling import reconcile
from .usage import CallUsage
from .validation import plan_problems

SYSTEM_PROMPT = """You plan for a durable business-process engine: turn the goal into a task graph that a
person reviews before anything runs. Executors (tools, cheaper models, people) carry it out.

Answer with one JSON object: {{"goal": "...", "steps": [...], "reason": "..."}}. Every step has a
unique "id" (letters, digits, '_' or '-'; kept across revisions), a short "title", a "kind", and
"depends_on": the ids of steps that must succeed first. Steps without a dependency between them
run in parallel, so add one only where a step needs the other's result. No cycles.
- kind "tool": "tool" names one of the tools below; "args" are its arguments.
- kind "llm": "instructions" for an executor model, and "tools": the only tools it may call
  (none if it only writes or reasons). Prefer a tool step when the call is known.
  "success_criteria" says how to tell the step did its job; they are checked after it runs.
- kind "human": "instructions" ask a person, whose answer is the step's output.
A string argument or instructions may use an ancestor's output: ${{step_id}} or ${{step_id.field}}.
Set "risk": "high" on steps that move money, contact outsiders or change records.
Optional: "output_format": "json" and "output_schema" (llm), "tier" ({tiers}), "requires_approval",
"timeout_seconds", "max_attempts", "approvers", "answer_schema" (human).

Tools, as name(argument: type, optional?: type):
{tools}"""


def render_tools(catalog: ToolCatalog) -> str:
    """The tools in a line or two each: a signature, what it does, and what no plan can change."""
    if not catalog.tools:
        return "(none: use llm and human steps only)"
    lines = []
    for spec in catalog.tools:
        description = _first_sentences(spec.description, 300) or "(no description)"
        line = f"- {spec.name}({_signature(spec.parameters)}): {description}"
        declared = [
            f"risk {spec.floor.value}" if spec.floor else "",
            "every use waits for approval" if spec.needs_approval else "",
        ]
        if any(declared):  # what the plan cannot change about it
            line += f" [declared by the tool: {', '.join(d for d in declared if d)}]"
        if spec.returns is not None:  # what references into its output (${step.field}) may name
            line += f"\n  returns: {json.dumps(spec.returns, separators=(',', ':'), sort_keys=True)}"
        lines.append(line)
    return "\n".join(lines)


def _first_sentences(text: str, limit: int) -> str:
    """`text` on one line, cut after the last whole sentence that fits in `limit` characters."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text.rfind(". ", 0, limit)
    return text[: cut + 1] if cut > 0 else text[: limit - 1] + "…"


def _signature(parameters: dict[str, Any]) -> str:
    properties = parameters.get("properties") or {}
    required = set(parameters.get("required") or [])
    return ", ".join(
        f"{name}{'' if name in required else '?'}: {_type_name(schema)}" for name, schema in properties.items()
    )


def _type_name(schema: Any, depth: int = 0) -> str:
    """A JSON schema as a short type: string, integer, list[string], "a"|"b", object{x: number}."""
    if not isinstance(schema, dict) or depth > 3:
        return "any"
    if "enum" in schema:
        return "|".join(json.dumps(v) for v in schema["enum"][:12])
    if "const" in schema:
        return json.dumps(schema["const"])
    for union in ("anyOf", "oneOf"):
        if union in schema:
            members = [m for m in schema[union] if not (isinstance(m, dict) and m.get("type") == "null")]
            shown = " | ".join(_type_name(m, depth + 1) for m in members) or "null"
            return shown + (" | null" if len(members) < len(schema[union]) else "")
    kind = schema.get("type")
    if kind == "array":
        return f"list[{_type_name(schema.get('items'), depth + 1)}]"
    if kind == "object" and schema.get("properties"):
        return "object{" + _signature(schema) + "}"
    if isinstance(kind, list):
        return " | ".join(str(k) for k in kind)
    return str(kind or "any")


# Leave these out of the schema a planner is held to: they make constrained decoding slow or
# impossible (a grammar for `maxItems: 10000` crashed llama.cpp's server) and say nothing a
# model needs; the validation of the answer still applies them.
_UNCONSTRAINED = ("title", "maxItems", "minLength", "maxLength", "pattern", "format", "default", "examples")


def planner_schema(catalog: ToolCatalog, *, tiers: Collection[str] = ()) -> dict[str, Any]:
    """The plan schema a planner model is held to, built from the worker's tools: a tool step's
    `tool` is one of their names and its `args` that tool's schema (one member of `anyOf` per
    tool), and an llm step's `tools` are tool names. A server that enforces the schema (strict
    JSON schema, a grammar) then cannot produce an unknown tool or ill-typed arguments."""
    strings = {"type": "array", "items": {"type": "string"}}
    common: dict[str, Any] = {
        # Without the id pattern's {0,63}: a counted repetition becomes a grammar rule per count.
        "id": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_-]*$"},
        "title": {"type": "string", "minLength": 1},
        "depends_on": strings,
        "success_criteria": strings,
        "risk": {"type": "string", "enum": [r.value for r in Risk]},
        "requires_approval": {"type": "boolean"},
        "timeout_seconds": {"type": "number"},
        "max_attempts": {"type": "integer"},
        "approvers": strings,
    }
    names = catalog.names
    steps: list[dict[str, Any]] = [
        _step_schema(
            "tool",
            {"tool": {"type": "string", "enum": [spec.name]}, "args": _plain(spec.parameters)},
            common,
            ["tool", "args"],
        )
        for spec in catalog.tools
    ]
    llm: dict[str, Any] = {
        "instructions": {"type": "string"},
        "tools": {"type": "array", "items": {"type": "string", "enum": names}} if names else {"type": "array"},
        "output_format": {"type": "string", "enum": [f.value for f in OutputFormat]},
        "output_schema": {"type": "object"},
    }
    if tiers:
        llm["tier"] = {"type": "string", "enum": sorted(tiers)}
    if not names:
        llm["tools"] = {"type": "array", "maxItems": 0}
    steps.append(_step_schema("llm", llm, common, ["instructions"]))
    human = {"instructions": {"type": "string"}, "answer_schema": {"type": "object"}}
    steps.append(_step_schema("human", human, common, ["instructions"]))
    return {
        "type": "object",
        "properties": {
            "goal": {"type": "string"},
            "steps": {"type": "array", "minItems": 1, "items": {"anyOf": steps}},
            "reason": {"type": "string"},
        },
        "required": ["goal", "steps"],
        "additionalProperties": False,
    }


def _step_schema(kind: str, own: dict[str, Any], common: dict[str, Any], required: list[str]) -> dict[str, Any]:
    """One kind of step. `kind` (and a tool step's `tool`) come first: a decoder held to the schema
    by a grammar then knows at once which member of `anyOf` it is in, where putting `id` first
    kept every member open and made llama.cpp's server a hundred times slower per token."""
    first = {"kind": {"type": "string", "enum": [kind]}}
    if "tool" in own:
        first["tool"] = own["tool"]
    properties = {**first, "id": common["id"], "title": common["title"], "depends_on": common["depends_on"]}
    properties.update({k: v for k, v in own.items() if k not in properties})
    properties.update({k: v for k, v in common.items() if k not in properties})
    return {
        "type": "object",
        "properties": properties,
        "required": [*first, "id", "title", "depends_on", *(r for r in required if r not in first)],
        "additionalProperties": False,
    }


def _plain(schema: dict[str, Any]) -> dict[str, Any]:
    """A tool's schema with its `$ref`s inlined and what constrained decoding cannot use left out."""
    definitions = schema.get("$defs") or schema.get("definitions") or {}

    def walk(node: Any, depth: int = 0) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str):
                target = definitions.get(ref.rpartition("/")[2])
                return walk(target, depth + 1) if target is not None and depth < 8 else {}
            plain: dict[str, Any] = {}
            for key, value in node.items():
                if key in _UNCONSTRAINED or key in ("$defs", "definitions"):
                    continue
                if key == "properties" and isinstance(value, dict):  # names, not keywords: keep them all
                    plain[key] = {name: walk(sub, depth) for name, sub in value.items()}
                elif key in ("required", "enum", "const"):
                    plain[key] = value
                else:
                    plain[key] = walk(value, depth)
            return plain
        if isinstance(node, list):
            return [walk(v, depth) for v in node]
        return node

    plain: dict[str, Any] = walk(schema)
    plain.setdefault("type", "object")
    return plain


@dataclass
class Progress:
    """What the planner is told when it revises a plan."""

    plan: PlanDraft
    records: Mapping[str, StepRecord]
    failure: str
    history: list[str] = field(default_factory=list)


def planning_messages(
    goal: str, catalog: ToolCatalog, progress: Progress | None = None, *, tiers: Collection[str] = ()
) -> list[Message]:
    system = SYSTEM_PROMPT.format(
        tools=render_tools(catalog),
        tiers="one of " + ", ".join(sorted(tiers)) if tiers else "none are configured",
    )
    if progress is None:
        user = f"Goal: {goal}\n\nWrite the plan."
    else:
        sections = [
            f"Goal: {goal}",
            f"The current plan:\n{progress.plan.model_dump_json(indent=1)}",
            f"Progress so far:\n{_render_progress(progress.records)}",
            f"What went wrong: {progress.failure}",
        ]
        if progress.history:
            sections.append("History of this run, oldest first:\n" + "\n".join(f"- {h}" for h in progress.history))
        sections.append(
            "Write the revised plan. Steps that succeeded keep their outputs and never run again: "
            "keep them unchanged (or leave them out). Change, add or drop the other steps so the goal "
            "can still be reached, and say why in 'reason'."
        )
        user = "\n\n".join(sections)
    return [Message(role="system", content=system), Message(role="user", content=user)]


def _render_progress(records: Mapping[str, StepRecord], limit: int = 600) -> str:
    lines = []
    for sid, record in records.items():
        line = f"- {sid}: {record.status.value}"
        if record.output is not None:
            output = record.output if isinstance(record.output, str) else json.dumps(record.output, default=str)
            line += f"; output: {output[:limit]}{'...' if len(output) > limit else ''}"
        if record.error:
            line += f"; error: {record.error[:limit]}"
        lines.append(line)
    return "\n".join(lines) or "(nothing has run)"


_FENCE = re.compile(r"^\s*```(?:json|yaml)?\s*\n(.*?)\n\s*```\s*$", re.DOTALL)


_TOO_DEEP = "the answer is nested too deeply to be a plan; reply with one flat JSON object following the plan schema"


def parse_plan_output(text: str) -> tuple[PlanDraft | None, list[str]]:
    """Parse a model's answer into a draft, or explain exactly why it could not be parsed."""
    body = text.strip()
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group(1)
    if not body:
        return None, ["the answer was empty; reply with one JSON object following the plan schema"]
    try:
        data: Any = json.loads(body)
    except RecursionError:
        return None, [_TOO_DEEP]
    except json.JSONDecodeError as exc:
        try:
            data = yaml.safe_load(body)
        except RecursionError:
            return None, [_TOO_DEEP]
        except yaml.YAMLError:
            return None, [f"the answer is not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})"]
    if not isinstance(data, dict):
        return None, [f"the answer must be a JSON object with 'goal' and 'steps', not a {type(data).__name__}"]
    try:
        return PlanDraft.model_validate(data), []
    except ValidationError as exc:
        return None, describe_draft_errors(exc)


# A plan a person can review fits well within this; a model that runs on past it (small local
# models do, repeating themselves) is stopped instead of filling its whole context window.
PLANNER_MAX_OUTPUT_TOKENS = 4096


@dataclass
class PlanningOutcome:
    draft: PlanDraft
    calls: int
    usage: Usage
    model: str
    rejected_attempts: list[list[str]] = field(default_factory=list)
    negotiated: list[str] = field(default_factory=list)
    failovers: list[str] = field(default_factory=list)


async def plan_with_repairs(
    model: Model,
    goal: str,
    catalog: ToolCatalog,
    *,
    progress: Progress | None = None,
    max_repairs: int = 2,
    first_call_index: int = 0,
    has_executor: bool = True,
    tiers: Collection[str] = (),
    approvers: Collection[str] | None = None,
    groups: Mapping[str, list[str]] | None = None,
    on_call: Callable[[CallUsage], None] = lambda _: None,
    model_name: str | None = None,
    activity_attempt: int = 1,
    request_timeout: Callable[[], float | None] = lambda: None,
    max_output_tokens: int = PLANNER_MAX_OUTPUT_TOKENS,
) -> PlanningOutcome:
    """Ask the model for a plan; feed the problems back up to `max_repairs` times.

    `on_call` hears of every call made (as `model_name`), so usage is known even when planning fails.
    Raises ModelOutputError, listing the last problems, when no attempt produced a valid plan.
    """
    messages = planning_messages(goal, catalog, progress, tiers=tiers)
    schema = planner_schema(catalog, tiers=tiers)
    rules: dict[str, Any] = {"has_executor": has_executor, "tiers": tiers, "approvers": approvers, "groups": groups}
    usage = Usage()
    rejected: list[list[str]] = []
    negotiated: list[str] = []
    failovers: list[str] = []
    for attempt in range(max_repairs + 1):
        response = await model.complete(
            ModelRequest(
                purpose=Purpose.plan,
                messages=messages,
                response_schema=schema,
                schema_name="plan",
                call_index=first_call_index + attempt,
                timeout_seconds=request_timeout(),
                attempt=activity_attempt,
                max_output_tokens=max_output_tokens,
            )
        )
        usage = usage + response.usage
        negotiated += [n for n in response.negotiated if n not in negotiated]
        failovers += response.failovers
        on_call(
            CallUsage(
                model=response.served_by or model_name or model.name,
                input_tokens=response.usage.input_tokens,
                output_tokens=response.usage.output_tokens,
                attempt=activity_attempt,
            )
        )
        draft, problems = parse_plan_output(response.text)
        if draft is None and response.stop_reason in ("length", "max_tokens"):
            problems = [f"the answer was cut off at {max_output_tokens:,} tokens; write a shorter plan", *problems]
        if draft is not None:
            if progress is None:
                problems = plan_problems(draft, catalog, **rules)
            else:
                # Validate the draft as the run will adopt it: with the succeeded steps it left
                # out carried in, so later steps may still depend on and reference them.
                merged = reconcile(progress.plan, draft, progress.records)
                problems = merged.problems or plan_problems(merged.draft, catalog, **rules)
        if draft is not None and not problems:
            return PlanningOutcome(
                draft=draft,
                calls=attempt + 1,
                usage=usage,
                model=response.model,
                rejected_attempts=rejected,
                negotiated=negotiated,
                failovers=failovers,
            )
        rejected.append(problems)
        messages = [
            *messages,
            Message(role="assistant", content=response.text),
            Message(
                role="user",
                content="That plan cannot be used:\n"
                + "\n".join(f"- {p}" for p in problems)
                + "\nReply with the corrected plan as one JSON object.",
            ),
        ]
    raise ModelOutputError(
        f"the planner gave no valid plan in {max_repairs + 1} attempt(s); last problems: " + "; ".join(rejected[-1])
    )
