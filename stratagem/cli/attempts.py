"""Telling a person following a run that a step's attempt was lost, when its retry starts.

A worker killed in the middle of a step (kill -9, a crash, a lost machine) says nothing: Temporal
notices only when the attempt's heartbeat (or start-to-close) timeout passes, and then schedules
the next attempt. The run's ledger cannot say so (the workflow sees the activity only when it
ends), so the command that follows the run asks Temporal for the run's pending activities now and
then, and names the step whose attempt was lost and why, once per attempt.
"""

from __future__ import annotations

import asyncio
import json
import time

from temporalio.client import WorkflowHandle

from stratagem.cli import render

# How often the following command asks (one DescribeWorkflowExecution: cheap, but not every 0.3 s).
EVERY_SECONDS = 2.0


class LostAttempts:
    """Remembers which retries it reported, so each is said once."""

    def __init__(self, handle: WorkflowHandle) -> None:
        self.handle = handle
        self._said: set[tuple[str, int]] = set()
        self._steps: dict[str, str] = {}  # activity id -> "step: title", from the history
        self._next = 0.0

    async def report(self, *, json_mode: bool) -> None:
        """Print each lost attempt as its retry starts, until cancelled (by the end of following)."""
        while True:
            for line in await self.news():
                render.note(line, json_mode=json_mode)
            await asyncio.sleep(EVERY_SECONDS)

    async def news(self) -> list[str]:
        """A line for each step attempt lost since the last call (at most every EVERY_SECONDS)."""
        if time.monotonic() < self._next:
            return []
        self._next = time.monotonic() + EVERY_SECONDS
        try:
            description = await self.handle.describe()
        except Exception:  # a lost connection is reported by the caller's own requests
            return []
        lines = []
        for pending in description.raw_description.pending_activities:
            key = (pending.activity_id, pending.attempt)
            if pending.attempt < 2 or not pending.HasField("last_failure") or key in self._said:
                continue
            self._said.add(key)
            step = await self._step(pending.activity_id)
            why = pending.last_failure.message or "its worker stopped answering"
            worker = f" on {pending.last_worker_identity}" if pending.last_worker_identity else ""
            lines.append(
                f"attempt {pending.attempt - 1} of {step} was lost{worker} ({why}); attempt {pending.attempt} "
                "starts when a worker takes it"
            )
        return lines

    async def _step(self, activity_id: str) -> str:
        """The step an activity runs, from the summary its scheduling event carries."""
        if activity_id not in self._steps:
            async for event in self.handle.fetch_history_events():
                if event.HasField("activity_task_scheduled_event_attributes"):
                    scheduled = event.activity_task_scheduled_event_attributes
                    self._steps[scheduled.activity_id] = _summary(event) or scheduled.activity_type.name
        return f"step {self._steps.get(activity_id, 'activity ' + activity_id)}"


def _summary(event: object) -> str:
    metadata = getattr(event, "user_metadata", None)
    if metadata is None or not metadata.HasField("summary"):
        return ""
    try:
        value = json.loads(metadata.summary.data)
    except ValueError:
        return ""
    return value if isinstance(value, str) else ""
