"""Escalation across a continue-as-new (issue #38 item 6): a question's escalate_after counts from
when it was asked, not from the execution that carries it, and it escalates once. On the dev
server, in real seconds: the time-skipping server can lose a query that races a continue-as-new
(tests/test_workflow_edges.py)."""

from __future__ import annotations

import pytest
from support.plans import step
from test_escalation import ESCALATION, escalated

from stratagem.domain.ledger import EventKind
from stratagem.domain.run_types import AnswerInput

pytestmark = pytest.mark.system


async def test_a_question_carried_by_continue_as_new_escalates_once_on_its_first_clock(dev_harness):
    steps = [step(f"q{i}", "add", a=i, b=1) for i in range(6)]
    steps.append({"id": "ask", "title": "Ask", "kind": "human", "instructions": "Proceed?"})
    options = {**ESCALATION, "escalate_after_seconds": 4, "continue_as_new_after_events": 20, "max_parallel": 1}
    run = await dev_harness.start({"goal": "g", "steps": steps}, auto_approve=True, **options)
    status = await dev_harness.wait_for(run, lambda s: s.continued >= 1 and s.steps.succeeded == 6)
    asked_at = next(p.since for p in status.pending if p.step_id == "ask")
    status = await dev_harness.wait_for(run, escalated)
    assert status.pending[0].escalated_at is not None
    assert 4 <= (status.pending[0].escalated_at - asked_at).total_seconds() < 8
    await run.answer(AnswerInput(step_id="ask", answer="go", by="farid"))
    assert (await run.result()).outputs["ask"] == "go"
    ledger = await run.ledger()
    assert [e.kind for e in ledger.events].count(EventKind.decision_escalated) == 1
