"""What an attempt hands on to the next one: progress sent with every heartbeat.

Temporal keeps an activity's last heartbeat details and gives them to the next attempt, so
work an attempt finished (model calls paid for, tool calls made) survives its failure, a
retry and a worker crash, as far as the last heartbeat that reached the server.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from datetime import UTC, datetime
from typing import Any, TypeVar

from temporalio import activity

T = TypeVar("T")

# Heartbeat details travel in Temporal's history; larger progress is sent without the bulky part.
MAX_CHECKPOINT_BYTES = 128 * 1024
# Leave this much of an attempt's time to the work around a model request.
REQUEST_MARGIN_SECONDS = 5.0


class Checkpoint:
    def __init__(self, every: float = 5.0):
        self.every = every
        # Heartbeats replace the stored details: until this attempt saves its own progress,
        # keep sending what the earlier attempt left, or a second retry would find nothing.
        self.details: Any = self.previous()

    @staticmethod
    def previous() -> Any:
        """The last progress an earlier attempt sent, or None."""
        details = activity.info().heartbeat_details
        return details[0] if details else None

    def save(self, details: Any) -> None:
        self.details = details
        activity.heartbeat(details)

    async def run(self, work: Awaitable[T]) -> T:
        """Await `work`, heartbeating meanwhile (with the latest progress), so a dead worker is
        noticed within the heartbeat timeout and cancellation reaches the work.

        The heartbeats come from a timer rather than a watching task: most tools finish long
        before the first one is due, and a task plus a wait per attempt was a tenth of what the
        activity wrapper cost a no-op tool step."""
        beats = _Heartbeats(self)
        try:
            return await work
        finally:
            beats.stop()


class _Heartbeats:
    """A checkpoint's heartbeats, every `every` seconds until stopped.

    Not a closure that re-arms itself: such a function refers to itself through its closure, a
    cycle that only the garbage collector frees, and its timer's context held the attempt's
    activity context and everything in it until then (a thousand objects a ten-step run, most
    of what the collector had to find). Stopped, nothing here refers back to this object."""

    __slots__ = ("checkpoint", "loop", "handle")

    def __init__(self, checkpoint: Checkpoint):
        self.checkpoint = checkpoint
        self.loop = asyncio.get_running_loop()
        self.handle = self.loop.call_later(checkpoint.every, self.beat)

    def beat(self) -> None:
        details = self.checkpoint.details
        if details is None:
            activity.heartbeat()
        else:
            activity.heartbeat(details)
        self.handle = self.loop.call_later(self.checkpoint.every, self.beat)

    def stop(self) -> None:
        self.handle.cancel()  # drops its callback, the one reference back here


def request_timeout(default: float) -> float:
    """A model request's time limit: `default`, or less, so it ends before the attempt does."""
    info = activity.info()
    if not info.start_to_close_timeout:
        return default
    deadline = info.started_time + info.start_to_close_timeout
    remaining = (deadline - datetime.now(UTC)).total_seconds() - REQUEST_MARGIN_SECONDS
    return max(1.0, min(default, remaining))
