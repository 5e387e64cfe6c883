"""Answering a human step: who may answer, whether the answer fits the step's schema, asking the
question and recording the answer.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from stratagem.common.errors import DecisionRefusedError
from stratagem.domain.answers import answer_problem
from stratagem.domain.decisions.common import check_approver, check_open, pending_for, step_of
from stratagem.domain.decisions.escalation import may_decide
from stratagem.domain.decisions.step_approval import check_step_approver, step_approvers
from stratagem.domain.ledger import EventKind
from stratagem.domain.ledger_events import AnswerReceived
from stratagem.domain.run_levels import Change, reached
from stratagem.domain.run_types import AnswerInput, DecisionKind, PendingDecision, RunState


def check_answer(state: RunState, answer: AnswerInput) -> None:
    check_open(state)
    if pending_for(state, DecisionKind.human_answer, answer.step_id) is None:
        raise DecisionRefusedError(f"step '{answer.step_id}' is not waiting for an answer")
    # Who may answer is who may decide (level 7): the run's approver list, then the step's own.
    # Below it, the run's list applied only to steps that name approvers, as those runs decided.
    named = step_approvers(state, answer.step_id) is not None
    escalated = may_decide(state, answer.by, DecisionKind.human_answer, answer.step_id)
    if (named or reached(state, Change.ANSWERS_BY_APPROVERS)) and not escalated:
        check_approver(state, answer.by)
    if named and not escalated:
        check_step_approver(state, answer.by, answer.step_id)
    schema = _answer_schema(state, answer.step_id)
    if schema is not None and (problem := answer_problem(answer.answer, schema)):
        raise DecisionRefusedError(f"step '{answer.step_id}' refused the answer: {problem}")


def _answer_schema(state: RunState, step_id: str) -> dict[str, Any] | None:
    """The answer schema of a step of the current plan (None: no plan, no such step, no schema)."""
    step = step_of(state, step_id)
    return step.answer_schema if step is not None else None


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


def record_answer(state: RunState, answer: AnswerInput, now: datetime) -> None:
    state.answers[answer.step_id] = answer.answer
    revision = state.plan.revision if state.plan else None
    signed = AnswerReceived(signed_by=answer.verdict.signer if answer.verdict is not None else None)
    state.ledger.record(
        EventKind.answer_received, now, revision=revision, step_id=answer.step_id, actor=answer.by, data=signed
    )


def waiting(pending: PendingDecision) -> str:
    """What the run waits for, in words (notifications, the console, the inbox)."""
    return f"an answer for step {pending.step_id}"


def question(pending: PendingDecision) -> str:
    """The question a person is asked at the terminal (before how to answer it)."""
    return f"{pending.step_id} asks: {pending.prompt}"
