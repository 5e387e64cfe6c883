"""Where an llm step's attempt goes on from, and where its progress is kept meanwhile.

The executor's progress (its conversation, model calls and tool calls: stratagem.io.executor) is
written to the output store at every save (after each model call, before and after each tool
call), into one slot per step that each write replaces, `runs/<run>/<step>/checkpoint.json`. The
heartbeat details carry a reference to the slot and the counts the workflow reads when an attempt
times out (`calls`, `tool_calls`: workflows/failures.py), not the conversation. The next attempt,
on any worker sharing the store, reads the slot, so it goes on from the last save, however large
the conversation, and however old the details the server holds: the SDK sends heartbeats at most
every 0.8 x the heartbeat timeout, but the slot is written before each of them, so it is never
older than they are. Each attempt saves as soon as it starts, and its first heartbeat is sent at
once: the reference reaches the server before any work the slot could lose.

The slot names the dispatch that wrote it (the workflow run and activity id), and an attempt goes
on only from its own dispatch's: a later dispatch of the step (the next revision, a stronger
model, the dispatch after a pause) writes the same slot. Temporal never runs two attempts of one
activity at once (a worker cut off from the server by a partition is the exception: RELIABILITY.md).

Details in the earlier formats stay readable: the whole progress (what workers before #42 sent),
or the progress without its conversation (then too large: the conversation starts again, still
counting the calls made). A store without `replace` (a `python:` store that has only put and get)
keeps the earlier way, with the conversation written to the store, content-addressed, when it is
too large for the details.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError
from pydantic_core import to_json
from temporalio import activity

from stratagem.domain import activity_io
from stratagem.io.executor import ExecutorProgress
from stratagem.io.store import OutputStore, StoreError, hydrate, is_stored, load_value, store_value

from .checkpoint import MAX_CHECKPOINT_BYTES

CHECKPOINT = "checkpoint"
"""The key of the heartbeat details that refers to the stored progress."""


class ProgressSlot:
    """One dispatch's progress in the store: written by `details`, read back by `resume`."""

    def __init__(self, store: OutputStore, key: str):
        info = activity.info()
        self.store = store
        self.key = key
        self.slot = f"{key}/checkpoint.json"
        self.dispatch = f"{info.workflow_run_id}/{info.activity_id}"
        self.attempt = info.attempt

    def details(self, progress: ExecutorProgress) -> dict[str, Any]:
        """Store `progress` and return the heartbeat details that refer to it."""
        counts = progress.model_dump(mode="json", exclude={"messages"})
        replace = getattr(self.store, "replace", None)
        try:
            if replace is not None:
                data = b'{"dispatch":%s,"progress":%s}' % (json.dumps(self.dispatch).encode(), to_json(progress))
                ref = replace(self.slot, data)
                counts[CHECKPOINT] = {"slot": ref, "dispatch": self.dispatch, "bytes": len(data)}
                return counts
            whole = progress.model_dump(mode="json")
            if len(json.dumps(whole)) <= MAX_CHECKPOINT_BYTES:
                return whole
            counts[CHECKPOINT] = store_value(self.store, f"{self.key}/checkpoints", whole)
            return counts
        except (StoreError, OSError) as exc:
            # The next attempt then goes on from the counts: it asks the model again and makes its
            # calls again, at new positions, as when the conversation was too large for the details.
            activity.logger.warning("cannot store the step's progress (%s); checkpointing only its counts", exc)
            return counts

    def resume(self, previous: Any, request: activity_io.LlmStepInput) -> ExecutorProgress:
        """Where the executor starts: the earlier attempt's checkpoint, else the progress of the
        dispatch that paused (`request.resume`), else nothing.

        A checkpoint without its conversation still has the counts; with a paused conversation to
        go on from, the attempt goes on from that one (the calls made since it are repeated, at
        new positions) rather than from nothing."""
        checkpointed = self.checkpointed(previous)
        if request.resume is None:
            return checkpointed or ExecutorProgress()
        if checkpointed is not None and checkpointed.messages:
            return checkpointed
        paused = _paused(self.store, request.resume, request.step.id)
        if checkpointed is None:
            return paused
        checkpointed.messages = paused.messages
        return checkpointed

    def checkpointed(self, previous: Any) -> ExecutorProgress | None:
        """The earlier attempt's progress, from the store when the details refer to it; None if
        there is none."""
        counts = _readable(previous)
        if counts is None or not isinstance(previous, dict):
            return counts
        ref = previous.get(CHECKPOINT)
        try:
            if isinstance(ref, dict) and isinstance(ref.get("slot"), str):
                stored = self._slot(ref["slot"])
            elif is_stored(ref):
                stored = ExecutorProgress.model_validate(load_value(self.store, ref))
            else:
                return counts  # the whole progress, or its counts alone (the earlier formats)
        except Exception as exc:  # whatever the store raises: going on from the counts is what is left
            activity.logger.warning("cannot read the stored progress (%s); going on from its counts", exc)
            return counts
        if stored is None or len(stored.calls) < len(counts.calls) or len(stored.tool_calls) < len(counts.tool_calls):
            # Another dispatch's, or older than the details (neither happens unless something else wrote the slot).
            activity.logger.warning("the stored progress is not this step attempt's; going on from its counts")
            return counts
        return stored

    def _slot(self, ref: str) -> ExecutorProgress | None:
        kept = json.loads(self.store.get(ref))
        if not isinstance(kept, dict) or kept.get("dispatch") != self.dispatch:
            return None
        return ExecutorProgress.model_validate(kept.get("progress"))


def _readable(previous: Any) -> ExecutorProgress | None:
    """The counts (or, in the earliest format, the whole progress) the details carry, or None."""
    if previous is None:
        return None
    try:
        return ExecutorProgress.model_validate(previous)
    except ValidationError:
        activity.logger.warning("ignoring an unreadable checkpoint from the previous attempt")
        return None


def _paused(store: OutputStore, resume: dict[str, Any], step_id: str) -> ExecutorProgress:
    """The progress a paused dispatch stored, everything in it counted as reported already.
    Unreadable, the step cannot go on (another attempt would read the same), so the error is final."""
    why = f"step '{step_id}' cannot go on from its paused conversation"
    try:
        return ExecutorProgress.model_validate(hydrate(store, resume)).resumed()
    except StoreError as exc:
        raise StoreError(f"{why}: {exc}") from None
    except ValidationError as exc:
        raise StoreError(
            f"{why}: the stored progress is not an executor's "
            f"({exc.error_count()} problems, the first: {exc.errors()[0]['msg']})"
        ) from None
