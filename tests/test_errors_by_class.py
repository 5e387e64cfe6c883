"""Errors are matched by class, not by spelling: the names on the wire (an ApplicationError's
`type`, a retry policy's non-retryable types) are derived from the classes, and stay as they were."""

from __future__ import annotations

import pytest
from temporalio.exceptions import ActivityError, ApplicationError, RetryState
from temporalio.testing import ActivityEnvironment

from stratagem.activities.errors import as_application_error
from stratagem.activities.forks import _refused
from stratagem.common.errors import (
    NON_RETRYABLE_ERRORS,
    BudgetReachedError,
    CriteriaUnmetError,
    ForkSourceError,
    NonRetryableToolError,
    ToolError,
    UnknownToolError,
)
from stratagem.common.workflow_errors import DecisionRefused, RunFailed
from stratagem.models.base import ModelCallError
from stratagem.workflows import messages
from stratagem.workflows.activity_options import FORK_RETRY, PLANNING_RETRY, step_retry
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


def test_the_failures_a_run_reports_keep_their_wire_types() -> None:
    refused = DecisionRefused("no")
    assert (refused.type, refused.non_retryable) == ("DecisionRefused", True)
    failed = RunFailed("it failed")
    assert (failed.type, failed.non_retryable) == ("RunFailed", True)
    # The workflow's handlers raise the very class the interceptors raise.
    assert messages.DecisionRefused is DecisionRefused


@pytest.mark.parametrize(
    ("error", "type_", "non_retryable"),
    [
        (ToolError("down for now"), "ToolError", False),
        (ToolError("never", retryable=False), "NonRetryableToolError", True),
        (NonRetryableToolError("never"), "NonRetryableToolError", True),
        (ModelCallError("rate limited"), "ModelCallError", False),
        (UnknownToolError("no such tool"), "UnknownToolError", True),
    ],
)
def test_an_activity_reports_an_error_under_the_type_its_policies_match(error, type_, non_retryable) -> None:
    failure = ActivityEnvironment().run(as_application_error, error)
    assert (failure.type, failure.non_retryable) == (type_, non_retryable)


def test_a_fork_source_that_cannot_be_read_keeps_its_wire_type_and_is_not_retried() -> None:
    refused = _refused("there is no run r-1 to fork from")
    assert (refused.type, refused.non_retryable) == ("ForkSourceError", True)
    assert refused.type == ForkSourceError.__name__
    assert FORK_RETRY.non_retryable_error_types == ["ForkSourceError"]
