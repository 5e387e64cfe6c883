"""Plans shared by the workflow tests."""

from __future__ import annotations

from typing import Any


def awaiting(status: Any) -> bool:
    """A run status at the review gate."""
    return status.phase.value == "awaiting_approval"


def step(id: str, tool: str, depends_on: list[str] | None = None, **args: Any) -> dict[str, Any]:
    return {"id": id, "title": id.replace("_", " "), "tool": tool, "args": args, "depends_on": depends_on or []}


GREETING = {
    "goal": "greet a new customer",
    "steps": [
        step("fetch_profile", "fetch_profile", user="ada"),
        step("greet", "greet", ["fetch_profile"], name="${fetch_profile.name}"),
        step("note", "record", ["greet"], label="sent: ${greet} to ${fetch_profile.email}"),
    ],
}

SIDE_EFFECT = {
    "goal": "write something",
    "steps": [step("first", "record", label="one"), step("second", "record", ["first"], label="two")],
}


def diamond(seconds: float) -> dict[str, Any]:
    return {
        "goal": "diamond",
        "steps": [
            step("start", "record", label="start"),
            step("left", "slow", ["start"], label="left", seconds=seconds),
            step("right", "slow", ["start"], label="right", seconds=seconds),
            step("join", "record", ["left", "right"], label="${left.label}+${right.label}"),
        ],
    }
