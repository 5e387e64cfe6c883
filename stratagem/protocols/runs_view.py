"""A run as another agent sees it: a task's state, what waits for a person, and the result.

Pure functions of the run's status (stratagem.domain.run_reports). The A2A server maps the state
onto A2A's task states one to one; the MCP server returns it as it is. What waits is said with
the exact, resolved arguments a person would approve (the pending decision's preview or call),
never a `${...}` reference. Run text (plans, prompts, model output) appears only here, inside
results, never in a card, a skill or a tool's description.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from stratagem.domain.run_reports import RunResult, RunStatus
from stratagem.domain.run_state import Phase

ENDED_WITHOUT_GOAL = (Phase.failed, Phase.compensated, Phase.compensation_failed)


class TaskState(str, Enum):
    """A2A's task states (the wire names of its 0.3 protocol; 1.0 spells them TASK_STATE_*)."""

    submitted = "submitted"
    working = "working"
    input_required = "input-required"
    completed = "completed"
    failed = "failed"
    canceled = "canceled"
    rejected = "rejected"

    @property
    def final(self) -> bool:
        return self in (TaskState.completed, TaskState.failed, TaskState.canceled, TaskState.rejected)


def task_state(status: RunStatus) -> TaskState:
    """The state of the task that is this run.

    A run that waits for a person is input-required, whatever its phase; one planning its first
    revision is submitted; a rejected plan ends it rejected; failed, compensated (the goal given
    up, effects undone) and compensation_failed are failed, with the reason."""
    phase = status.phase
    if phase is Phase.succeeded:
        return TaskState.completed
    if phase is Phase.cancelled:
        return TaskState.canceled
    if phase is Phase.rejected:
        return TaskState.rejected
    if phase in ENDED_WITHOUT_GOAL:
        return TaskState.failed
    if status.pending:
        return TaskState.input_required
    if phase is Phase.planning and status.revision is None:
        return TaskState.submitted
    return TaskState.working


def waits(status: RunStatus) -> list[dict[str, Any]]:
    """What the run waits for, one entry per pending decision: its kind, the revision and step
    it is about, the question, and for a gated step or tool call what exactly would run."""
    out: list[dict[str, Any]] = []
    for pending in status.pending:
        entry: dict[str, Any] = {"kind": pending.kind.value, "revision": pending.revision}
        if pending.step_id:
            entry["step_id"] = pending.step_id
        if pending.prompt:
            entry["prompt"] = pending.prompt
        if pending.call is not None:
            entry["call"] = {
                "call_id": pending.call.call_id,
                "tool": pending.call.tool,
                "arguments": pending.call.arguments,
                "digest": pending.call.digest,
            }
        if pending.preview is not None:
            entry["preview"] = pending.preview.model_dump(mode="json")
        if pending.quorum:
            entry["quorum"] = pending.quorum
        out.append(entry)
    return out


def summary(status: RunStatus) -> dict[str, Any]:
    """The run at a glance: id, goal, phase, task state, revision, step counts, reason, waits."""
    return {
        "run_id": status.run_id,
        "goal": status.goal,
        "phase": status.phase.value,
        "state": task_state(status).value,
        "revision": status.revision,
        "steps": status.steps.model_dump(mode="json"),
        "reason": status.reason,
        "waiting": waits(status),
        "process": status.process.model_dump(mode="json") if status.process else None,
    }


def outcome(result: RunResult) -> dict[str, Any]:
    """A finished run's result: what the A2A artifact and the MCP tool return."""
    return {
        "run_id": result.run_id,
        "status": result.status.value,
        "outputs": result.outputs,
        "synthesis": result.synthesis,
        "reason": result.reason,
    }
