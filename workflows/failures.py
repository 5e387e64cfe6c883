"""What a failed activity says: the message, type, attempts and records it reported.

Activities report failures as `ApplicationError`s built in one place (activities/errors.py),
with what the attempt did in their details; a timed-out attempt leaves its last checkpoint
(heartbeat details) instead. These read either back. Workflow code: pure, deterministic.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, FailureError, TimeoutType
from temporalio.exceptions import TimeoutError as TemporalTimeoutError

with workflow.unsafe.imports_passed_through():
    from stratagem.common.errors import BudgetReachedError, CriteriaUnmetError, StratagemError

_TIMEOUTS = {
    TimeoutType.START_TO_CLOSE: "timed out: an attempt took longer than its time limit",
    TimeoutType.HEARTBEAT: "timed out: the worker running it stopped reporting (it crashed or is stuck)",
    TimeoutType.SCHEDULE_TO_CLOSE: "timed out: no attempt finished in the time allowed",
}


def cause_message(exc: ActivityError) -> str:
    """One line a person can act on: the activity's own message, or which time limit ran out."""
    cause: BaseException | None = exc.cause
    while isinstance(cause, FailureError) and not isinstance(cause, ApplicationError) and cause.cause is not None:
        cause = cause.cause
    if cause is None:
        return str(exc)
    if isinstance(exc.cause, TemporalTimeoutError):
        return _TIMEOUTS.get(exc.cause.type, "timed out") if exc.cause.type else "timed out"
    return cause.message if isinstance(cause, ApplicationError) else str(cause)


# The errors whose failures the run answers other than by failing the step, by the type they
# arrive under: activities/errors.py reports a Stratagem error under its class's name.
_ANSWERED: dict[str, type[StratagemError]] = {cls.__name__: cls for cls in (BudgetReachedError, CriteriaUnmetError)}


def cause_error(exc: ActivityError) -> type[StratagemError] | None:
    """The Stratagem error the activity failed with, if it is one the run answers (above)."""
    cause = exc.cause
    return _ANSWERED.get(cause.type or "") if isinstance(cause, ApplicationError) else None


def cause_detail(exc: ActivityError, key: str, model: Any) -> list[Any]:
    """Records an activity reported with its failure (`key` of its details), as `model`s."""
    return [model.model_validate(item) for item in failure_details(exc).get(key) or []]


def cause_attempts(exc: ActivityError, max_attempts: int) -> int:
    """How many attempts the failed activity made, as it reported; `max_attempts` if it could not say."""
    attempt = failure_details(exc).get("attempt")
    return attempt if isinstance(attempt, int) else max_attempts


def failure_details(exc: ActivityError) -> dict[str, Any]:
    """What the failed activity reported (activities/errors.py), or, if it timed out, its last checkpoint."""
    cause = exc.cause
    details: Any = None
    if isinstance(cause, ApplicationError) and cause.details:
        details = cause.details[0]
    elif isinstance(cause, TemporalTimeoutError) and cause.last_heartbeat_details:
        details = cause.last_heartbeat_details[0]
    return details if isinstance(details, dict) else {}
