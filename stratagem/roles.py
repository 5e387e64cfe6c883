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
"""

from __future__ import annotations

from enum import Enum


class Role(str, Enum):
    workflow = "workflow"
    planner = "planner"
    executor = "executor"
    tools = "tools"


ALL_ROLES: tuple[Role, ...] = tuple(Role)


def role_queue(base: str, role: Role) -> str:
    """The task queue of `role` for runs whose workflow runs on `base`."""
    return base if role is Role.workflow else f"{base}-{role.value}"
