"""Everything that touches the world: model calls and tool calls, each a retryable activity."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from stratagem.store import OutputStore
from stratagem.tools import ToolRegistry

from .execution import ExecutionActivities
from .planning import PlanningActivities


def build_activities(registry: ToolRegistry, workspace: Path, store: OutputStore | None = None) -> list[Callable[..., Any]]:
    planning = PlanningActivities(registry, store)
    execution = ExecutionActivities(registry, workspace, store)
    return [planning.describe_tools, planning.plan, planning.synthesize, execution.run_tool, execution.run_llm]


__all__ = ["ExecutionActivities", "PlanningActivities", "build_activities"]
