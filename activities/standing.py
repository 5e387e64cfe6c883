"""A run's standing approval, read from its task queue's registry (workflows/standing_registry.py)
and matched to the run by stratagem.domain.standing's rules.

Every grant's signature is verified again here, with the worker's own keys: the registry
refuses unsigned grants, but what a run is approved by should not rest on one check made
somewhere else. What this returns is recorded in the run's history, so the run's decision
replays as it was taken, whatever the registry holds later.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity
from temporalio.client import WorkflowQueryFailedError
from temporalio.service import RPCError, RPCStatusCode

from stratagem.common.signing import DecisionPolicy
from stratagem.domain.standing import (
    FIND_ACTIVITY,
    GRANT_KIND,
    LIST_QUERY,
    Registry,
    StandingMatch,
    StandingRequest,
    match,
)

QUERY_TIMEOUT = timedelta(seconds=20)


class StandingActivities:
    def __init__(self, policy: DecisionPolicy | None = None) -> None:
        self._policy = policy

    @property
    def policy(self) -> DecisionPolicy:
        if self._policy is None:  # read once, at the first run that asks, as a worker's plugin does
            self._policy = DecisionPolicy.from_env()
        return self._policy

    @activity.defn(name=FIND_ACTIVITY)
    async def find_standing(self, request: StandingRequest) -> StandingMatch:
        handle = activity.client().get_workflow_handle(request.registry)
        try:
            registry = await handle.query(LIST_QUERY, result_type=Registry, rpc_timeout=QUERY_TIMEOUT)
        except RPCError as exc:
            if exc.status is RPCStatusCode.NOT_FOUND:
                return StandingMatch()  # nobody granted anything on this queue yet
            raise
        except WorkflowQueryFailedError as exc:
            activity.logger.warning("the standing approvals could not be read: %s", exc.message)
            raise
        untrusted: dict[str, str] = {}
        signers: dict[str, str | None] = {}
        for grant in registry.grants:
            if grant.process != request.record.name:
                continue
            verdict = self.policy.verify(request.registry, GRANT_KIND, grant)
            if verdict.refused:
                untrusted[grant.id] = verdict.refused
            else:
                signers[grant.id] = verdict.signer
        found = match(registry, request.record, rendered=request.rendered, now=request.now, untrusted=untrusted)
        if found.grant is not None:
            found.signed_by = signers.get(found.grant.id)
        return found
