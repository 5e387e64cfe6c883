"""Decisions people send a run: whether it takes an approve, reject, revise or answer, and what
taking one records.

Plain functions over `RunState`, with no Temporal in them, so they can be tested on their own.
The workflow calls the checks from its update validators and signal handlers, and the other
functions to ask for a decision and to apply one. Those only change the state and its ledger;
time comes in as `now` (workflow time, in the workflow), and what the run loop must do next
(stop, end the run) is left to the caller.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from datetime import datetime
from typing import Any

from .activity_io import CallDecision
from .answers import answer_problem
from .errors import DecisionRefusedError
from .ledger import Decision, DecisionAction, EventKind, StepStatus
from .plan import Plan, PlanDraft, Risk, Step, StepKind
from .risk import effective_risk
from .run_types import (
    AnswerInput,
    ApproveInput,
    BudgetInput,
    DecisionInput,
    DecisionKind,
    DecisionOutcome,
    PendingDecision,
    Phase,
    RejectInput,
    ReviseInput,
    RunState,
)
from .scheduling import reconcile
from .usage import price_for
from .validation import plan_notes, plan_problems

# ------------------------------------------------------------------ checks


def check_open(state: RunState) -> None:
    if state.phase.finished:
        raise DecisionRefusedError(f"run {state.run_id} has finished ({state.phase.value}); it takes no decisions")


def check_revision(state: RunState, revision: int | None) -> None:
    current = state.plan.revision if state.plan else None
    if revision is not None and revision != current:
        if current is None:
            raise DecisionRefusedError(f"there is no revision {revision} yet: the plan is still being made")
        if revision > current:
            raise DecisionRefusedError(f"there is no revision {revision}: the current plan is revision {current}")
        raise DecisionRefusedError(f"revision {revision} is stale: the current plan is revision {current}")


def pending_for(state: RunState, kind: DecisionKind, step_id: str | None) -> PendingDecision | None:
    return next((p for p in state.pending if p.kind is kind and p.step_id == step_id), None)


def check_approver(state: RunState, by: str) -> None:
    approvers = state.options.approvers
    if approvers is not None and by not in approvers:
        names = ", ".join(approvers) or "nobody"
        raise DecisionRefusedError(f"{by} is not on this run's approver list ({names})")


def step_approvers(state: RunState, step_id: str) -> list[str] | None:
    """The people a step's `approvers` name, groups expanded; None when it names nobody."""
    step = step_of(state, step_id)
    if step is None or not step.approvers:
        return None
    groups = state.options.approver_groups
    people: list[str] = []
    for name in step.approvers:
        for person in groups.get(name, [name]):
            if person not in people:
                people.append(person)
    return people


def check_step_approver(state: RunState, by: str, step_id: str) -> None:
    """A step that names its approvers takes decisions about it from them only (on top of the run's list)."""
    people = step_approvers(state, step_id)
    if people is not None and by not in people:
        step = step_of(state, step_id)
        named = ", ".join(step.approvers) if step is not None else ""
        expanded = "" if step is not None and people == step.approvers else f" ({', '.join(people)})"
        raise DecisionRefusedError(f"{by} may not decide on step '{step_id}': its approvers are {named}{expanded}")


def check_approve(state: RunState, decision: ApproveInput, *, rejecting: bool = False) -> None:
    """Whether an approval (or, `rejecting`, a rejection) of the plan, a step or a call may be taken."""
    check_open(state)
    check_approver(state, decision.by)
    check_revision(state, decision.revision)
    if decision.call_id is not None:
        if decision.step_id is None:
            raise DecisionRefusedError("a tool call is approved with its step: give --step as well as --call")
        waiting = pending_call(state, decision.step_id, decision.call_id)
        if waiting is None or waiting.call is None:
            raise DecisionRefusedError(
                f"step '{decision.step_id}' has no tool call {decision.call_id} waiting for approval"
            )
        check_step_approver(state, decision.by, decision.step_id)
        if not rejecting and state.level >= 7 and waiting.call.digest:
            check_call_digest(decision, waiting.call.digest)
    elif decision.step_id is not None:
        if pending_for(state, DecisionKind.step_approval, decision.step_id) is None:
            raise DecisionRefusedError(f"step '{decision.step_id}' is not waiting for approval")
        check_step_approver(state, decision.by, decision.step_id)
    elif state.phase is not Phase.awaiting_approval:
        raise DecisionRefusedError(f"no plan is waiting for approval (the run is {state.phase.value})")


def check_call_digest(decision: ApproveInput, digest: str) -> None:
    """A tool call is approved as it was shown: the approval names the digest of its arguments."""
    if decision.digest is None:
        raise DecisionRefusedError(
            f"approve call {decision.call_id} with the digest of the arguments you saw (digest "
            f"{digest[:12]}...): `stratagem approve --step {decision.step_id} --call {decision.call_id}`, the "
            "console and the terminal prompt show the arguments and send it"
        )
    if decision.digest != digest:
        raise DecisionRefusedError(
            f"the arguments of call {decision.call_id} differ from the ones approved (digest {decision.digest[:12]}... "
            f"was shown, {digest[:12]}... waits): look at the call again"
        )


def pending_call(state: RunState, step_id: str, call_id: str) -> PendingDecision | None:
    return next(
        (
            p
            for p in state.pending
            if p.kind is DecisionKind.tool_call_approval
            and p.step_id == step_id
            and p.call is not None
            and p.call.call_id == call_id
        ),
        None,
    )


def check_reject(state: RunState, decision: RejectInput) -> None:
    check_approve(
        state,
        ApproveInput(by=decision.by, revision=decision.revision, step_id=decision.step_id, call_id=decision.call_id),
        rejecting=True,
    )


def check_revise(state: RunState, decision: ReviseInput) -> None:
    """The edited plan must be valid as laid over what already ran, against the run's tools.

    A plan may be revised under review, while waiting for repair, and (runs at level 4) while it
    runs: running steps finish as they are, so a revision may not change or drop one of them.
    Older runs refuse it while running: a revise *signal* they ignored then is in their history,
    and accepting it now would replay differently. (No older history has a run waiting for a
    repair in it, so that phase takes a revise at any level.)"""
    check_open(state)
    check_approver(state, decision.by)
    revisable = [Phase.awaiting_approval, Phase.awaiting_repair]
    if state.level >= 4:
        revisable.append(Phase.running)
    if state.phase not in revisable:
        when = "awaits approval, runs or waits for a repair" if state.level >= 4 else "awaits approval or a repair"
        raise DecisionRefusedError(f"a plan can only be revised while it {when} (the run is {state.phase.value})")
    check_revision(state, decision.revision)
    if state.phase is Phase.running:
        running_problems(state, decision.plan)
    merged = reconcile(state.plan, decision.plan, state.ledger.steps)
    rules = {**state.options.plan_rules(), "human_fields": state.level >= 7}
    problems = merged.problems or plan_problems(merged.draft, state.catalog, **rules)
    if problems:
        raise DecisionRefusedError("the revised plan is invalid: " + "; ".join(problems))


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


def check_answer(state: RunState, answer: AnswerInput) -> None:
    check_open(state)
    if pending_for(state, DecisionKind.human_answer, answer.step_id) is None:
        raise DecisionRefusedError(f"step '{answer.step_id}' is not waiting for an answer")
    # Who may answer is who may decide (level 7): the run's approver list, then the step's own.
    # Below it, the run's list applied only to steps that name approvers, as those runs decided.
    named = step_approvers(state, answer.step_id) is not None
    if named or state.level >= 7:
        check_approver(state, answer.by)
    if named:
        check_step_approver(state, answer.by, answer.step_id)
    schema = _answer_schema(state, answer.step_id)
    if schema is not None and (problem := answer_problem(answer.answer, schema)):
        raise DecisionRefusedError(f"step '{answer.step_id}' refused the answer: {problem}")


def step_of(state: RunState, step_id: str) -> Step | None:
    """A step of the current plan (None: no plan, or no such step)."""
    if state.plan is None:
        return None
    try:
        return state.plan.step(step_id)
    except KeyError:
        return None


def _answer_schema(state: RunState, step_id: str) -> dict[str, Any] | None:
    """The answer schema of a step of the current plan (None: no plan, no such step, no schema)."""
    step = step_of(state, step_id)
    return step.answer_schema if step is not None else None


def check_budget(state: RunState, decision: BudgetInput, *, elapsed_seconds: float) -> None:
    """A stop needs a run waiting on its budget; a change must leave room above what is used."""
    check_open(state)
    check_approver(state, decision.by)
    waiting = pending_for(state, DecisionKind.budget, None) is not None
    if decision.stop:
        if not waiting:
            raise DecisionRefusedError("the run is not waiting on its budget; to end it anyway, cancel it")
        if decision.limits:
            raise DecisionRefusedError("a stop takes no limits: send either the limits or the stop")
        return
    if not decision.limits:
        raise DecisionRefusedError("give at least one limit: tokens, cost_usd, model_calls or wall_clock_seconds")
    if decision.cost_usd is not None:
        unpriced = [m for m in state.options.models if price_for(m, state.options.prices) is None]
        if unpriced:
            raise DecisionRefusedError(
                f"a cost limit cannot hold: {', '.join(unpriced)} has no price in this run; limit tokens instead"
            )
    usage = state.ledger.usage
    used = {
        "tokens": usage.tokens,
        "cost_usd": usage.cost_usd,
        "model_calls": usage.calls,
        "wall_clock_seconds": elapsed_seconds,
    }
    for name, limit in decision.limits.items():
        if limit <= used[name]:
            raise DecisionRefusedError(
                f"a {name} limit of {limit:g} leaves no room: the run has used {used[name]:g} already"
            )


# ------------------------------------------------------------------ pending decisions


def request_budget(state: RunState, used_up: list[str], now: datetime) -> bool:
    """Ask a person to raise the budget or stop the run. False if already asked."""
    if pending_for(state, DecisionKind.budget, None) is not None:
        return False
    revision = state.plan.revision if state.plan else 0
    reasons = "; ".join(used_up)
    state.pending.append(
        PendingDecision(
            kind=DecisionKind.budget,
            revision=revision,
            since=now,
            prompt=f"{reasons}: raise the budget or stop the run",
        )
    )
    state.ledger.record(
        EventKind.budget_exhausted, now, revision=revision, message=reasons, usage=state.ledger.usage.model_dump()
    )
    return True


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
        if state.level >= 7:  # what the approver sees is what the run goes on with
            carried = {sid: state.ledger.steps[sid].output for sid in done}
    return PendingDecision(
        kind=DecisionKind.plan_approval,
        revision=plan.revision,
        since=now,
        prompt=prompt,
        changes=changes,
        carried=carried,
    )


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
        EventKind.approval_carried, now, revision=plan.revision, actor="carried", message=comment, via="carried"
    )
    state.approved_revision = plan.revision
    state.pending = [p for p in state.pending if p.kind is not DecisionKind.plan_approval]
    state.phase = Phase.running


def kept_step_approvals(
    state: RunState, before: Plan | None, after: Plan, retried: Collection[str] = ()
) -> dict[str, bool]:
    """The step approvals a new revision keeps: those of steps identical to the revision they were
    given in that have not run on them. An approval lets a step run once: a step that ran and
    failed, and runs again (`retried`), is asked again, since its first run may have had effects."""
    if before is None:
        return {}
    old = {s.id: s for s in before.steps}
    return {
        sid: True
        for step in after.steps
        if (sid := step.id) in old and old[sid] == step and sid not in retried and state.step_approvals.get(sid) is True
    }


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


def request_step_approval(state: RunState, step: Step, now: datetime) -> None:
    """Ask for a gated step's approval, unless a continue-as-new carried the request here."""
    assert state.plan is not None
    if pending_for(state, DecisionKind.step_approval, step.id) is not None:
        return
    state.pending.append(
        PendingDecision(
            kind=DecisionKind.step_approval,
            revision=state.plan.revision,
            since=now,
            step_id=step.id,
            prompt=f"approve step '{step.id}' ({step.title}), risk {effective_risk(step, state.catalog).value}",
        )
    )
    state.ledger.record(EventKind.step_awaiting_approval, now, revision=state.plan.revision, step_id=step.id)


def request_call_approval(state: RunState, step_id: str, call: Any, now: datetime) -> None:
    """Ask for one tool call of an llm step, showing the exact arguments. Not again if already asked."""
    assert state.plan is not None
    if pending_call(state, step_id, call.call_id) is not None:
        return
    state.pending.append(
        PendingDecision(
            kind=DecisionKind.tool_call_approval,
            revision=state.plan.revision,
            since=now,
            step_id=step_id,
            prompt=f"step '{step_id}' wants to call {call.tool}({call.arguments})",
            call=call,
        )
    )
    state.ledger.record(
        EventKind.call_awaiting_approval,
        now,
        revision=state.plan.revision,
        step_id=step_id,
        message=f"{call.tool}({call.arguments})",
        call=call.call_id,
        **({"digest": call.digest} if call.digest else {}),
    )


def decide_call(state: RunState, decision: ApproveInput | RejectInput, *, via: str, now: datetime) -> None:
    """Approve or reject one paused tool call; the step goes on either way (a rejection is the call's result)."""
    assert decision.step_id is not None and decision.call_id is not None
    kinds = (EventKind.call_approved, EventKind.call_rejected)
    approved, comment = _decide_on_step(state, decision, kinds, via=via, now=now, call=decision.call_id)
    state.ledger.decisions[-1].call_id = decision.call_id
    paused = state.paused_calls[decision.step_id]
    digest = decision.digest if isinstance(decision, ApproveInput) else None
    paused.decisions[decision.call_id] = CallDecision(approved=approved, by=decision.by, reason=comment, digest=digest)
    paused.decided = True
    state.pending = [
        p
        for p in state.pending
        if not (
            p.kind is DecisionKind.tool_call_approval
            and p.step_id == decision.step_id
            and p.call is not None
            and p.call.call_id == decision.call_id
        )
    ]


def request_answer(state: RunState, step_id: str, question: str, now: datetime) -> PendingDecision:
    """Ask a person the question of a human step."""
    assert state.plan is not None
    pending = PendingDecision(
        kind=DecisionKind.human_answer, revision=state.plan.revision, since=now, step_id=step_id, prompt=question
    )
    state.pending.append(pending)
    state.ledger.record(
        EventKind.step_awaiting_answer, now, revision=state.plan.revision, step_id=step_id, message=question
    )
    return pending


def pending_key(pending: PendingDecision) -> str:
    """What tells one pending decision from another, for a notification sent once per decision."""
    call = pending.call.call_id if pending.call is not None else "-"
    return f"{pending.kind.value}/{pending.step_id or '-'}/{call}/r{pending.revision}/{pending.since.isoformat()}"


def waiting_for(pending: PendingDecision) -> str:
    """What a pending decision waits for, in words."""
    kind = pending.kind
    if kind is DecisionKind.plan_approval:
        return f"approval of revision {pending.revision}"
    if kind is DecisionKind.step_approval:
        return f"approval of step {pending.step_id}"
    if kind is DecisionKind.tool_call_approval and pending.call is not None:
        return f"a call of {pending.call.tool} by step {pending.step_id}"
    if kind is DecisionKind.human_answer:
        return f"an answer for step {pending.step_id}"
    if kind is DecisionKind.repair:
        return f"a repair of step {pending.step_id}" if pending.step_id else "a repair"
    return "a budget decision"


def remove_pending(state: RunState, step_id: str) -> None:
    state.pending = [p for p in state.pending if p.step_id != step_id]


# ------------------------------------------------------------------ applying decisions


def record_decision(
    state: RunState,
    action: DecisionAction,
    by: str,
    now: datetime,
    revision: int,
    comment: str,
    via: str,
    step_id: str | None = None,
    *,
    decision: DecisionInput | None = None,
) -> None:
    verdict = decision.verdict if decision is not None else None
    signed_by = verdict.signer if verdict is not None else None
    state.ledger.decisions.append(
        Decision(
            action=action,
            by=by,
            at=now,
            revision=revision,
            comment=comment,
            step_id=step_id,
            via=via,
            signed_by=signed_by,
        )
    )
    state.ledger.auto_approved |= via == "auto"


def approve_plan(state: RunState, decision: ApproveInput, *, via: str, now: datetime) -> None:
    """Approve the current revision: the run starts (or resumes) executing it. The approval covers
    the steps the review asked about (all of them, or the changed ones: `PendingDecision.changes`)."""
    assert state.plan is not None
    revision = state.plan.revision
    asked = pending_for(state, DecisionKind.plan_approval, None)
    covers = covered(asked.changes) if asked is not None else None
    record_decision(state, DecisionAction.approve, decision.by, now, revision, decision.comment, via, decision=decision)
    state.ledger.decisions[-1].covers = covers
    extra: dict[str, Any] = {"covers": covers} if covers is not None else {}
    state.ledger.record(
        EventKind.plan_approved, now, revision=revision, actor=decision.by, message=decision.comment, via=via, **extra
    )
    state.approved_revision = revision
    state.pending = []
    state.phase = Phase.running


def _decide_on_step(
    state: RunState,
    decision: ApproveInput | RejectInput,
    kinds: tuple[EventKind, EventKind],
    *,
    via: str,
    now: datetime,
    **data: Any,
) -> tuple[bool, str]:
    """Record a person's approval or rejection of something a step waits on (the step itself, or
    one of its tool calls): the decision and its event (`kinds`: approved, rejected). Returns
    whether it was an approval, and its comment or reason."""
    assert state.plan is not None
    approved = isinstance(decision, ApproveInput)
    comment = decision.comment if isinstance(decision, ApproveInput) else decision.reason
    action = DecisionAction.approve if approved else DecisionAction.reject
    record_decision(
        state, action, decision.by, now, state.plan.revision, comment, via, decision.step_id, decision=decision
    )
    state.ledger.record(
        kinds[0] if approved else kinds[1],
        now,
        revision=state.plan.revision,
        step_id=decision.step_id,
        actor=decision.by,
        message=comment,
        via=via,
        **data,
    )
    return approved, comment


def decide_step(state: RunState, decision: ApproveInput | RejectInput, *, via: str, now: datetime) -> str | None:
    """Approve or reject one gated step. A rejection returns why the run must stop."""
    assert decision.step_id is not None
    kinds = (EventKind.step_approved, EventKind.step_rejected)
    approved, comment = _decide_on_step(state, decision, kinds, via=via, now=now)
    state.step_approvals[decision.step_id] = approved
    return None if approved else f"step '{decision.step_id}' rejected by {decision.by}: {comment}"


def record_plan_rejection(state: RunState, decision: RejectInput, *, via: str, now: datetime) -> str:
    """Record the rejection of the current revision; returns the reason the run ends with."""
    assert state.plan is not None
    record_decision(
        state, DecisionAction.reject, decision.by, now, state.plan.revision, decision.reason, via, decision=decision
    )
    state.ledger.record(
        EventKind.plan_rejected, now, revision=state.plan.revision, actor=decision.by, message=decision.reason, via=via
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


def record_revision(
    state: RunState, decision: ReviseInput, plan: Plan, *, via: str, now: datetime, partial: bool = False
) -> None:
    """Record a person's edit, already adopted as `plan`; the new revision awaits approval of what
    it changed, or keeps the approved revision's approval when it changed nothing."""
    record_decision(
        state, DecisionAction.revise, decision.by, now, plan.revision, decision.reason, via, decision=decision
    )
    escalated = any(p.escalated for p in state.pending if p.kind is DecisionKind.plan_approval)
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


def record_answer(state: RunState, answer: AnswerInput, now: datetime) -> None:
    state.answers[answer.step_id] = answer.answer
    revision = state.plan.revision if state.plan else None
    signed = {"signed_by": answer.verdict.signer} if answer.verdict is not None and answer.verdict.signer else {}
    state.ledger.record(
        EventKind.answer_received, now, revision=revision, step_id=answer.step_id, actor=answer.by, **signed
    )


def apply_budget(
    state: RunState, decision: BudgetInput, *, via: str, now: datetime, still_used_up: Callable[[], list[str]]
) -> str | None:
    """Change the budget, or stop the run; returns why the run must stop, if it must."""
    revision = state.plan.revision if state.plan else 0
    if decision.stop:
        comment = decision.reason or "stopped at the budget"
        record_decision(
            state, DecisionAction.budget, decision.by, now, revision, f"stop: {comment}", via, decision=decision
        )
        state.pending = [p for p in state.pending if p.kind is not DecisionKind.budget]
        return f"stopped by {decision.by} when the budget ran out: {comment}"
    before = state.options.budget.model_dump(exclude_none=True)
    state.options.budget = state.options.budget.model_copy(update=decision.limits)
    changes = ", ".join(
        f"{name} {before.get(name, 'unlimited')} -> {limit:g}" for name, limit in decision.limits.items()
    )
    record_decision(
        state,
        DecisionAction.budget,
        decision.by,
        now,
        revision,
        f"{changes}. {decision.reason}".strip(),
        via,
        decision=decision,
    )
    state.ledger.record(
        EventKind.budget_changed,
        now,
        revision=revision,
        actor=decision.by,
        message=changes,
        via=via,
        budget=state.options.budget.model_dump(exclude_none=True),
    )
    if not still_used_up():
        state.pending = [p for p in state.pending if p.kind is not DecisionKind.budget]
    return None


def outcome(state: RunState, message: str) -> DecisionOutcome:
    revision = state.plan.revision if state.plan else 0
    return DecisionOutcome(revision=revision, phase=state.phase, message=message)
