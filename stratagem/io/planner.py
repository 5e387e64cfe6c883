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

from stratagem.common.errors import ModelOutputError
from stratagem.domain.catalog import ToolCatalog
from stratagem.domain.ledger import StepRecord
from stratagem.domain.plan import STEP_ID_PATTERN, OutputFormat, PlanDraft, Risk
from stratagem.domain.scheduling import reconcile
from stratagem.domain.usage import CallUsage
from stratagem.domain.validation import plan_problems
from stratagem.io.plan_files import describe_draft_errors
from stratagem.models.base import Message, Model, ModelRequest, Purpose, Usage

SYSTEM_PROMPT = """You plan a business process as a task graph that a person reviews before it runs.
Answer with one JSON object: {{"goal", "steps", "reason"}}. Each step has a unique "id" (letters,
digits, '_', '-'), a short "title" and "depends_on" (ids that must succeed first; steps without a
dependency run in parallel; no cycles), and is one of:
- a tool step: "tool" (one of the tools below) and its "args";
- "kind": "llm": "instructions" for an executor model, "tools" it may call (none to only write),
  and "success_criteria", checked after it runs. Prefer a tool step when the call is known.
- "kind": "human": "instructions" asking a person, whose answer is its output.
Strings in args or instructions may use an ancestor's output: ${{step_id}} or ${{step_id.field}}.
Set "risk": "high" on steps that move money, contact outsiders or change records.{tiers}

Tools:
{tools}"""


def render_tools(catalog: ToolCatalog) -> str:
    """The tools, a line each: what it does, and what no plan can change. Their arguments are in
    the plan schema the request carries (or, where the endpoint takes no schema, the prompt)."""
    if not catalog.tools:
        return "(none: use llm and human steps only)"
    lines = []
    for spec in catalog.tools:
        description = _first_sentences(spec.description, 200) or "(no description)"
        line = f"- {spec.name}: {description}"
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


# Leave these out of the schema a planner is held to: they make constrained decoding slow or
# impossible (a grammar for `maxItems: 10000` crashed llama.cpp's server) and say nothing a
# model needs; the validation of the answer still applies them.
_UNCONSTRAINED = ("title", "maxItems", "minLength", "maxLength", "pattern", "format", "default", "examples")


def planner_schema(catalog: ToolCatalog, *, tiers: Collection[str] = (), approvers: bool = False) -> dict[str, Any]:
    """The plan schema a planner model is held to, built from the worker's tools: a tool step's
    `tool` is one of their names and its `args` that tool's schema (one member of `anyOf` per
    tool), and an llm step's `tools` are tool names. A server that enforces the schema (strict
    JSON schema, a grammar) then cannot produce an unknown tool or ill-typed arguments.

    It is as small as it can be, since the request carries it and providers count it as input:
    shared parts are `$defs`, a tool step leaves out `kind` (tool is the default), and fields a
    planner has no business setting (time limits, attempts) are left to plan files. `depends_on`
    may be left out (no dependencies) and comes after the step's content: small models forced to
    write it first filled it with tool names. Each member
    starts with what tells the members apart (`tool`, or `kind`): a decoder held to the schema by a
    grammar then knows at once which member it is in; with `id` first, every member stayed open
    and llama.cpp's server ran a hundred times slower per token."""
    ref = {name: {"$ref": f"#/$defs/{name}"} for name in ("id", "title", "ids", "risk")}
    head = {"id": ref["id"], "title": ref["title"]}
    tail: dict[str, Any] = {"risk": ref["risk"]}
    if approvers:
        tail["approvers"] = ref["ids"]
    names = catalog.names
    steps = [
        _member(
            {"tool": {"enum": [spec.name]}, **head, "args": _plain(spec.parameters), "depends_on": ref["ids"], **tail},
            ["tool", "args"],
        )
        for spec in catalog.tools
    ]
    llm: dict[str, Any] = {
        "kind": {"enum": ["llm"]},
        **head,
        "instructions": {"type": "string"},
        "depends_on": ref["ids"],
        "tools": {"type": "array", "items": {"enum": names}} if names else {"type": "array", "maxItems": 0},
        "success_criteria": ref["ids"],
        "output_format": {"enum": [f.value for f in OutputFormat]},
        "output_schema": {"type": "object"},
    }
    if tiers:
        llm["tier"] = {"enum": sorted(tiers)}
    steps.append(_member({**llm, **tail}, ["kind", "instructions"]))
    human = {
        "kind": {"enum": ["human"]},
        **head,
        "instructions": {"type": "string"},
        "answer_schema": {"type": "object"},
    }
    steps.append(_member({**human, **tail}, ["kind", "instructions"]))
    return {
        "type": "object",
        "properties": {
            "goal": {"type": "string"},
            "steps": {"type": "array", "minItems": 1, "items": {"anyOf": steps}},
            "reason": {"type": "string"},
        },
        "required": ["goal", "steps"],
        "additionalProperties": False,
        "$defs": {
            "id": {"type": "string", "pattern": STEP_ID_PATTERN},
            "title": {"type": "string", "minLength": 1},
            "ids": {"type": "array", "items": {"type": "string"}},
            "risk": {"enum": [r.value for r in Risk]},
        },
    }


def _member(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    first = [name for name in required if name in ("tool", "kind")]
    rest = [name for name in required if name not in first]
    return {
        "type": "object",
        "properties": properties,
        "required": [*first, "id", "title", *rest],
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
    goal: str,
    catalog: ToolCatalog,
    progress: Progress | None = None,
    *,
    tiers: Collection[str] = (),
    system_prompt: str | None = None,
) -> list[Message]:
    system = (system_prompt or SYSTEM_PROMPT).format(
        tools=render_tools(catalog),
        tiers=f'\nAn llm step may set "tier": {", ".join(sorted(tiers))} (default: the executor).' if tiers else "",
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
            output = (
                record.output
                if isinstance(record.output, str)
                else json.dumps(record.output, default=str, ensure_ascii=False)
            )
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
        return None, describe_draft_errors(exc, data)


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
    repairs: list[str] = field(default_factory=list)
    """What the engine mended in the answers without asking the model again (ids it assigned,
    dependencies it resolved, an answer cut off at its deadline that it closed), one line each."""


class PlanningFailed(ModelOutputError):
    """No attempt gave a valid plan: `attempts` holds each attempt's problems, in order."""

    def __init__(self, message: str, attempts: list[list[str]], repairs: list[str] | None = None):
        super().__init__(message)
        self.attempts = attempts
        self.repairs = repairs or []


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
    system_prompt: str | None = None,
) -> PlanningOutcome:
    """Ask the model for a plan; feed the problems back up to `max_repairs` times.

    `on_call` hears of every call made (as `model_name`), so usage is known even when planning fails.
    `system_prompt` replaces SYSTEM_PROMPT (a template with `{tools}` and `{tiers}`): how a prompt
    version is compared with another (`stratagem eval`).
    Raises PlanningFailed, listing the last problems, when no attempt produced a valid plan.
    """
    messages = planning_messages(goal, catalog, progress, tiers=tiers, system_prompt=system_prompt)
    schema = planner_schema(catalog, tiers=tiers, approvers=bool(groups) or bool(approvers))
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
    raise PlanningFailed(
        f"the planner gave no valid plan in {max_repairs + 1} attempt(s); last problems: " + "; ".join(rejected[-1]),
        rejected,
    )
