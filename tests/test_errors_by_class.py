"""Errors are matched by class, not by spelling: the names on the wire (an ApplicationError's
`type`, a retry policy's non-retryable types) are derived from the classes, and stay as they were."""

from __future__ import annotations

import pytest
from temporalio.exceptions import ActivityError, ApplicationError, RetryState

from stratagem.errors import NON_RETRYABLE_ERRORS, BudgetReachedError, CriteriaUnmetError
from stratagem.workflows.activity_options import PLANNING_RETRY, step_retry
from stratagem.workflows.failures import cause_error

pytestmark = pytest.mark.unit


def test_the_non_retryable_types_are_the_names_they_always_were() -> None:
    assert NON_RETRYABLE_ERRORS == [
        "UnknownToolError",
        "ToolArgumentsError",
        "ReferenceResolutionError",
        "ModelConfigError",
        "ModelOutputError",
        "PlanValidationError",
        "NonRetryableToolError",
        "ModelAuthError",
        "ModelRequestError",
        "CriteriaUnmetError",
    ]
    assert PLANNING_RETRY.non_retryable_error_types == NON_RETRYABLE_ERRORS
    assert step_retry(3).non_retryable_error_types == NON_RETRYABLE_ERRORS


def _failed_with(type_: str | None) -> ActivityError:
    error = ActivityError(
        "activity failed",
        scheduled_event_id=1,
        started_event_id=2,
        identity="worker",
        activity_type="stratagem.run_llm",
        activity_id="1",
        retry_state=RetryState.NON_RETRYABLE_FAILURE,
    )
    error.__cause__ = ApplicationError("it failed", type=type_, non_retryable=True)
    return error


def test_a_failure_is_read_back_as_the_class_that_reported_it() -> None:
    assert cause_error(_failed_with("BudgetReachedError")) is BudgetReachedError
    assert cause_error(_failed_with("CriteriaUnmetError")) is CriteriaUnmetError
    assert cause_error(_failed_with("ToolError")) is None
    assert cause_error(_failed_with(None)) is None
