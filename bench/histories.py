"""Where a run's wall time went, read from its history's event timestamps (the server's clock):
workflow tasks, waits for a poller, activities, and the bytes of their payloads."""

from __future__ import annotations

from typing import Any

from temporalio.api.enums.v1 import EventType


def _seconds(event: Any) -> float:
    return event.event_time.ToNanoseconds() / 1e9


def history_breakdown(history: Any) -> dict[str, Any]:
    """Where the wall time of one execution went, from its event timestamps (server clock).

    - `workflow_task_s`: workflow tasks, started to completed: the worker running workflow code,
      converting payloads, and the round trip back to the server.
    - `workflow_task_wait_s`: workflow tasks, scheduled to started: waiting for a worker to poll.
    - `activity_wait_s`: activities, scheduled to started.
    - `activity_run_s`: activities, started to closed: the tool itself plus the activity wrapper.
    - `local_activity_markers`: local activities recorded (markers).
    """
    totals = {
        "events": len(history.events),
        "workflow_tasks": 0,
        "workflow_task_s": 0.0,
        "workflow_task_wait_s": 0.0,
        "activities": 0,
        "activity_wait_s": 0.0,
        "activity_run_s": 0.0,
        "local_activity_markers": 0,
        "activity_input_bytes": 0,
        "activity_result_bytes": 0,
    }
    wft_scheduled: float | None = None
    wft_started: float | None = None
    scheduled: dict[int, float] = {}
    started: dict[int, float] = {}
    for event in history.events:
        kind = event.event_type
        t = _seconds(event)
        if kind == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
            wft_scheduled = t
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
            wft_started = t
            if wft_scheduled is not None:
                totals["workflow_task_wait_s"] += t - wft_scheduled
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            totals["workflow_tasks"] += 1
            if wft_started is not None:
                totals["workflow_task_s"] += t - wft_started
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            scheduled[event.event_id] = t
            totals["activities"] += 1
            attrs = event.activity_task_scheduled_event_attributes
            totals["activity_input_bytes"] += sum(p.ByteSize() for p in attrs.input.payloads)
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            attrs = event.activity_task_started_event_attributes
            started[attrs.scheduled_event_id] = t
            if attrs.scheduled_event_id in scheduled:
                totals["activity_wait_s"] += t - scheduled[attrs.scheduled_event_id]
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            attrs = event.activity_task_completed_event_attributes
            if attrs.scheduled_event_id in started:
                totals["activity_run_s"] += t - started[attrs.scheduled_event_id]
            totals["activity_result_bytes"] += sum(p.ByteSize() for p in attrs.result.payloads)
        elif kind == EventType.EVENT_TYPE_MARKER_RECORDED:
            totals["local_activity_markers"] += 1
    first, last = _seconds(history.events[0]), _seconds(history.events[-1])
    totals["server_span_s"] = last - first
    return totals


def per_step(breakdown: dict[str, Any], steps: int) -> dict[str, float]:
    """A breakdown in milliseconds per step."""
    keys = ("workflow_task_s", "workflow_task_wait_s", "activity_wait_s", "activity_run_s", "server_span_s")
    out = {k[: -len("_s")] + "_ms": round(1000 * breakdown[k] / steps, 3) for k in keys}
    out["workflow_tasks_per_step"] = round(breakdown["workflow_tasks"] / steps, 3)
    out["events_per_step"] = round(breakdown["events"] / steps, 3)
    out["activity_input_bytes_per_step"] = round(breakdown["activity_input_bytes"] / max(1, breakdown["activities"]), 1)
    return out
