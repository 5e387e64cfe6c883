"""Worker roles and their task queues.

A run's work goes to four task queues derived from the task queue its workflow runs on, so each
kind of work scales, and is rate-limited, on its own:

| role | task queue | what it runs |
|---|---|---|
| `workflow` | `<queue>` | the run workflows, and `@tool(local=True)` tools as local activities |
| `planner` | `<queue>-planner` | planner and synthesis model calls |
| `executor` | `<queue>-executor` | llm steps: executor model calls and the tools they call |
| `tools` | `<queue>-tools` | tool steps, and the tool catalogue |

`stratagem worker` serves all four by default; `--role` picks some. Pure: the workflow imports it.

Where a run's activities really go depends on the worker running its workflow (the *layout*): a
worker that serves every role keeps them on the workflow's own queue (`QueueLayout.shared`), where
Temporal hands each one straight back to the worker that scheduled it (eager dispatch); a worker
serving only some roles sends each to its role's queue (`QueueLayout.split`), where the workers of
that role pick it up. The workflow names the role queue; `stratagem.temporal.interceptors.SharedQueues` folds it
back into the workflow's queue on shared workers.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum


class Role(str, Enum):
    workflow = "workflow"
    planner = "planner"
    executor = "executor"
    tools = "tools"


ALL_ROLES: tuple[Role, ...] = tuple(Role)


class QueueLayout(str, Enum):
    shared = "shared"
    """Every activity on the workflow's queue: one worker does everything, with no extra hop."""
    split = "split"  # type: ignore[assignment]  # shadows str.split, which nothing calls on a layout
    """Each role's activities on its own queue: roles scale and are rate-limited apart."""


def default_layout(roles: Iterable[Role]) -> QueueLayout:
    """Shared when one worker serves every role, split otherwise."""
    return QueueLayout.shared if set(roles) >= set(ALL_ROLES) else QueueLayout.split


def role_queue(base: str, role: Role) -> str:
    """The task queue of `role` for runs whose workflow runs on `base`."""
    return base if role is Role.workflow else f"{base}-{role.value}"


def is_role_queue(base: str, queue: str) -> bool:
    """Whether `queue` is one of the role queues of runs whose workflow runs on `base`."""
    return any(queue == role_queue(base, role) for role in ALL_ROLES)
