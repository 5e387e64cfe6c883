"""A run read as an A2A task, from Temporal, every time (stratagem.protocols.a2a_server).

The task id is the run id, so there is nothing to remember: a restarted server reads the same
tasks. The context id a client chose when it started the run, and the person who started it, are in
the run's memo (MEMO_KEY).
The state is runs_view.task_state of the run's status; a task waiting for a person says what is
asked (runs_view.waits) as a data part of its status message; a completed task carries the
result (runs_view.outcome) as its artifact; an ended one says why in its status message. A closed
run is read from its history (its result) rather than queried, so it reads without a worker.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from a2a.helpers import new_data_part, new_message, new_text_part
from a2a.types import (
    Artifact,
    Message,
    Part,
    Task,
    TaskArtifactUpdateEvent,
    TaskNotFoundError,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a.types import TaskState as Wire
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.service import RPCError, RPCStatusCode

from stratagem.client import RunHandle, get_run
from stratagem.domain.ledger import LedgerEvent
from stratagem.domain.run_reports import RunResult, RunStatus, StepCounts
from stratagem.domain.run_state import Phase
from stratagem.domain.run_types import WORKFLOW_NAME
from stratagem.protocols.a2a_card import struct
from stratagem.protocols.runs_view import TaskState, outcome, task_state, waits

MEMO_KEY = "a2a"
BEYOND = 2**53  # a seq no run reaches: asking for the events after it reads only the last seq
WIRE = {
    TaskState.submitted: Wire.TASK_STATE_SUBMITTED,
    TaskState.working: Wire.TASK_STATE_WORKING,
    TaskState.input_required: Wire.TASK_STATE_INPUT_REQUIRED,
    TaskState.completed: Wire.TASK_STATE_COMPLETED,
    TaskState.failed: Wire.TASK_STATE_FAILED,
    TaskState.canceled: Wire.TASK_STATE_CANCELED,
    TaskState.rejected: Wire.TASK_STATE_REJECTED,
}
FINAL = frozenset(WIRE[s] for s in TaskState if s.final)
UNSETTLED = frozenset({Wire.TASK_STATE_SUBMITTED, Wire.TASK_STATE_WORKING})
# What a closed run's workflow ended as, where its result cannot say (it has none).
CLOSED = {
    WorkflowExecutionStatus.CANCELED: (Phase.cancelled, "cancelled"),
    WorkflowExecutionStatus.TERMINATED: (Phase.failed, "the run was terminated"),
    WorkflowExecutionStatus.TIMED_OUT: (Phase.failed, "the run timed out"),
    WorkflowExecutionStatus.FAILED: (Phase.failed, "the run's workflow failed"),
}


def plain(value: Any) -> Any:
    """A data part's value with whole numbers as ints: protobuf's Value keeps every number as a
    double, so an input of 2 arrives as 2.0."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain(item) for item in value]
    return value


def agent_message(parts: list[Part], run_id: str, context_id: str) -> Message:
    return new_message(parts, context_id=context_id, task_id=run_id)


@dataclass
class RunTask:
    """One run as a task: its handle, its context id, whether it is still running, and who
    started it over A2A (None: it was started some other way)."""

    run: RunHandle
    context_id: str
    running: bool
    started_by: str | None = None

    @property
    def id(self) -> str:
        return self.run.id

    async def status(self) -> RunStatus:
        if self.running:
            return await self.run.status()
        return await self._ended()

    async def _ended(self) -> RunStatus:
        """A closed run's status, from its history: no worker need answer."""
        description = await self.run.handle.describe()
        if description.status in (None, WorkflowExecutionStatus.RUNNING):  # ended its phase, not yet closed
            self.running = True
            return await self.run.status()
        phase, reason = CLOSED.get(description.status or WorkflowExecutionStatus.FAILED, (Phase.failed, None))
        revision = None
        if description.status is WorkflowExecutionStatus.COMPLETED:
            result = await self.result()
            phase, reason, revision = result.status, result.reason, result.revision
        return RunStatus(
            run_id=self.id,
            goal="",
            phase=phase,
            revision=revision,
            approved_revision=revision,
            steps=StepCounts(),
            pending=[],
            replans=0,
            max_replans=0,
            reason=reason,
        )

    async def result(self) -> RunResult:
        try:
            return await self.run.result()
        except WorkflowFailureError:  # cancelled or terminated: it has no result
            status = await self.status()
            return RunResult(run_id=self.id, status=status.phase, revision=status.revision, reason=status.reason)

    def status_of(self, status: RunStatus, *, text: str = "", timestamp: Any = None, final: bool = True) -> TaskStatus:
        """The task status of `status`: its state, and a message saying what waits (a data part,
        with the exact arguments) or why it ended; `text` first where given (a ledger event's).
        `final=False`: a run that has ended reads as working, because the update that says it
        ended comes last, after the result (a 0.3 client stops reading at a final state)."""
        state = task_state(status)
        if state.final and not final:
            state = TaskState.working
        parts: list[Part] = [new_text_part(text)] if text else []
        if state is TaskState.input_required:
            asked = waits(status)
            if not text:
                parts.append(new_text_part(f"waiting for a person: {', '.join(w['kind'] for w in asked)}"))
            parts.append(new_data_part({"waiting": asked}))
        elif state.final and state is not TaskState.completed and not text:
            parts.append(new_text_part(status.reason or state.value))
        message = agent_message(parts, self.id, self.context_id) if parts else None
        return TaskStatus(state=WIRE[state], message=message, timestamp=timestamp)

    def submitted(self) -> Task:
        """The task of a run just started, before it has done anything."""
        return Task(id=self.id, context_id=self.context_id, status=TaskStatus(state=Wire.TASK_STATE_SUBMITTED))

    async def artifact(self) -> Artifact:
        result = await self.result()
        return Artifact(artifact_id=f"{self.id}-result", name="result", parts=[new_data_part(outcome(result))])

    async def task(self) -> Task:
        status = await self.status()
        if self.running and status.phase.finished:
            self.running = False  # ended as it was read: its result is in its history now
        task = Task(
            id=self.id,
            context_id=self.context_id,
            status=self.status_of(status),
            metadata=struct({"phase": status.phase.value, "revision": status.revision}),
        )
        if status.phase is Phase.succeeded:
            task.artifacts.append(await self.artifact())
        return task

    async def last_seq(self) -> int:
        """The seq of the run's last event so far (where following it begins)."""
        return (await self.run.events(after=BEYOND, limit=1)).last_seq  # no event, no archive read

    def update(self, status: TaskStatus, metadata: dict[str, Any] | None = None) -> TaskStatusUpdateEvent:
        return TaskStatusUpdateEvent(
            task_id=self.id,
            context_id=self.context_id,
            status=status,
            metadata=struct(metadata) if metadata else None,
        )

    async def follow(self, after: int) -> AsyncIterator[TaskStatusUpdateEvent | TaskArtifactUpdateEvent]:
        """Each ledger event after seq `after` as a status update (the state then, the event's
        text, its kind and step in the metadata), through any wait for a person, until the run
        ends: then the result as an artifact, and the final status."""
        async for event in self.run.stream(after=after):
            status = await self.run.status()
            forwarded = self.status_of(status, text=event.message, timestamp=event.at, final=False)
            yield self.update(forwarded, event_metadata(event))
        task = await self.task()
        for artifact in task.artifacts:
            yield TaskArtifactUpdateEvent(
                task_id=self.id, context_id=self.context_id, artifact=artifact, last_chunk=True
            )
        yield self.update(task.status, {"final": True})


def event_metadata(event: LedgerEvent) -> dict[str, Any]:
    found: dict[str, Any] = {"seq": event.seq, "kind": event.kind.value}
    if event.step_id:
        found["step_id"] = event.step_id
    if event.revision is not None:
        found["revision"] = event.revision
    if event.actor:
        found["actor"] = event.actor
    return found


async def find(client: Client, run_id: str, *, rpc_timeout: timedelta) -> RunTask:
    """The run that is task `run_id`. TaskNotFoundError: no such run, or not a Stratagem run."""
    run = get_run(client, run_id, rpc_timeout=rpc_timeout)
    try:
        description = await run.handle.describe(rpc_timeout=rpc_timeout)
    except RPCError as exc:
        if exc.status in (RPCStatusCode.NOT_FOUND, RPCStatusCode.INVALID_ARGUMENT):
            raise TaskNotFoundError(message=f"there is no task {run_id[:100]!r}") from None
        raise
    if description.workflow_type != WORKFLOW_NAME:
        raise TaskNotFoundError(message=f"there is no task {run_id[:100]!r}")
    memo = await description.memo()
    kept = memo.get(MEMO_KEY)
    kept = kept if isinstance(kept, dict) else {}
    running = description.status in (None, WorkflowExecutionStatus.RUNNING)
    started_by = kept.get("started_by")
    return RunTask(
        run=run,
        context_id=str(kept.get("context_id") or run_id),
        running=running,
        started_by=started_by if isinstance(started_by, str) else None,
    )
