"""The interceptors a Stratagem worker puts between Temporal and the run workflow: keeping a
run's activities on its workflow's own queue (SharedQueues), checking every decision against the
worker's keys (VerifyDecisions), and letting a process host the workflow without running its
tools (HostOnly). Workflow-side code: deterministic, no I/O."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from temporalio import workflow
from temporalio.worker import (
    ExecuteWorkflowInput,
    HandleSignalInput,
    HandleUpdateInput,
    Interceptor,
    StartActivityInput,
    StartLocalActivityInput,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
    WorkflowOutboundInterceptor,
)

from stratagem.common.signing import DecisionPolicy, Verdict
from stratagem.common.workflow_errors import DecisionRefused
from stratagem.domain import activity_io
from stratagem.domain.decisions.kinds import BY_SIGNAL, BY_UPDATE
from stratagem.domain.roles import is_role_queue
from stratagem.domain.run_types import DecisionInput, RunInput, start_digest
from stratagem.domain.standing import GRANT_KIND, GRANT_UPDATE, REGISTRY_WORKFLOW, REVOKE_KIND, REVOKE_UPDATE

# The standing-approval registry's updates, and the kind each is signed as.
_STANDING_KINDS = {GRANT_UPDATE: GRANT_KIND, REVOKE_UPDATE: REVOKE_KIND}


class SharedQueues(Interceptor):
    """Keeps a run's activities on its workflow's own task queue (`QueueLayout.shared`).

    Temporal can hand an activity to the worker whose workflow task scheduled it, in the reply
    that completes the task (eager dispatch), but only on the workflow's own queue. On a role
    queue every step pays one more trip through the server's matching: on the overhead bench,
    101 against 46 ms per step. A worker that serves every role gains nothing from the split, so
    it folds the role queues back. Replay does not compare task queues, so a run may move between
    shared and split workers at any point (RELIABILITY.md).
    """

    def workflow_interceptor_class(self, input: WorkflowInterceptorClassInput) -> type[WorkflowInboundInterceptor]:
        return _SharedQueuesInbound


class _SharedQueuesInbound(WorkflowInboundInterceptor):
    def init(self, outbound: WorkflowOutboundInterceptor) -> None:
        super().init(_SharedQueuesOutbound(outbound))


class _SharedQueuesOutbound(WorkflowOutboundInterceptor):
    def start_activity(self, input: StartActivityInput) -> workflow.ActivityHandle[Any]:
        own = workflow.info().task_queue
        if input.task_queue and input.task_queue != own and is_role_queue(own, input.task_queue):
            input.task_queue = own
        return super().start_activity(input)


class VerifyDecisions(Interceptor):
    """Checks every decision against the worker's keys before the workflow sees it (stratagem.common.signing),
    and every standing approval and revocation sent to the registry (stratagem.domain.standing).

    An update that fails is rejected in its validator (it never reaches history); a signal that
    fails reaches the workflow marked refused, which records it as ignored. The verdict rides
    on the decision as a private attribute, which no payload can set. A run that would approve
    itself (`auto_approve`) starts only with a trusted person's signature over its input (level 7;
    below it, only where no key is configured), unless the worker accepts unsigned decisions.
    """

    def __init__(self, policy: DecisionPolicy):
        self.policy = policy
        # Made once per worker: the SDK asks for the class at every workflow run.
        self._inbound = type("VerifyDecisionsInbound", (_VerifyDecisionsInbound,), {"policy": policy})

    def workflow_interceptor_class(self, input: WorkflowInterceptorClassInput) -> type[WorkflowInboundInterceptor]:
        return self._inbound


def _legacy() -> bool:
    """Whether this run keeps the rule it started under before signing was the default
    (`StratagemRun.signed_decisions`, worked out in its __init__, before any handler runs)."""
    return not getattr(workflow.instance(), "signed_decisions", True)


class _VerifyDecisionsInbound(WorkflowInboundInterceptor):
    policy: DecisionPolicy

    def init(self, outbound: WorkflowOutboundInterceptor) -> None:
        super().init(outbound)
        # The verdicts of updates validated in this task, by update id: the SDK decodes an
        # update's arguments again for its handler, which would otherwise verify the signature a
        # second time (180 us of an approval's workflow task). A replay runs no validator, so
        # its handler verifies.
        self._validated: dict[str, Verdict] = {}

    def _judge(self, kind: str | None, args: Sequence[Any], known: Verdict | None = None) -> Verdict | None:
        if kind is None or not args or not isinstance(args[0], DecisionInput):
            return None
        legacy = _legacy()
        # From level 7 the signature covers the execution: one read from another run's history,
        # under the same run id, does not verify here.
        execution = workflow.info().first_execution_run_id
        verdict = known or self.policy.verify(
            workflow.info().workflow_id, kind, args[0], legacy=legacy, execution=execution
        )
        args[0]._verdict = verdict
        return verdict

    def handle_update_validator(self, input: HandleUpdateInput) -> None:
        standing = _STANDING_KINDS.get(input.update)
        if standing is not None and workflow.info().workflow_type == REGISTRY_WORKFLOW:
            # A grant counts for every later run of its process: signed by a trusted person, for
            # this registry (its id names the task queue), or refused before it is recorded.
            grant = input.args[0] if input.args else None
            found = self.policy.verify(workflow.info().workflow_id, standing, grant)
            if found.refused:
                raise DecisionRefused(found.refused)
        verdict = self._judge(input.update if input.update in BY_UPDATE else None, input.args)
        if verdict is not None and verdict.refused:
            raise DecisionRefused(verdict.refused)
        super().handle_update_validator(input)
        if verdict is not None:  # kept only for an update the run accepted: its handler follows
            self._validated[input.id] = verdict

    async def handle_update_handler(self, input: HandleUpdateInput) -> Any:
        known = self._validated.pop(input.id, None)
        self._judge(input.update if input.update in BY_UPDATE else None, input.args, known)
        return await super().handle_update_handler(input)

    async def handle_signal(self, input: HandleSignalInput) -> None:
        kind = BY_SIGNAL.get(input.signal)
        self._judge(kind.update if kind is not None else None, input.args)
        await super().handle_signal(input)

    async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
        run = input.args[0] if input.args else None
        # Every start but the run's own continue-as-new: a cron or retry start counts as continued
        # for Temporal, and once approved itself unchecked (StratagemRun.continued_as_new).
        own = getattr(workflow.instance(), "continued_as_new", workflow.info().continued_run_id is not None)
        if not own and isinstance(run, RunInput) and run.options.auto_approve:
            refused = self._auto_approve_refused(run)
            if refused:
                raise DecisionRefused(refused)
        return await super().execute_workflow(input)

    def _auto_approve_refused(self, run: RunInput) -> str | None:
        if _legacy():  # the rule such runs started under
            if self.policy.legacy_unsigned:
                return None
            return "this deployment accepts only signed decisions, so a run may not approve itself (auto_approve)"
        info = workflow.info()
        verdict = self.policy.verify_start(info.workflow_id, run.auto_approval, start_digest(run), info.start_time)
        if run.auto_approval is not None:
            run.auto_approval._verdict = verdict
        return verdict.refused


# What a host has no tools to run. The catalogue's local activity is answered "no tools here"
# (the run then asks the tools role) by a host alone on its queue, so that a run started while
# no worker runs still moves on to wait for one, and its status is answered meanwhile.
HOST_UNAVAILABLE = (activity_io.DESCRIBE_TOOLS, activity_io.RUN_TOOL)
# Beside a worker, a host leaves the catalogue to the worker too. A query that reaches a host
# while a worker's task is under way replays up to that task and runs its local activities: the
# host's "no tools" then stood in for the catalogue the worker recorded, and the next query
# replayed into a nondeterminism error (found by CI: `stratagem run` failed 1 in 10 under load).
BESIDE_A_WORKER = (*HOST_UNAVAILABLE, activity_io.DESCRIBE_TOOLS_HERE)


class HostOnly(Interceptor):
    """For a process that hosts the run workflow without its activities (the command line, for
    the length of a command): a workflow task that would run a tool here (HOST_UNAVAILABLE) fails,
    and Temporal gives it to another worker, one with the tools. Replaying history (to answer a
    query, say) reads local activities' results from it and runs nothing, so it goes on.
    Beside a worker (`beside_a_worker`), BESIDE_A_WORKER instead of HOST_UNAVAILABLE: then a
    query that comes while the worker's task is under way fails the same way (HOSTED_ONLY), and
    the client asks again (stratagem.run_queries); `quiet_hosted_failures` keeps the SDK's
    traceback for such a task out of the command's output."""

    def __init__(self, beside_a_worker: bool = False) -> None:
        self.beside_a_worker = beside_a_worker

    def workflow_interceptor_class(self, input: WorkflowInterceptorClassInput) -> type[WorkflowInboundInterceptor]:
        return _BesideAWorkerInbound if self.beside_a_worker else _HostOnlyInbound


class _HostOnlyInbound(WorkflowInboundInterceptor):
    unavailable = frozenset(HOST_UNAVAILABLE)

    def init(self, outbound: WorkflowOutboundInterceptor) -> None:
        super().init(_HostOnlyOutbound(outbound, self.unavailable))


class _BesideAWorkerInbound(_HostOnlyInbound):
    unavailable = frozenset(BESIDE_A_WORKER)


HOSTED_ONLY = "this process only hosts the workflow"


class HostedWorkflowError(RuntimeError):
    """Not an ApplicationError: it fails the workflow task (retried elsewhere), not the run."""


class _HostedFailures(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], HostedWorkflowError))


_QUIET = _HostedFailures()


def quiet_hosted_failures() -> None:
    """Drop the SDK's warning, with its traceback, for a workflow task this host leaves to a
    worker: it is how hosting works, not a fault, and it printed on a command's output."""
    logging.getLogger("temporalio.worker._workflow_instance").addFilter(_QUIET)  # idempotent: one filter object


class _HostOnlyOutbound(WorkflowOutboundInterceptor):
    def __init__(self, next: WorkflowOutboundInterceptor, unavailable: frozenset[str]) -> None:
        super().__init__(next)
        self._unavailable = unavailable

    def start_local_activity(self, input: StartLocalActivityInput) -> workflow.ActivityHandle[Any]:
        if input.activity in self._unavailable and not workflow.unsafe.is_replaying():
            raise HostedWorkflowError(f"{HOSTED_ONLY}; {input.activity} needs a Stratagem worker")
        return super().start_local_activity(input)
