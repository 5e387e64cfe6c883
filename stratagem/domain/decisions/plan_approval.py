"""Approving or rejecting a revision of the plan, and what a review asks about: the whole plan,
or the steps a revision added, changed and removed since the approved one (partial
re-approval); a revision that changes nothing keeps the approval, and one that loosens what
was approved needs a person whatever the options say.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from stratagem.domain.decisions import quorum
from stratagem.domain.decisions.common import pending_for, record_decision
from stratagem.domain.ledger import DecisionAction, EventKind, StepStatus
from stratagem.domain.ledger_events import Decided, PlanApproved
from stratagem.domain.plan import Plan, Risk
from stratagem.domain.run_levels import Change, reached
from stratagem.domain.run_types import ApproveInput, DecisionKind, PendingDecision, Phase, RejectInput, RunState
from stratagem.domain.validation import plan_notes


def plan_approval_request(
    state: RunState, now: datetime, why: Sequence[str] = (), changes: dict[str, list[str]] | None = None
) -> PendingDecision:
    """Ask for the current revision's approval: of the whole plan, or (`changes`) of the steps it
    added, changed and removed since the approved revision."""
    plan = state.plan
    assert plan is not None
    if changes is None:
        prompt = f"approve revision {plan.revision} ({len(plan.steps)} steps)"
    else:
        listed = "; ".join(f"{kind} {', '.join(ids)}" for kind, ids in changes.items() if ids)
        prompt = f"approve revision {plan.revision}: {listed} (the other steps keep revision {state.approved_revision}'s approval)"
    if why:
        prompt += ": " + "; ".join(why)
    if notes := plan_notes(plan, state.catalog):
        prompt += ". " + "; ".join(notes)
    carried: dict[str, Any] | None = None
    if state.forked_from is not None and plan.revision == 1:
        done = [s.id for s in plan.steps if state.ledger.steps[s.id].status is StepStatus.succeeded]
        source = state.forked_from
        prompt += f". Carried over from run {source.run_id} (revision {source.revision}), not run here: "
        prompt += ", ".join(done) or "none"
        if reached(state, Change.FORK_OUTPUTS_SHOWN):  # what the approver sees is what the run goes on with
            carried = {sid: state.ledger.steps[sid].output for sid in done}
    pending = PendingDecision(
        kind=DecisionKind.plan_approval,
        revision=plan.revision,
        since=now,
        prompt=prompt,
        changes=changes,
        carried=carried,
    )
    quorum.ask(state, pending)
    return pending


def plan_changes(before: Plan, after: Plan) -> dict[str, list[str]]:
    """The steps `after` adds, changes and removes against `before`, by id. A step is unchanged
    only if every field is the same: its approval covered exactly that step."""
    old = {s.id: s for s in before.steps}
    new = {s.id: s for s in after.steps}
    return {
        "added": [sid for sid in new if sid not in old],
        "changed": [sid for sid in new if sid in old and new[sid] != old[sid]],
        "removed": [sid for sid in old if sid not in new],
    }


def covered(changes: dict[str, list[str]] | None) -> list[str] | None:
    """The steps an approval of a revision with these changes covers (None: the whole plan)."""
    if changes is None:
        return None
    return [sid for ids in changes.values() for sid in ids]


def carry_approval(state: RunState, now: datetime) -> None:
    """A revision with no step added, changed or removed keeps the approved revision's approval."""
    plan, before = state.plan, state.approved_revision
    assert plan is not None and before is not None
    earlier = next(
        (
            d
            for d in reversed(state.ledger.decisions)
            if d.action is DecisionAction.approve and d.revision == before and d.step_id is None
        ),
        None,
    )
    approver = earlier.by if earlier is not None else "nobody on record"
    comment = f"no step differs from revision {before}, which {approver} approved"
    # Recorded as the carried approval it is, not as the earlier approver's: they never saw this revision.
    record_decision(state, DecisionAction.approve, "carried", now, plan.revision, comment, "carried")
    state.ledger.decisions[-1].covers = []
    state.ledger.record(
        EventKind.approval_carried,
        now,
        revision=plan.revision,
        actor="carried",
        message=comment,
        data=Decided(via="carried"),
    )
    state.approved_revision = plan.revision
    state.pending = [p for p in state.pending if p.kind is not DecisionKind.plan_approval]
    state.phase = Phase.running


_RISK_ORDER = {Risk.low: 0, Risk.medium: 1, Risk.high: 2}


def loosened(before: Plan | None, after: Plan) -> list[str]:
    """What `after` loosens against the approved `before`: changes only a person may approve.

    Whatever the options say, a revision may not lower a step's risk, drop its approval, let it
    call more tools, or change what a step that needs approval does (its tool, arguments or
    instructions). New steps are not listed: a gated new step still waits for its own approval.
    """
    if before is None:
        return ["no approved revision to compare with"]
    approved = {step.id: step for step in before.steps}
    changes = []
    for step in after.steps:
        old = approved.get(step.id)
        if old is None:
            continue
        if _RISK_ORDER[step.risk] < _RISK_ORDER[old.risk]:
            changes.append(f"step '{step.id}' risk lowered from {old.risk.value} to {step.risk.value}")
        if old.requires_approval and not step.requires_approval:
            changes.append(f"step '{step.id}' no longer requires approval")
        if old.approvers and step.approvers != old.approvers:
            changes.append(f"step '{step.id}' changes who may approve it ({', '.join(old.approvers)})")
        if (step.quorum or 1) < (old.quorum or 1):
            changes.append(f"step '{step.id}' quorum lowered from {old.quorum} to {step.quorum or 1}")
        if old.four_eyes and not step.four_eyes:
            changes.append(f"step '{step.id}' no longer needs four eyes")
        if old.answer_schema is not None and step.answer_schema != old.answer_schema:
            changes.append(f"step '{step.id}' changes what its answer must look like")
        if added := sorted(set(step.tools) - set(old.tools)):
            changes.append(f"step '{step.id}' may now call {', '.join(added)}")
        gated = old.needs_step_approval or step.needs_step_approval
        if gated and (step.tool, step.args, step.instructions, step.kind) != (
            old.tool,
            old.args,
            old.instructions,
            old.kind,
        ):
            changes.append(f"step '{step.id}' needs approval and what it does changed")
    return changes


def approve_plan(state: RunState, decision: ApproveInput, *, via: str, now: datetime) -> None:
    """Approve the current revision: the run starts (or resumes) executing it. The approval covers
    the steps the review asked about (all of them, or the changed ones: `PendingDecision.changes`)."""
    assert state.plan is not None
    revision = state.plan.revision
    asked = pending_for(state, DecisionKind.plan_approval, None)
    covers = covered(asked.changes) if asked is not None else None
    record_decision(state, DecisionAction.approve, decision.by, now, revision, decision.comment, via, decision=decision)
    state.ledger.decisions[-1].covers = covers
    state.ledger.record(
        EventKind.plan_approved,
        now,
        revision=revision,
        actor=decision.by,
        message=decision.comment,
        data=PlanApproved(via=via, covers=covers),
    )
    state.approved_revision = revision
    state.pending = []
    state.phase = Phase.running


def record_plan_rejection(state: RunState, decision: RejectInput, *, via: str, now: datetime) -> str:
    """Record the rejection of the current revision; returns the reason the run ends with."""
    assert state.plan is not None
    record_decision(
        state, DecisionAction.reject, decision.by, now, state.plan.revision, decision.reason, via, decision=decision
    )
    state.ledger.record(
        EventKind.plan_rejected,
        now,
        revision=state.plan.revision,
        actor=decision.by,
        message=decision.reason,
        data=Decided(via=via),
    )
    return f"rejected by {decision.by}: {decision.reason}"


def review_changes(state: RunState, partial: bool) -> dict[str, list[str]] | None:
    """What a review of the current revision asks about: None for the whole plan (the first
    revision, `whole_plan_approval`, or runs from before partial re-approval), else the diff
    against the approved revision."""
    approved = state.approved_plan
    if not partial or state.options.whole_plan_approval or approved is None or state.plan is None:
        return None
    return plan_changes(approved, state.plan)


def waiting(pending: PendingDecision) -> str:
    """What the run waits for, in words (notifications, the console, the inbox)."""
    return f"approval of revision {pending.revision}"


def question(pending: PendingDecision) -> str:
    """The question a person is asked at the terminal (before the choices)."""
    return f"approve revision {pending.revision}?"
