"""Turning Stratagem's exceptions into Temporal failures with the right retry behaviour."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from stratagem.common.errors import NonRetryableToolError, StratagemError, ToolError
from stratagem.models.base import ModelCallError, redact


def as_application_error(exc: BaseException, **progress: Any) -> ApplicationError:
    """Wrap an exception so the workflow sees its message, its type, the attempt it ended and
    `progress` (for example the model calls made, which the run's usage must count).

    Stratagem's own errors (bad input, unknown tools, unusable model output, refused
    credentials) are non-retryable: another attempt would fail the same way. A tool decides
    for itself with `ToolError(retryable=...)`. A model call that may succeed later is retried,
    no sooner than the provider's Retry-After. Any other exception is retried under the step's
    retry policy. Messages never carry anything shaped like an API key.
    """
    error = _as_application_error(exc, **progress)
    # The cause Temporal stores (failure.cause) and the worker logs is a redacted copy: the
    # original exception, chained, kept the credential its message may carry.
    cause = ApplicationError(redact(str(exc) or type(exc).__name__), type=type(exc).__name__, non_retryable=True)
    error.__cause__ = cause
    error.__suppress_context__ = True
    return error


def _as_application_error(exc: BaseException, **progress: Any) -> ApplicationError:
    details = {"attempt": activity.info().attempt, **progress}
    if isinstance(exc, ApplicationError):
        # Raised by a tool itself: keep its message, type, retry choice and details after ours.
        return ApplicationError(
            redact(exc.message),
            details,
            *exc.details,
            type=exc.type,
            non_retryable=exc.non_retryable,
            next_retry_delay=exc.next_retry_delay,
        )
    message = redact(str(exc) or type(exc).__name__)
    if isinstance(exc, ToolError):
        return ApplicationError(
            message,
            details,
            type=(ToolError if exc.retryable else NonRetryableToolError).__name__,
            non_retryable=not exc.retryable,
        )
    if isinstance(exc, StratagemError):
        return ApplicationError(message, details, type=type(exc).__name__, non_retryable=True)
    if isinstance(exc, ModelCallError):
        delay = timedelta(seconds=exc.retry_after) if exc.retry_after else None
        return ApplicationError(message, details, type=ModelCallError.__name__, next_retry_delay=delay)
    return ApplicationError(f"{type(exc).__name__}: {message}", details, type=type(exc).__name__)
