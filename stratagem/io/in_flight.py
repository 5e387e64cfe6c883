"""The tool calls an llm step's executor started and had not answered when its attempt died.

The calls of one model answer that have no result yet run concurrently (at most `max_parallel`
at once: stratagem.io.executor). Each gets its position in the step's conversation before any of
them runs, in the answer's order (`owed_at`): the first owed call of a turn whose earlier calls
have `k` results takes the position after the `k`-th, whatever order they finished in, so a
resumed attempt gives each call the position, and so the idempotency key (`.../c<position>`),
it had. Results go into the conversation, and their records into the progress, in the answer's
order too (`insert_answer`), whatever order the calls finish in.

Every save of the executor's progress names the tool calls started and not answered yet
(`InFlightCall`: the call's position, the tool, a digest of the arguments), each before it
starts: a call is launched, then the progress saved, then the calls run. An attempt that resumes
with calls named and unanswered may be looking at effects that happened without a result: the
worker died after a tool acted and before its answer was saved (or before the call started: the
check then finds nothing). When the model asks, at such a position, for the same tool with the
same arguments (a resumed conversation asks exactly that), and the tool declares `reconcile=`,
the check runs first with the same arguments and context (the same key): an answer becomes the
tool's result and the tool is not called again. A tool without a check is called again, with the
same key.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection
from typing import Any

from pydantic import BaseModel, Field

from stratagem.common.errors import ToolArgumentsError
from stratagem.domain.ledger import ToolCallRecord
from stratagem.models.base import Message, ToolCall
from stratagem.tools.definition import ToolContext
from stratagem.tools.registry import ToolRegistry

RECONCILED = (
    "reconciled: an earlier attempt made this call; the tool's check found its effect, so it was not called again"
)


class InFlightCall(BaseModel):
    """A tool call about to start, or started and not answered yet."""

    call: int = Field(description="Its position in the step's conversation (the key ends in /c<call>).")
    tool: str
    digest: str = Field(description="sha256 of the arguments as canonical JSON.")


def in_flight_calls(value: Any) -> Any:
    """The calls a checkpoint names, as a list: before several ran at once, it named one or none."""
    if value is None:
        return []
    return [value] if isinstance(value, dict | InFlightCall) else value


def arguments_digest(arguments: dict[str, Any]) -> str:
    """The digest of a call's arguments, the same for equal arguments however they were ordered."""
    exact = json.dumps(arguments, ensure_ascii=False, default=str, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(exact.encode()).hexdigest()


def flight(position: int, call: ToolCall) -> InFlightCall:
    digest = arguments_digest(call.arguments) if call.arguments is not None else ""
    return InFlightCall(call=position, tool=call.name, digest=digest)


def _last_turn(messages: list[Message]) -> int | None:
    return next((i for i in range(len(messages) - 1, -1, -1) if messages[i].role == "assistant"), None)


def owed(messages: list[Message]) -> list[ToolCall]:
    """The tool calls of the conversation's last assistant turn that have no result yet."""
    return [call for _, call in owed_at(messages, 0)]


def owed_at(messages: list[Message], recorded: int) -> list[tuple[int, ToolCall]]:
    """The tool calls of the conversation's last assistant turn that have no result yet, each with
    its position, the progress holding `recorded` tool call records (one per result given)."""
    turn = _last_turn(messages)
    if turn is None:
        return []
    answered = {m.tool_call_id for m in messages[turn + 1 :] if m.role == "tool"}
    calls = messages[turn].tool_calls
    first = recorded - sum(1 for call in calls if call.id in answered)
    return [(first + i, call) for i, call in enumerate(calls) if call.id not in answered]


def insert_answer(
    messages: list[Message], records: list[ToolCallRecord], answer: Message, record: ToolCallRecord
) -> None:
    """Put a call's result and record where the answer's order puts them: after the results of
    the turn's calls before it, before those of the calls after it that finished first."""
    turn = _last_turn(messages)
    assert turn is not None, "a tool result answers an assistant turn"
    order: dict[str | None, int] = {}
    for i, call in enumerate(messages[turn].tool_calls):
        order.setdefault(call.id, i)
    mine, at = order.get(answer.tool_call_id, len(order)), len(messages)
    while at > turn + 1 and order.get(messages[at - 1].tool_call_id, -1) > mine:
        at -= 1
    messages.insert(at, answer)
    at = len(records)
    while at > 0 and records[at - 1].call > record.call:
        at -= 1
    records.insert(at, record)


async def reconciled(
    registry: ToolRegistry,
    earlier: Collection[InFlightCall],
    now: InFlightCall,
    arguments: dict[str, Any],
    context: ToolContext,
) -> Any:
    """What the tool's check found of `now`'s effect when an earlier attempt had that very call in
    flight (one of `earlier`) and left no result; None when there is nothing to look for (no such
    call, another call at that position, a tool without a check) or the check found no effect.

    A check that fails raises: the attempt fails and the next one checks again, as for a tool step
    (calling the tool instead could repeat its effect, and telling the model would let it call
    again at a new position, under a new key)."""
    if now not in earlier or now.tool not in registry or registry.get(now.tool).reconcile is None:
        return None
    try:
        return await registry.reconcile(now.tool, arguments, context)
    except ToolArgumentsError:
        return None  # arguments the tool refuses never reached it: the call fails again, as it did
