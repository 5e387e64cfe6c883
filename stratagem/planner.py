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
from .plan import PlanDraft, plan_draft_json_schema
from .plan_files import describe_draft_errors
from .scheduling import reconcile
from .usage import CallUsage
from .validation import plan_problems

SYSTEM_PROMPT = """You are the planner of a durable business-process engine.
You turn a goal into an explicit task graph that a person reviews before anything runs.
Executors (tools, cheaper models, or people) carry out the steps; you do not.

Rules:
- Answer with one JSON object that follows the plan schema below, and nothing else.
- Every step has a unique id (letters, digits, '_' or '-'); ids stay stable across revisions.
- kind "tool" steps name one of the available tools and give arguments that match its schema.
- kind "llm" steps give instructions for an executor model; kind "human" steps ask a person.
- An llm step lists in "tools" the only tools its executor may call while it works (none if
  it only writes or reasons). Prefer a tool step when the call and its arguments are known.
- An llm step may set "tier" to pick its model: {tiers}
- depends_on lists the steps that must succeed first. Independent steps run in parallel,
  so only add a dependency when a step really needs the other one's result. No cycles.
- A step may use an ancestor's output by writing ${{step_id}} or ${{step_id.field}} inside a
  string argument or its instructions. Only steps it depends on (directly or transitively).
- Mark steps that move money, contact outsiders or change records with risk "high".

Plan schema:
{plan_schema}

Available tools:
{tools}"""


def render_tools(catalog: ToolCatalog) -> str:
    if not catalog.tools:
        return "(none: use llm and human steps only)"
    lines = []
    for spec in catalog.tools:
        params = json.dumps(spec.parameters, separators=(",", ":"), sort_keys=True)
        lines.append(f"- {spec.name}: {spec.description.strip() or '(no description)'}\n  parameters: {params}")
        if spec.needs_approval or spec.floor is not None:  # what the plan cannot change about it
            declared = [
                f"risk {spec.floor.value}" if spec.floor else "",
                "every use waits for approval" if spec.needs_approval else "",
            ]
            lines.append(f"  declared by the tool: {', '.join(d for d in declared if d)}")
        if spec.returns is not None:  # what references into its output (${step.field}) may name
            lines.append(f"  returns: {json.dumps(spec.returns, separators=(',', ':'), sort_keys=True)}")
    return "\n".join(lines)


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
        plan_schema=json.dumps(plan_draft_json_schema(), separators=(",", ":")),
        tools=render_tools(catalog),
        tiers=", ".join(sorted(tiers)) + " (leave it out for the default executor)"
        if tiers
        else "none are configured; leave it out",
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


@dataclass
class PlanningOutcome:
    draft: PlanDraft
    calls: int
    usage: Usage
    model: str
    rejected_attempts: list[list[str]] = field(default_factory=list)


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
) -> PlanningOutcome:
    """Ask the model for a plan; feed the problems back up to `max_repairs` times.

    `on_call` hears of every call made (as `model_name`), so usage is known even when planning fails.
    Raises ModelOutputError, listing the last problems, when no attempt produced a valid plan.
    """
    messages = planning_messages(goal, catalog, progress, tiers=tiers)
    rules: dict[str, Any] = {"has_executor": has_executor, "tiers": tiers, "approvers": approvers, "groups": groups}
    usage = Usage()
    rejected: list[list[str]] = []
    for attempt in range(max_repairs + 1):
        response = await model.complete(
            ModelRequest(
                purpose=Purpose.plan,
                messages=messages,
                response_schema=plan_draft_json_schema(),
                schema_name="plan",
                call_index=first_call_index + attempt,
                timeout_seconds=request_timeout(),
                attempt=activity_attempt,
            )
        )
        usage = usage + response.usage
        on_call(
            CallUsage(
                model=model_name or model.name,
                input_tokens=response.usage.input_tokens,
                output_tokens=response.usage.output_tokens,
                attempt=activity_attempt,
            )
        )
        draft, problems = parse_plan_output(response.text)
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
                draft=draft, calls=attempt + 1, usage=usage, model=response.model, rejected_attempts=rejected
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
