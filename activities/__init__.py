"""Everything that touches the world: model calls and tool calls, each a retryable activity."""

from __future__ import annotations

from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from stratagem.domain.roles import ALL_ROLES, Role
from stratagem.io.store import OutputStore
from stratagem.tools import ToolRegistry

from .archive import ArchiveActivities
from .execution import ExecutionActivities
from .forks import ForkActivities
from .notify import NotifyActivities
from .planning import PlanningActivities, describe_tools_here
from .processes import prepare_process


def activities_by_role(
    registry: ToolRegistry, workspace: Path, store: OutputStore | None = None, roles: Collection[Role] = ALL_ROLES
) -> dict[Role, list[Callable[..., Any]]]:
    """Each role's activities (stratagem/domain/roles.py). The workflow role has them all: local tools
    run as local activities in its process, and activities scheduled on the workflow's own queue
    by a run that started before the queues were split still find a worker there. It reads the
    tool catalogue locally only when `roles`, what this process serves, include the tools."""
    planning = PlanningActivities(registry, store)
    execution = ExecutionActivities(registry, workspace, store)
    archive = ArchiveActivities(store)
    notify = NotifyActivities(store)
    forks = ForkActivities()
    return {
        # The workflow role keeps the run's own bookkeeping (archiving its events).
        Role.workflow: [
            planning.describe_tools,
            planning.plan,
            planning.synthesize,
            planning.check_goal,
            execution.run_tool,
            execution.run_llm,
            archive.archive_events,
            notify.notify,
            forks.read_fork,
            prepare_process,
            describe_tools_here(registry if Role.tools in roles else None),
        ],
        Role.planner: [planning.plan, planning.synthesize, planning.check_goal],
        Role.executor: [execution.run_llm],
        Role.tools: [execution.run_tool, planning.describe_tools],
    }


__all__ = [
    "ArchiveActivities",
    "ExecutionActivities",
    "ForkActivities",
    "NotifyActivities",
    "PlanningActivities",
    "activities_by_role",
    "describe_tools_here",
]
