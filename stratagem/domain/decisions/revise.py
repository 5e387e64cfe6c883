"""Revising the plan: a person's edited plan becomes the next revision, under review, while the
run waits for a repair, or (level 4) while it runs, where running steps may not change.
"""

from __future__ import annotations

from datetime import datetime

from stratagem.common.errors import DecisionRefusedError
from stratagem.domain.decisions import escalation, quorum
from stratagem.domain.decisions.common import check_approver, check_open, check_revision, record_decision
from stratagem.domain.decisions.plan_approval import (
    carry_approval,
    covered,
    plan_approval_request,
    plan_changes,
    review_changes,
)
from stratagem.domain.ledger import DecisionAction, StepStatus
from stratagem.domain.plan import Plan, PlanDraft, StepKind
from stratagem.domain.run_levels import Change, reached
from stratagem.domain.run_types import DecisionKind, Phase, ReviseInput, RunState
from stratagem.domain.scheduling import reconcile
from stratagem.domain.validation import plan_problems


def check_revise(state: RunState, decision: ReviseInput) -> None:
    """The edited plan must be valid as laid over what already ran, against the run's tools.

    A plan may be revised under review, while waiting for repair, and (runs at level 4) while it
    runs: running steps finish as they are, so a revision may not change or drop one of them.
    Older runs refuse it while running: a revise *signal* they ignored then is in their history,
    and accepting it now would replay differently. (No older history has a run waiting for a
    repair in it, so that phase takes a revise at any level.)"""
    check_open(state)
    check_approver(state, decision.by)
    if state.compensation is not None:
        raise DecisionRefusedError(
            "the run is undoing its effects (compensating): approve or reject the undos, or retry, skip or stop "
            "a failed one; its plan is not revised"
        )
    revisable = [Phase.awaiting_approval, Phase.awaiting_repair]
    while_running = reached(state, Change.REVISE_WHILE_RUNNING)
    if while_running:
        revisable.append(Phase.running)
    if state.phase not in revisable:
        when = "awaits approval, runs or waits for a repair" if while_running else "awaits approval or a repair"
        raise DecisionRefusedError(f"a plan can only be revised while it {when} (the run is {state.phase.value})")
    check_revision(state, decision.revision)
    if state.phase is Phase.running:
        running_problems(state, decision.plan)
    merged = reconcile(state.plan, decision.plan, state.ledger.steps)
    rules = {**state.options.plan_rules(), "human_fields": reached(state, Change.HUMAN_STEP_FIELDS)}
    problems = merged.problems or plan_problems(merged.draft, state.catalog, **rules)
    if problems:
        raise DecisionRefusedError("the revised plan is invalid: " + "; ".join(problems))
    quorum.check_reachable(state, decision.by, "this edit")


def running_problems(state: RunState, draft: PlanDraft) -> None:
    """Refuse a revision that changes or drops a step while it runs (a human step waiting for its
    answer may change: it is asked again)."""
    assert state.plan is not None
    in_draft = {s.id: s for s in draft.steps}
    for step in state.plan.steps:
        record = state.ledger.steps[step.id]
        if record.status is not StepStatus.running or step.kind is StepKind.human:
            continue
        if step.id not in in_draft:
            raise DecisionRefusedError(f"step '{step.id}' is running and cannot be dropped until it finishes")
        if in_draft[step.id] != step:
            raise DecisionRefusedError(f"step '{step.id}' is running and cannot be changed until it finishes")


def record_revision(
    state: RunState, decision: ReviseInput, plan: Plan, *, via: str, now: datetime, partial: bool = False
) -> None:
    """Record a person's edit, already adopted as `plan`; the new revision awaits approval of what
    it changed, or keeps the approved revision's approval when it changed nothing."""
    record_decision(
        state, DecisionAction.revise, decision.by, now, plan.revision, decision.reason, via, decision=decision
    )
    escalated = any(p.escalated for p in state.pending if p.kind is DecisionKind.plan_approval)
    before = state.pending
    # A question or approval about a step this revision changed or dropped is void: the step asks
    # again if it still exists, and nothing can answer the old one meanwhile.
    earlier = state.ledger.revisions[-2] if len(state.ledger.revisions) > 1 else None
    void = set(covered(plan_changes(earlier, plan)) or []) if earlier is not None else set()
    state.pending = [
        p
        for p in state.pending
        if p.kind not in (DecisionKind.plan_approval, DecisionKind.repair) and p.step_id not in void
    ]
    changes = review_changes(state, partial)
    if changes is not None and not covered(changes):
        carry_approval(state, now)
        return
    state.phase = Phase.awaiting_approval
    state.pending.insert(0, plan_approval_request(state, now, changes=changes))
    state.pending[0].escalated = escalated  # an escalation stays visible until someone decides
    escalation.carry(before, state.pending[0])
