"""Turning Stratagem's exceptions into Temporal failures with the right retry behaviour."""

from __future__ import annotations

from temporalio import activity
from temporalio.exceptions import ApplicationError

from stratagem.errors import StratagemError, ToolError
from stratagem.models.base import ModelCallError

_RETRYABLE = (ModelCallError,)


def as_application_error(exc: BaseException) -> ApplicationError:
    """Wrap an exception so the workflow sees its message, its type and the attempt it ended.

    Stratagem's own errors (bad input, unknown tools, unusable model output) are non-retryable:
    another attempt would fail the same way. A tool decides for itself with
    `ToolError(retryable=...)`. Any other exception is retried under the step's retry policy.
    """
    attempt = activity.info().attempt
    if isinstance(exc, ApplicationError):
        if exc.details:
            return exc
        # Raised by a tool itself: keep its message, type and retry choice, add the attempt.
        return ApplicationError(exc.message, {"attempt": attempt}, type=exc.type, non_retryable=exc.non_retryable)
    message = str(exc) or type(exc).__name__
    if isinstance(exc, ToolError):
        return ApplicationError(
            message,
            {"attempt": attempt},
            type="ToolError" if exc.retryable else "NonRetryableToolError",
            non_retryable=not exc.retryable,
        )
    if isinstance(exc, StratagemError):
        return ApplicationError(message, {"attempt": attempt}, type=type(exc).__name__, non_retryable=True)
    if isinstance(exc, _RETRYABLE):
        return ApplicationError(message, {"attempt": attempt}, type=type(exc).__name__)
    return ApplicationError(f"{type(exc).__name__}: {message}", {"attempt": attempt}, type=type(exc).__name__)
