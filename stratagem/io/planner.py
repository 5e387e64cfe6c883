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
from stratagem.domain.plan import PlanDraft
from stratagem.domain.scheduling import reconcile
from stratagem.domain.usage import CallUsage
from stratagem.domain.validation import plan_problems
from stratagem.io.plan_files import describe_draft_errors
from stratagem.io.plan_mending import close_cut_answer, mend_steps
from stratagem.io.planner_schema import planner_output_cap, planner_schema
from stratagem.models.base import Message, Model, ModelRequest, ModelTimeout, Purpose, Usage

SYSTEM_PROMPT = """You plan a business process as a task graph that a person reviews before it runs.
Answer with one JSON object: {{"goal", "steps", "reason"}}. {naming} and "depends_on" ({dependencies}
that must succeed first; steps without a dependency run in parallel; no cycles), and is one of:
- a tool step: "tool" (one of the tools below) and its "args";
- "kind": "llm": "instructions" for an executor model, "tools" it may call (none to only write),
  and "success_criteria", checked after it runs. Prefer a tool step when the call is known.
- "kind": "human": "instructions" asking a person, whose answer is its output.
Strings in args or instructions may use an ancestor's output: ${{{reference}}} or ${{{reference}.field}}.
Set "risk": "high" on steps that move money, contact outsiders or change records.{tiers}

Tools:
{tools}"""


# How steps are named: a first plan by their places (the engine makes the ids), a revision by the
# ids its current plan already gives them (planner_schema's `positional`). SYSTEM_PROMPT's fields.
NAMING = {
    True: {
        "naming": 'The steps are step1, step2, ... in the order you write them. Each has a short "title"',
        "dependencies": 'the steps, "step1", "step2"...,',
        "reference": "step1",
    },
    False: {
        "naming": "Each step has a unique \"id\" (letters, digits, '_', '-'), a short \"title\"",
        "dependencies": "ids",
        "reference": "step_id",
    },
}


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
        **NAMING[progress is None],
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
    data, problems = _load(text)
    return (None, problems) if data is None else _validated(data)


def _load(text: str) -> tuple[dict[str, Any] | None, list[str]]:
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
    return data, []


def _validated(data: dict[str, Any]) -> tuple[PlanDraft | None, list[str]]:
    try:
        return PlanDraft.model_validate(data), []
    except ValidationError as exc:
        return None, describe_draft_errors(exc, data)


# The most a planning call may write when no cap is given: planner_output_cap sizes it to the
# catalogue, far below this for any catalogue of a few dozen tools.
PLANNER_MAX_OUTPUT_TOKENS = 8192
# How a provider says an answer was cut off: at its output cap, or at its time limit (streamed).
_CUT = ("length", "max_tokens", "deadline")


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


@dataclass
class _Reading:
    """One answer, read: the draft (None: none could be read), its problems, what the engine
    mended, what to show the model when asking for a repair, and whether to take it as it is."""

    draft: PlanDraft | None
    problems: list[str]
    mended: list[str]
    shown: str
    usable: bool


def _read_answer(
    text: str, stop_reason: str | None, *, goal: str, cap: int, seconds: float | None, last: bool, positional: bool
) -> _Reading:
    data, problems = _load(text)
    shown, mended, usable = text, [], True
    if stop_reason in _CUT and data is None:  # cut off before the plan was whole
        deadline = stop_reason == "deadline" and seconds
        where = f"the {seconds:g} s time limit" if deadline else f"{cap:,} output tokens"
        data, repeats = close_cut_answer(text)
        if data is None:
            return _Reading(None, [f"the answer was cut off at {where}; write a shorter plan"], [], text, False)
        data["goal"] = data.get("goal") or goal
        shown = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
        kept = f"the {len(data['steps'])} step(s) written whole"
        problems = [f"the answer was cut off at {where} after {kept}; reply with the whole plan, shorter"]
        usable = repeats > 0 or last
        if repeats:
            mended.append(f"the answer ran on, repeating steps, and was cut off at {where}: kept {kept}")
        elif last:
            mended.append(f"the answer was cut off at {where}: the plan holds {kept}; check it reaches the goal")
    if data is None:
        return _Reading(None, problems, [], text, False)
    mended += mend_steps(data, positional=positional)
    draft, invalid = _validated(data)
    if draft is not None and problems and usable:
        # Taken from a cut answer: its reviewer reads so in its reason.
        draft = draft.model_copy(update={"reason": f"{draft.reason} (Stratagem: {mended[0]}.)".strip()})
    return _Reading(draft, [*problems, *invalid], mended, shown, draft is not None and usable)


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
    max_output_tokens: int | None = None,
    system_prompt: str | None = None,
) -> PlanningOutcome:
    """Ask the model for a plan; feed the problems back up to `max_repairs` times.

    An answer the engine can mend (ids, dependencies: stratagem.io.plan_mending) is mended, not
    sent back. An answer cut off at its output cap (by default sized to the catalogue:
    planner_output_cap) or at its time limit (streamed calls), and a call that timed out, are
    attempts like an invalid answer: the model is asked for the whole plan, shorter, shown the
    steps it wrote whole. A cut answer that was repeating itself, or the last one, is taken as
    those steps when they make a valid plan (its reason says so; a person reviews every plan).
    Each repair shows the model only its last answer, so a call's input stays near the first's.

    `on_call` hears of every call made (as `model_name`), so usage is known even when planning fails.
    `system_prompt` replaces SYSTEM_PROMPT (a template with `{tools}` and `{tiers}`): how a prompt
    version is compared with another (`stratagem eval`).
    Raises PlanningFailed, listing the last problems, when no attempt produced a valid plan; the
    last attempt's ModelTimeout when every attempt timed out (the server may be down: retry).
    """
    asked = planning_messages(goal, catalog, progress, tiers=tiers, system_prompt=system_prompt)
    messages = asked
    positional = progress is None
    schema = planner_schema(catalog, tiers=tiers, approvers=bool(groups) or bool(approvers), positional=positional)
    cap = max_output_tokens or planner_output_cap(catalog, progress.plan if progress else None)
    rules: dict[str, Any] = {"has_executor": has_executor, "tiers": tiers, "approvers": approvers, "groups": groups}
    usage = Usage()
    rejected: list[list[str]] = []
    repairs: list[str] = []
    negotiated: list[str] = []
    failovers: list[str] = []
    for attempt in range(max_repairs + 1):
        last = attempt == max_repairs
        seconds = request_timeout()
        try:
            response = await model.complete(
                ModelRequest(
                    purpose=Purpose.plan,
                    messages=messages,
                    response_schema=schema,
                    schema_name="plan",
                    call_index=first_call_index + attempt,
                    timeout_seconds=seconds,
                    attempt=activity_attempt,
                    max_output_tokens=cap,
                )
            )
        except ModelTimeout as exc:
            on_call(CallUsage(model=model_name or model.name, attempt=activity_attempt))
            if last and all(p[:1] == [_TIMED_OUT] for p in rejected):
                raise
            rejected.append([_TIMED_OUT])
            messages = [*asked, Message(role="user", content=f"{exc}. {_SHORTER}")]
            continue
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
        reading = _read_answer(
            response.text, response.stop_reason, goal=goal, cap=cap, seconds=seconds, last=last, positional=positional
        )
        problems = reading.problems
        repairs += reading.mended
        if reading.usable and reading.draft is not None:
            if progress is None:
                broken = plan_problems(reading.draft, catalog, **rules)
            else:
                # Validate the draft as the run will adopt it: with the succeeded steps it left
                # out carried in, so later steps may still depend on and reference them.
                merged = reconcile(progress.plan, reading.draft, progress.records)
                broken = merged.problems or plan_problems(merged.draft, catalog, **rules)
            problems = [*problems, *broken]
            if not broken:
                return PlanningOutcome(
                    draft=reading.draft,
                    calls=attempt + 1,
                    usage=usage,
                    model=response.model,
                    rejected_attempts=rejected,
                    negotiated=negotiated,
                    failovers=failovers,
                    repairs=repairs,
                )
        rejected.append(problems)
        # Only the last answer goes back: the conversation, and each call's input, stay small.
        messages = [
            *asked,
            Message(role="assistant", content=reading.shown),
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
        repairs,
    )


_TIMED_OUT = "no answer arrived within the time limit"
_SHORTER = "Reply with a shorter plan: as few steps as reach the goal, with short titles and instructions."
