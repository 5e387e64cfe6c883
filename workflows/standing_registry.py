"""The standing approvals of one task queue: a long-running workflow with a fixed id
(stratagem.domain.standing.registry_id) whose state is every grant and revocation, recorded by
updates and read by a query. Its history is the audit: who granted what, who revoked it, when.

A grant or revocation is checked twice before it counts: its signature against the worker's keys
(VerifyDecisions, the interceptor that checks the run's decisions, refuses it in the update's
validator), and its content here (`grant_problems`). A run reads the registry through an activity
that verifies each grant's signature again, so a registry state nobody signed approves nothing.
Workflow code: deterministic, no I/O.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from stratagem.domain.standing import (
        GRANT_UPDATE,
        LIST_QUERY,
        REGISTRY_WORKFLOW,
        REVOKE_UPDATE,
        Grant,
        Registry,
        Revocation,
        grant_problems,
        revocation_problem,
    )

# The history a registry keeps before it continues as new with its state.
MAX_HISTORY = 1_000


@workflow.defn(name=REGISTRY_WORKFLOW)
class StandingApprovals:
    @workflow.init
    def __init__(self, carried: Registry | None = None) -> None:
        # Only the registry's own continue-as-new hands a state on: a start by anyone else (with
        # grants nobody signed in its input, say) begins empty.
        own = carried is not None and workflow.info().continued_run_id is not None
        self.registry = carried if own and carried is not None else Registry()

    @workflow.run
    async def run(self, carried: Registry | None = None) -> None:
        while True:
            await workflow.wait_condition(
                lambda: (
                    workflow.info().get_current_history_length() > MAX_HISTORY
                    or workflow.info().is_continue_as_new_suggested()
                )
            )
            await workflow.wait_condition(workflow.all_handlers_finished)
            workflow.continue_as_new(self.registry)

    @workflow.update(name=GRANT_UPDATE)
    def grant(self, grant: Grant) -> str:
        self.registry.grants.append(grant)
        return grant.id

    @grant.validator
    def _check_grant(self, grant: Grant) -> None:
        problems = grant_problems(grant, self.registry, workflow.now())
        if problems:
            raise ApplicationError("; ".join(problems), type="StandingApprovalRefused", non_retryable=True)

    @workflow.update(name=REVOKE_UPDATE)
    def revoke(self, revocation: Revocation) -> str:
        self.registry.revocations.append(revocation)
        return revocation.id

    @revoke.validator
    def _check_revoke(self, revocation: Revocation) -> None:
        problem = revocation_problem(revocation, self.registry)
        if problem:
            raise ApplicationError(problem, type="StandingApprovalRefused", non_retryable=True)

    @workflow.query(name=LIST_QUERY)
    def listed(self) -> Registry:
        return self.registry
