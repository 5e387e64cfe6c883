"""A fork's carried outputs, read from the run it was forked from (stratagem.domain.forks decides which).

Whoever starts a fork names the source run and revision; what the fork carries over comes from
that run's own ledger, never from the start request. A start that named a run that does not
exist, or a step that did not succeed there with that output, once carried forged outputs for a
gated payment and for a human step whose answer needed a named approver (issue #35).
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity
from temporalio.client import WorkflowQueryFailedError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from stratagem.common.errors import ForkSourceError
from stratagem.domain import activity_io, handlers
from stratagem.domain.forks import fork_carry
from stratagem.domain.ledger import Ledger
from stratagem.domain.run_types import WORKFLOW_NAME

# Asking the source run for its ledger: a worker on its queue answers within seconds.
QUERY_TIMEOUT = timedelta(seconds=20)


def _refused(message: str) -> ApplicationError:
    return ApplicationError(message, type=ForkSourceError.__name__, non_retryable=True)


class ForkActivities:
    @activity.defn(name=activity_io.READ_FORK)
    async def read_fork(self, request: activity_io.ReadForkInput) -> activity_io.ForkCarried:
        """The outputs the fork's plan carries from the source run at its revision: those of steps
        that succeeded there unchanged, and whose inputs are carried too."""
        source = activity.client().get_workflow_handle(request.source_run_id)
        try:
            description = await source.describe(rpc_timeout=QUERY_TIMEOUT)
        except RPCError as exc:
            if exc.status is RPCStatusCode.NOT_FOUND:
                raise _refused(f"there is no run {request.source_run_id} to fork from") from None
            raise
        if description.workflow_type != WORKFLOW_NAME:
            raise _refused(f"{request.source_run_id} is a {description.workflow_type} workflow, not a Stratagem run")
        try:
            ledger = await source.query(handlers.LEDGER, result_type=Ledger, rpc_timeout=QUERY_TIMEOUT)
        except WorkflowQueryFailedError as exc:
            raise _refused(f"run {request.source_run_id} could not show its ledger: {exc.message}") from None
        latest = ledger.revisions[-1].revision if ledger.revisions else 0
        if not 1 <= request.revision <= latest:
            raise _refused(f"run {request.source_run_id} has no revision {request.revision} (it has 1 to {latest})")
        carry = fork_carry(ledger, request.revision, request.draft)
        return activity_io.ForkCarried(outputs=carry.outputs, rerun=carry.rerun)
