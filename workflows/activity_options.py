"""How long each activity of a run may take and how it is retried: every timeout, retry policy
and heartbeat bound the run workflow uses, in one place. Workflow code (deterministic, no I/O).

Changing a value here changes the commands new runs issue (not the replay of old ones: Temporal
does not compare timeouts or retry policies on replay), so it needs no patch; a new activity or
a change to which activities run does (RELIABILITY.md)."""

from __future__ import annotations

import functools
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.workflow import ActivityCancellationType

with workflow.unsafe.imports_passed_through():
    from stratagem.common.errors import NON_RETRYABLE_ERRORS, ForkSourceError
    from stratagem.domain import activity_io
    from stratagem.domain.plan import Step
    from stratagem.domain.run_types import RunOptions

# Planning and synthesis are a few model calls; these bound one attempt, not the whole run.
PLANNING_TIMEOUT = timedelta(minutes=10)
PLANNING_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=2),
    maximum_interval=timedelta(minutes=1),
    maximum_attempts=5,
    non_retryable_error_types=NON_RETRYABLE_ERRORS,
)
# Asking the tools role for its catalogue.
CATALOG_TIMEOUT = timedelta(seconds=30)
CATALOG_RETRY = RetryPolicy(maximum_attempts=10, maximum_interval=timedelta(seconds=30))
# Reading the registry in memory: quick, and a failure there is the worker's, not the network's.
LOCAL_CATALOG_TIMEOUT = timedelta(seconds=10)
LOCAL_CATALOG_RETRY = RetryPolicy(maximum_attempts=3)
# A step's activity reports at least this often (or its own timeout, if shorter).
HEARTBEAT_TIMEOUT = timedelta(seconds=30)
# A notification: a few quick HTTP posts, retried for a while (a chat service may be down).
NOTIFY_TIMEOUT = timedelta(seconds=30)
NOTIFY_RETRY = RetryPolicy(maximum_attempts=8, maximum_interval=timedelta(minutes=1))
# Reading a fork's source run (a describe and a query): a missing source fails at once.
FORK_TIMEOUT = timedelta(minutes=1)
FORK_RETRY = RetryPolicy(
    maximum_attempts=5, maximum_interval=timedelta(seconds=10), non_retryable_error_types=[ForkSourceError.__name__]
)
# Reading the task queue's standing approvals (a query to the registry workflow): if it cannot
# be read within these, the run waits for a person, as it would without one.
STANDING_TIMEOUT = timedelta(seconds=30)
STANDING_RETRY = RetryPolicy(maximum_attempts=4, maximum_interval=timedelta(seconds=10))
# Moving routine events to the output store at a continue-as-new.
ARCHIVE_TIMEOUT = timedelta(minutes=1)
ARCHIVE_RETRY = RetryPolicy(maximum_attempts=5, maximum_interval=timedelta(seconds=10))


def max_attempts(step: Step, options: RunOptions) -> int:
    """How many attempts a step gets: its own limit, else the run's."""
    return step.max_attempts or options.step_max_attempts


STEP_RETRY_INITIAL = timedelta(seconds=1)
STEP_RETRY_MAXIMUM = timedelta(seconds=30)


@functools.lru_cache(maxsize=32)
def step_retry(attempts: int) -> RetryPolicy:
    """A step attempt's retry policy (one per attempt count: it is read-only)."""
    return RetryPolicy(
        initial_interval=STEP_RETRY_INITIAL,
        maximum_interval=STEP_RETRY_MAXIMUM,
        maximum_attempts=attempts,
        non_retryable_error_types=NON_RETRYABLE_ERRORS,
    )


# One attempt per activity: the workflow counts a reconcilable or irreversible tool's attempts
# itself (workflows/attempts.py), so it learns how each one ended before another starts.
ONE_ATTEMPT = RetryPolicy(maximum_attempts=1)


def step_backoff(failed: int) -> timedelta:
    """How long the workflow waits before the attempt after `failed` ones: step_retry's intervals."""
    interval = STEP_RETRY_INITIAL * (2 ** (failed - 1))
    return min(interval, STEP_RETRY_MAXIMUM)


def step_activity_options(
    step: Step, options: RunOptions, *, local: bool = False, one_attempt: bool = False
) -> dict[str, Any]:
    """The options of the activity that runs `step`: a local one (`local`) sends no heartbeats;
    `one_attempt` leaves retrying to the workflow. A non-local one always has a heartbeat timeout,
    by which a lost worker's attempt ends (an attempt of unknown outcome, level 10) in at most
    HEARTBEAT_TIMEOUT rather than the step's whole time limit."""
    timeout = timedelta(seconds=step.timeout_seconds or options.step_timeout_seconds)
    common: dict[str, Any] = dict(
        result_type=activity_io.StepOutput,
        start_to_close_timeout=timeout,
        retry_policy=ONE_ATTEMPT if one_attempt else step_retry(max_attempts(step, options)),
        # On cancel, wait for the activity to stop, so the ledger never says "cancelled" about
        # a tool that is still running (the activity learns of it through its heartbeats).
        cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
        summary=f"{step.id}: {step.title}"[:200],
    )
    if not local:
        common["heartbeat_timeout"] = min(HEARTBEAT_TIMEOUT, timeout)
    return common


# Rendering a process is a few milliseconds of work: a minute is a worker that is gone.
PREPARE_TIMEOUT = timedelta(minutes=1)
PREPARE_RETRY = RetryPolicy(maximum_attempts=10, maximum_interval=timedelta(seconds=30))
