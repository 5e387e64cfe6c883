"""The token and price model of the model_economics measure: what each scripted model call costs.

Each scripted answer carries an explicit `usage:`, computed here from the prompt Stratagem really
sends for that call, at 4 characters per token: the messages Stratagem builds (the planner's
`planning_messages`, plus the plan schema its request carries; the executor's `executor_messages` plus the turns so far, tool results
included), plus the JSON schemas of the tools offered with the call, plus 4 tokens per message.
Outputs are the answer's text (the plan as JSON, the executor's answer), or the tool calls as JSON.
The prices each role is charged at are here too.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from stratagem.domain import activity_io
from stratagem.domain.catalog import ToolSpec
from stratagem.domain.plan import PlanDraft, Step, StepKind
from stratagem.domain.references import resolve
from stratagem.domain.run_types import JOINT_STEP_ID
from stratagem.domain.usage import Price
from stratagem.io.executor import executor_messages
from stratagem.io.planner import planner_schema, planning_messages
from stratagem.models.base import Message, ToolCall
from stratagem.tools import ToolContext, ToolRegistry

from .economics_tasks import Task

CHARS_PER_TOKEN = 4
MESSAGE_OVERHEAD_TOKENS = 4

PLANNER_AS = ("openai:gpt-4.1", Price(input_per_mtok=2.0, output_per_mtok=8.0))
EXECUTOR_AS = ("openai:gpt-4.1-mini", Price(input_per_mtok=0.40, output_per_mtok=1.60))
JOINT_AS = ("openai:gpt-4.1", Price(input_per_mtok=2.0, output_per_mtok=8.0))


def _tokens(chars: int) -> int:
    return math.ceil(chars / CHARS_PER_TOKEN)


def _call_json(call: ToolCall) -> str:
    return json.dumps({"name": call.name, "arguments": call.arguments})


def message_chars(messages: list[Message]) -> int:
    return sum(len(m.content) + sum(len(_call_json(c)) for c in m.tool_calls) for m in messages)


def _spec_chars(specs: list[ToolSpec]) -> int:
    return sum(
        len(json.dumps({"name": s.name, "description": s.description, "parameters": s.parameters})) for s in specs
    )


def prompt_tokens(messages: list[Message], specs: list[ToolSpec]) -> int:
    return _tokens(message_chars(messages) + _spec_chars(specs)) + MESSAGE_OVERHEAD_TOKENS * len(messages)


async def _invoke(registry: ToolRegistry, workspace: Path, name: str, args: dict[str, Any], step_id: str) -> Any:
    context = ToolContext(
        run_id="model", step_id=step_id, revision=1, attempt=1, workspace=workspace, execution_id="model"
    )
    return await registry.invoke(name, args, context)


def _tool_text(output: Any) -> str:
    # As the executor hands a tool's result to the model (stratagem/io/executor.py).
    text = output if isinstance(output, str) else json.dumps(output, default=str)
    return text[:16_000] + (f"\n[cut: {len(text):,} characters in all]" if len(text) > 16_000 else "")


async def conversation(
    registry: ToolRegistry, workspace: Path, request: activity_io.LlmStepInput, turns: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[Message]]:
    """The scripted entries (with usage) of an executor's loop, and the conversation it builds."""
    allowed = list(request.step.tools)
    specs = [registry.get(n).spec() for n in allowed if n in registry]
    messages = executor_messages(request, allowed)
    entries = []
    for round_, turn in enumerate(turns):
        usage_in = prompt_tokens(messages, specs)
        if "calls" in turn:
            calls = [
                ToolCall(id=f"call_{round_}_{i}", name=c["tool"], arguments=c["args"])
                for i, c in enumerate(turn["calls"])
            ]
            out_text = json.dumps([{"name": c.name, "arguments": c.arguments} for c in calls])
            messages.append(Message(role="assistant", content="", tool_calls=calls))
            for call in calls:
                output = await _invoke(registry, workspace, call.name, call.arguments or {}, request.step.id)
                messages.append(Message(role="tool", tool_call_id=call.id, content=_tool_text(output)))
        else:
            out_text = turn["text"]
            messages.append(Message(role="assistant", content=out_text))
        entries.append({**turn, "usage": {"input_tokens": usage_in, "output_tokens": _tokens(len(out_text))}})
    return entries, messages


async def plan_mode_script(
    registry: ToolRegistry, workspace: Path, task: Task
) -> tuple[dict[str, Any], dict[str, Any], dict[str, list[Message]]]:
    """The planner's and the executor's scripts, with usage; and each llm step's modelled conversation."""
    catalog = registry.catalog()
    # The plan schema travels as the request's response format, which providers count as input.
    schema_chars = len(json.dumps(planner_schema(catalog), separators=(",", ":")))
    planner_in = prompt_tokens(planning_messages(task.goal, catalog), []) + _tokens(schema_chars)
    planner_out = _tokens(len(json.dumps(task.plan, default=str)))
    planner = {"planner": [{"plan": task.plan, "usage": {"input_tokens": planner_in, "output_tokens": planner_out}}]}
    draft = PlanDraft.model_validate(task.plan)
    outputs: dict[str, Any] = {}
    executor: dict[str, Any] = {}
    conversations: dict[str, list[Message]] = {}
    for step in draft.steps:  # the plans are written in dependency order
        if step.kind is StepKind.tool:
            outputs[step.id] = await _invoke(registry, workspace, step.tool or "", resolve(step.args, outputs), step.id)
            continue
        request = activity_io.LlmStepInput(
            run_id="model",
            revision=1,
            step=step,
            instructions=str(resolve(step.instructions, outputs)),
            inputs={d: outputs.get(d) for d in step.depends_on},
            model="model",
        )
        entries, messages = await conversation(registry, workspace, request, task.executor_turns[step.id])
        executor[step.id] = entries
        conversations[step.id] = messages
        final = entries[-1]["text"]
        outputs[step.id] = json.loads(final) if step.output_format.value == "json" else final
    return planner, {"executor": executor}, conversations


async def joint_script(registry: ToolRegistry, workspace: Path, task: Task) -> tuple[dict[str, Any], list[Message]]:
    catalog = registry.catalog()
    step = Step(
        id=JOINT_STEP_ID,
        title="Reach the goal in one loop",
        kind=StepKind.llm,
        instructions=task.goal,
        tools=catalog.names,
    )
    request = activity_io.LlmStepInput(
        run_id="model", revision=1, step=step, instructions=task.goal, inputs={}, model="model"
    )
    entries, messages = await conversation(registry, workspace, request, task.joint_turns)
    return {"executor": {JOINT_STEP_ID: entries}}, messages
