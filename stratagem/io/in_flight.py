"""A tool call an llm step's executor started and had not answered when its attempt died.

Every save of the executor's progress names the tool call that runs next (`InFlightCall`: the
call's position, the tool, a digest of the arguments), so a call is recorded before it starts,
in the save that precedes it (after the model call that asked for it, or after the call before
it), at no extra write. An attempt that resumes with a call named and unanswered may be looking
at an effect that happened without a result: the worker died after the tool acted and before its
answer was saved (or before the call started: the check then finds nothing). When the model
asks, at that same position, for the same tool with the same arguments (a resumed conversation
asks exactly that), and the tool declares `reconcile=`, the check runs first with the same
arguments and context (the same idempotency key, `.../c<position>`): an answer becomes the tool's
result and the tool is not called again. A tool without a check is called again, with the same key.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import BaseModel, Field

from stratagem.common.errors import ToolArgumentsError
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


def arguments_digest(arguments: dict[str, Any]) -> str:
    """The digest of a call's arguments, the same for equal arguments however they were ordered."""
    exact = json.dumps(arguments, ensure_ascii=False, default=str, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(exact.encode()).hexdigest()


def owed(messages: list[Message]) -> list[ToolCall]:
    """The tool calls of the conversation's last assistant turn that have no result yet."""
    turn = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].role == "assistant"), None)
    if turn is None:
        return []
    answered = {m.tool_call_id for m in messages[turn + 1 :] if m.role == "tool"}
    return [call for call in messages[turn].tool_calls if call.id not in answered]


def upcoming(messages: list[Message], position: int) -> InFlightCall | None:
    """The tool call that runs next, at `position`, if the conversation owes one."""
    calls = owed(messages)
    if not calls:
        return None
    arguments = calls[0].arguments
    return InFlightCall(
        call=position, tool=calls[0].name, digest=arguments_digest(arguments) if arguments is not None else ""
    )


async def reconciled(
    registry: ToolRegistry,
    earlier: InFlightCall | None,
    now: InFlightCall,
    arguments: dict[str, Any],
    context: ToolContext,
) -> Any:
    """What the tool's check found of `now`'s effect when an earlier attempt started that very
    call (`earlier`) and left no result; None when there is nothing to look for (no call in flight,
    another call at that position, a tool without a check) or the check found no effect.

    A check that fails raises: the attempt fails and the next one checks again, as for a tool step
    (calling the tool instead could repeat its effect, and telling the model would let it call
    again at a new position, under a new key)."""
    if earlier != now or now.tool not in registry or registry.get(now.tool).reconcile is None:
        return None
    try:
        return await registry.reconcile(now.tool, arguments, context)
    except ToolArgumentsError:
        return None  # arguments the tool refuses never reached it: the call fails again, as it did
