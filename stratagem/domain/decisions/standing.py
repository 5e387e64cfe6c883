"""A standing approval at a run's review gate and at its gated steps: the grant the registry
matched (stratagem.domain.standing) approves only what its grantor could approve by hand, under
the same rules (the run's approvers, a step's own approvers, four eyes); a quorum above one is
never met by one grant. What it cannot approve waits for a person, who is told why.
"""

from __future__ import annotations

from datetime import datetime

from stratagem.common.errors import DecisionRefusedError
from stratagem.common.signing import Verdict
from stratagem.domain.decisions import quorum
from stratagem.domain.decisions.common import check_approver, step_of
from stratagem.domain.decisions.plan_approval import approve_plan
from stratagem.domain.decisions.step_approval import check_step_approver
from stratagem.domain.plan import Step
from stratagem.domain.quorum import same_person
from stratagem.domain.run_levels import Change, reached
from stratagem.domain.run_state import StandingUse
from stratagem.domain.run_types import ApproveInput, RunState
from stratagem.domain.standing import Grant, StandingMatch

VIA = "standing"


def _refusal(state: RunState, by: str, step_id: str | None) -> str | None:
    """Why `by` may not approve the plan (`step_id` None) or a gated step of this run by hand."""
    try:
        check_approver(state, by)
        if step_id is not None:
            check_step_approver(state, by, step_id)
    except DecisionRefusedError as exc:
        return str(exc)
    needed, four_eyes = quorum._rule(state, step_id)
    if needed > 1 and (step_id is not None or reached(state, Change.QUORUM)):
        what = f"step '{step_id}'" if step_id else "this run's plan"
        return f"{what} needs {needed} approvers; a standing approval counts as one"
    if four_eyes:
        for name, why in quorum._barred(state, step_id).items():
            if same_person(by, name):
                return f"four eyes: {by} {why}"
    return None


def plan_refusal(state: RunState, grant: Grant) -> str | None:
    """Why the grantor may not approve this run's plan (None: the grant applies)."""
    refused = _refusal(state, grant.by, None)
    return f"standing approval {grant.id} ({grant.by}) cannot approve this run: {refused}" if refused else None


def approve_by_grant(state: RunState, found: StandingMatch, now: datetime) -> None:
    """Approve the current revision by the matched grant; the ledger names the grant and its grantor."""
    grant = found.grant
    assert grant is not None and state.plan is not None
    comment = f"standing approval {grant.id} of {grant.process} v{grant.version}, granted by {grant.by}"
    if grant.bounds:
        comment += " within " + ", ".join(str(b) for b in grant.bounds)
    decision = ApproveInput(by=grant.by, revision=state.plan.revision, comment=comment)
    if found.signed_by:
        decision._verdict = Verdict(signer=found.signed_by)
    approve_plan(state, decision, via=VIA, now=now)
    state.standing = StandingUse(
        grant=grant.id, by=grant.by, revision=state.plan.revision, steps=list(grant.steps), signed_by=found.signed_by
    )


def step_decision(state: RunState, step: Step) -> ApproveInput | None:
    """The approval of a gated step the run's standing approval names, if it may give it: the
    revision it approved still runs, and its grantor may approve the step by hand."""
    use = state.standing
    if use is None or step.id not in use.steps or state.plan is None:
        return None
    if use.revision != state.plan.revision or state.approved_revision != use.revision:
        return None
    if step_of(state, step.id) != step or _refusal(state, use.by, step.id) is not None:
        return None
    decision = ApproveInput(by=use.by, step_id=step.id, comment=f"standing approval {use.grant}, granted by {use.by}")
    if use.signed_by:
        decision._verdict = Verdict(signer=use.signed_by)
    return decision
