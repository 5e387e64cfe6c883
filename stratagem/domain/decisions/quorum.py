"""Quorum and four eyes on an approval (level 9): a plan revision (`RunOptions.quorum`) or a gated
step (`Step.quorum`) that needs several different people, and (`four_eyes`) not the person who
started the run nor the one who wrote what is approved.

An approval short of the quorum is recorded (a decision, and an `approval_counted` event saying
"1 of 2") and the decision stays pending with its `approved_by`; the one that reaches it approves
as a single approval always did. A person counts once whatever the spelling of their name
(`stratagem.domain.quorum.person`), by the name their signature verified. A rejection needs one
person: any one allowed person rejects. A step's approvals so far belong to its pending decision,
which holds what the step will run (`preview`): what changes that asks again, with none counted.
"""

from __future__ import annotations

from datetime import datetime

from stratagem.common.errors import DecisionRefusedError
from stratagem.domain.decisions.common import pending_for, record_decision, step_of
from stratagem.domain.ledger import DecisionAction, EventKind
from stratagem.domain.ledger_events import ApprovalCounted
from stratagem.domain.plan import Author, AuthorKind
from stratagem.domain.quorum import deciders, person, same_person
from stratagem.domain.run_levels import Change, reached
from stratagem.domain.run_types import ApproveInput, DecisionKind, PendingDecision, RunState


def identity(decision: ApproveInput) -> str:
    """Who approved, as the worker verified it: the signer, or the person an issuer vouched for.
    The worker refuses a signature whose signer is not its `by` (stratagem.common.signing), so
    this is `by` whenever a verdict exists; an unsigned decision (STRATAGEM_ALLOW_UNSIGNED) has
    only its `by`."""
    verdict = decision.verdict
    if verdict is not None and verdict.refused is None:
        return verdict.on_behalf_of or verdict.signer or decision.by
    return decision.by


def _rule(state: RunState, step_id: str | None) -> tuple[int, bool]:
    """(quorum, four eyes) of the plan's approval or a step's."""
    if step_id is None:
        return state.options.quorum, state.options.four_eyes
    step = step_of(state, step_id)
    quorum = step.quorum if step is not None and step.quorum else 1
    return quorum, state.options.four_eyes or (step is not None and step.four_eyes)


def _barred(state: RunState, step_id: str | None) -> dict[str, str]:
    """Who four eyes keeps from approving, and why: the run's starter, and the person who wrote
    what is under review (the revision's human author; for a step, of the revision that last
    changed it)."""
    barred: dict[str, str] = {}
    if state.started_by:
        barred[state.started_by] = "started the run"
    author = _writer(state, step_id)
    if author is not None and author.kind is AuthorKind.human:
        what = "revision" if step_id is None else "step"
        barred.setdefault(author.name, f"wrote this {what}")
    return barred


def _writer(state: RunState, step_id: str | None) -> Author | None:
    """The author of the current revision, or of the one that wrote `step_id` as it stands."""
    revisions = state.ledger.revisions
    if not revisions:
        return None
    if step_id is None:
        return revisions[-1].author
    current = step_of(state, step_id)
    writer = None
    for plan in reversed(revisions):
        if step_id not in plan.step_ids or plan.step(step_id) != current:
            break
        writer = plan.author
    return writer


def _allowed(state: RunState, step_id: str | None) -> list[str] | None:
    """Who may decide at all (None: anyone on the run's list, or anyone)."""
    step = step_of(state, step_id) if step_id is not None else None
    named = step.approvers if step is not None else []
    return deciders(named, state.options.approvers, state.options.approver_groups)


def _may_approve(state: RunState, pending: PendingDecision) -> list[str] | None:
    allowed = _allowed(state, pending.step_id)
    if allowed is None:
        return None
    out = {person(p) for p in [*pending.approved_by, *pending.barred]}
    return [p for p in allowed if person(p) not in out]


def applies(state: RunState, step_id: str | None) -> bool:
    quorum, four_eyes = _rule(state, step_id)
    return reached(state, Change.QUORUM) and (quorum > 1 or four_eyes)


def check_reachable(state: RunState, author: str, what: str) -> None:
    """Refuse a revision `author` would write (`what`: a retry with arguments, a revise) that
    nobody could then approve: under four eyes its author joins the run's starter among those
    barred, and the people left may be fewer than the plan's quorum. Taken, the run would wait
    for ever on a review no one may finish."""
    if not applies(state, None):
        return
    needed, four_eyes = _rule(state, None)
    allowed = _allowed(state, None)
    if allowed is None or not four_eyes:
        return
    barred = {person(name) for name in (state.started_by, author) if name}
    left = [p for p in allowed if person(p) not in barred]
    if len(left) < needed:
        who = ", ".join(left) or "nobody"
        raise DecisionRefusedError(
            f"four eyes: {author} would write the revision {what} makes, and then only {who} could approve it "
            f"where {needed} must; ask another approver to do it"
        )


def ask(state: RunState, pending: PendingDecision) -> None:
    """Put the rule on a pending approval as it is asked, so everyone sees it from the start."""
    if not applies(state, pending.step_id):
        return
    quorum, four_eyes = _rule(state, pending.step_id)
    pending.quorum = quorum if quorum > 1 else None
    pending.barred = _barred(state, pending.step_id) if four_eyes else {}
    pending.may_approve = _may_approve(state, pending)


def _waiting(state: RunState, decision: ApproveInput) -> PendingDecision | None:
    kind = DecisionKind.plan_approval if decision.step_id is None else DecisionKind.step_approval
    return pending_for(state, kind, decision.step_id)


def check(state: RunState, decision: ApproveInput) -> None:
    """Refuse an approval four eyes bars, or by someone who approved already (one line each)."""
    if decision.call_id is not None or not applies(state, decision.step_id):
        return
    waiting = _waiting(state, decision)
    if waiting is None:
        return
    who = identity(decision)
    what = f"step '{decision.step_id}'" if decision.step_id else f"revision {waiting.revision}"
    for name, why in _barred(state, decision.step_id).items() if _rule(state, decision.step_id)[1] else ():
        if same_person(who, name):
            raise DecisionRefusedError(f"four eyes: {who} {why}, so another person must approve {what}")
    if any(same_person(who, earlier) for earlier in waiting.approved_by):
        raise DecisionRefusedError(f"{who} approved already: {tally(waiting)}, {wanted(waiting)}")


def counted(state: RunState, decision: ApproveInput, *, via: str, now: datetime) -> str | None:
    """Count an approval towards its quorum. Short of it, the approval is recorded as a decision of
    its own (the audit lists everyone who approved) and this returns what is still wanted: the
    plan or step keeps waiting. The one that reaches it returns None, and is recorded by the
    approval itself, after an event naming everyone."""
    if decision.call_id is not None or not applies(state, decision.step_id):
        return None
    waiting = _waiting(state, decision)
    if waiting is None or waiting.quorum is None:
        return None
    assert state.plan is not None
    waiting.approved_by.append(identity(decision))
    waiting.may_approve = _may_approve(state, waiting)
    short = len(waiting.approved_by) < waiting.quorum
    if short:
        revision, comment = state.plan.revision, decision.comment
        record_decision(
            state, DecisionAction.approve, decision.by, now, revision, comment, via, decision.step_id, decision=decision
        )
    said = f"approved by {', '.join(waiting.approved_by)} ({tally(waiting)})"
    if short:
        said += f", {wanted(waiting)}"
    state.ledger.record(
        EventKind.approval_counted,
        now,
        revision=state.plan.revision,
        step_id=decision.step_id,
        actor=decision.by,
        message=said,
        data=ApprovalCounted(
            via=via, approved_by=list(waiting.approved_by), quorum=waiting.quorum, may_approve=waiting.may_approve
        ),
    )
    return said if short else None


def tally(pending: PendingDecision) -> str:
    return f"{len(pending.approved_by)} of {pending.quorum or 1}"


def wanted(pending: PendingDecision) -> str:
    """Who is still wanted: "waiting for one more of lee, kim"."""
    left = (pending.quorum or 1) - len(pending.approved_by)
    more = "one more" if left == 1 else f"{left} more"
    if pending.may_approve is None:
        return f"waiting for {more} from anyone else allowed"
    return f"waiting for {more} of {', '.join(pending.may_approve) or 'nobody (no one left may approve)'}"


def progress(pending: PendingDecision) -> str | None:
    """A pending approval's quorum and four eyes in words, for status, the console and the inbox
    ("approved by dana (1 of 2), waiting for one more of lee, kim; four eyes: not bob (started the
    run)"); None when neither applies."""
    parts = []
    if pending.quorum:
        done = f"approved by {', '.join(pending.approved_by)}" if pending.approved_by else "no approval yet"
        parts.append(f"{done} ({tally(pending)}), {wanted(pending)}")
    if pending.barred:
        parts.append("four eyes: not " + ", ".join(f"{name} ({why})" for name, why in pending.barred.items()))
    return "; ".join(parts) or None
