"""The attempts of a tool step whose tool declares `reconcile` or is `irreversible` (level 10),
counted here rather than by Temporal's retry policy, so the workflow knows how each one ended
before another starts:

- an attempt that failed for a known reason (the tool raised: it did not happen) is retried after
  the step's backoff, up to its max_attempts, as Temporal would;
- an attempt of unknown outcome (a lost worker's heartbeat timeout, the attempt's time limit, the
  tool's `OutcomeUnknown` or a sent-then-no-answer error: stratagem.tools.outcome) is followed by
  the tool's reconcile check before anything else runs: its answer is the output, or the tool runs
  (with no attempt left, the check runs alone);
- an irreversible tool without a check, or a check that cannot tell, puts the step in doubt
  (`InDoubt`): a person says what happened (stratagem.domain.in_doubt).

Every other tool keeps Temporal's retries with the step's idempotency key (step_runner.py).
Workflow code: deterministic, no I/O.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.exceptions import CancelledError as TemporalCancelledError
from temporalio.exceptions import TimeoutError as TemporalTimeoutError

with workflow.unsafe.imports_passed_through():
    from stratagem.common.errors import NON_RETRYABLE_ERRORS
    from stratagem.domain import activity_io
    from stratagem.domain.catalog import ToolSpec
    from stratagem.domain.plan import Step
    from stratagem.domain.roles import Role
    from stratagem.domain.run_levels import Change
    from stratagem.domain.run_types import RunState

from .activity_options import max_attempts, step_activity_options, step_backoff
from .core import has, queue
from .failures import cause_message, failure_details


class InDoubt(Exception):
    """The step's effect is unknown and no check can tell: a person decides (never a blind retry)."""

    def __init__(self, why: str, attempts: int) -> None:
        super().__init__(why)
        self.why = why
        self.attempts = attempts


class AttemptsFailed(Exception):
    """The step failed: its last attempt's error, after `attempts` of them."""

    def __init__(self, error: ActivityError, attempts: int) -> None:
        super().__init__(str(error))
        self.error = error
        self.attempts = attempts


def counted_here(state: RunState, spec: ToolSpec | None) -> bool:
    """Whether the workflow counts a tool step's attempts (level 10, a tool with a check or irreversible)."""
    return spec is not None and (spec.reconcile or spec.irreversible) and has(state, Change.IN_DOUBT)


def _unknown(exc: ActivityError) -> bool:
    """Whether the attempt may have had its effect: it timed out (a lost worker, a time limit), or
    the tool's error says it sent and heard nothing back (activities/execution.py)."""
    if isinstance(exc.cause, TemporalTimeoutError):
        return True
    return failure_details(exc).get("outcome_unknown") is True


def _final(exc: ActivityError) -> bool:
    """Whether another attempt would fail the same way (what Temporal would not retry)."""
    cause = exc.cause
    return isinstance(cause, ApplicationError) and (cause.non_retryable or cause.type in NON_RETRYABLE_ERRORS)


def _delay(exc: ActivityError, failed: int) -> timedelta:
    cause = exc.cause
    asked = cause.next_retry_delay if isinstance(cause, ApplicationError) else None
    return asked or step_backoff(failed)


async def run_attempts(
    state: RunState, step: Step, spec: ToolSpec, request: activity_io.ToolStepInput, counted: int
) -> activity_io.StepOutput:
    """Run the step's attempts, one activity each; `counted` are the attempts its record already
    holds (a step that ran again after a person said its effect did not happen). The output's
    `attempt` is how many this dispatch made. Raises `AttemptsFailed` or `InDoubt`."""
    limit = max_attempts(step, state.options)
    options = step_activity_options(step, state.options, one_attempt=True)
    doubt: ActivityError | None = None  # the attempt of unknown outcome no check has answered yet
    made = 0
    while True:
        made += 1
        check_only = doubt is not None and made > limit
        attempt = request.model_copy(
            update={"attempt": counted + made, "reconcile_first": doubt is not None, "check_only": check_only}
        )
        try:
            result = await workflow.execute_activity(
                activity_io.RUN_TOOL, attempt, task_queue=queue(Role.tools), **options
            )
        except ActivityError as exc:
            if isinstance(exc.cause, TemporalCancelledError):
                raise
            if doubt is not None and failure_details(exc).get("reconcile_failed") is True:
                pass  # the check could not tell: the earlier attempt is still of unknown outcome
            elif doubt is None and _unknown(exc):
                doubt = exc
            elif doubt is not None and not _unknown(exc):
                doubt = None  # the check found nothing and the tool ran, and failed: it did not happen
            elif doubt is not None:
                doubt = exc  # the check found nothing, and the tool's own attempt is of unknown outcome
            if doubt is not None and (not spec.reconcile or check_only or _final(exc)):
                why = cause_message(doubt)
                if spec.reconcile:
                    why += f"; its reconcile check could not tell: {cause_message(exc)}" if doubt is not exc else ""
                raise InDoubt(why, made) from exc
            if doubt is None and (_final(exc) or made >= limit):
                raise AttemptsFailed(exc, made) from exc
            await workflow.sleep(_delay(exc, made))
            continue
        if check_only and not result.reconciled:
            # The check found no effect and no attempt is left: the step failed as that attempt did.
            assert doubt is not None
            raise AttemptsFailed(doubt, made)
        return result.model_copy(update={"attempt": made})
