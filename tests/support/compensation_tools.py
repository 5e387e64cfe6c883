"""Tools with effects and their undos, for the compensation tests (tests/test_compensation.py).
Each call leaves a line in the workspace's calls.jsonl, with its start and end, so a test proves
which effects happened and in which order they were undone."""

from __future__ import annotations

import asyncio
import json
import time

from stratagem.common.errors import ToolError
from stratagem.tools import ToolContext, tool


def _log(ctx: ToolContext, record: dict) -> None:
    ctx.workspace.mkdir(parents=True, exist_ok=True)
    with (ctx.workspace / "calls.jsonl").open("a") as f:
        f.write(json.dumps({**record, "step": ctx.step_id, "attempt": ctx.attempt}) + "\n")


def _tried(ctx: ToolContext, tool_name: str) -> int:
    """How often this step called `tool_name` before (over every attempt and repair)."""
    log = ctx.workspace / "calls.jsonl"
    lines = log.read_text().splitlines() if log.exists() else []
    return sum(1 for line in lines if json.loads(line)["tool"] == tool_name and json.loads(line)["step"] == ctx.step_id)


@tool
async def unbook(slot: str, seconds: float, original_output: dict, ctx: ToolContext) -> str:
    """Cancel a booking. A slot named stuck-* never cancels; shaky-* fails the first time."""
    start = time.time()
    await asyncio.sleep(seconds)
    tried = _tried(ctx, "unbook")
    _log(
        ctx, {"tool": "unbook", "slot": slot, "booking": original_output["booking"], "start": start, "end": time.time()}
    )
    if slot.startswith("stuck") or (slot.startswith("shaky") and tried == 0):
        raise ToolError(f"the booking system refused to cancel {original_output['booking']}", retryable=False)
    return f"cancelled {original_output['booking']}"


@tool(compensate=unbook)
async def book(slot: str, seconds: float, ctx: ToolContext) -> dict:
    """Book a slot (an effect, undone by unbook)."""
    start = time.time()
    await asyncio.sleep(seconds)
    _log(ctx, {"tool": "book", "slot": slot, "start": start, "end": time.time()})
    return {"booking": f"B-{slot}"}


@tool
def place_order(item: str, ctx: ToolContext) -> dict:
    """Place an order: an effect with no declared undo (a plan names one: cancel_order)."""
    _log(ctx, {"tool": "place_order", "item": item})
    return {"id": f"O-{item}", "item": item}


@tool
def cancel_order(order: str, ctx: ToolContext, note: str = "") -> str:
    """Cancel an order by its id."""
    _log(ctx, {"tool": "cancel_order", "order": order, "note": note})
    return f"cancelled {order}"


@tool
def send_email(to: str, ctx: ToolContext) -> str:
    """Send an email: an effect nothing undoes."""
    _log(ctx, {"tool": "send_email", "to": to})
    return f"sent to {to}"


@tool(side_effects=False)
def look_up(slot: str) -> str:
    """Read-only: nothing to undo."""
    return f"slot {slot} is free"


@tool
def fail(reason: str, ctx: ToolContext) -> str:
    """Always fails, for good."""
    _log(ctx, {"tool": "fail", "reason": reason})
    raise ToolError(reason, retryable=False)
