"""Quorum and four eyes as plain rules (issue #38, item 5): which quorums plan validation and a
start refuse, who counts as the same person, what a revision may not loosen, and the words people
read about a pending approval.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from stratagem.common.errors import PlanValidationError
from stratagem.domain.catalog import ToolCatalog
from stratagem.domain.decisions import loosened, quorum
from stratagem.domain.plan import Author, AuthorKind, Plan, PlanDraft
from stratagem.domain.quorum import person
from stratagem.domain.risk import risk_label
from stratagem.domain.run_types import DecisionKind, PendingDecision, RunInput, RunOptions
from stratagem.domain.validation import plan_problems, validate_plan

pytestmark = pytest.mark.unit

PAY = {"id": "pay", "title": "Pay", "tool": "record", "args": {"label": "pay"}}


def _draft(**fields) -> PlanDraft:
    return PlanDraft.model_validate({"goal": "pay", "steps": [PAY | fields]})


def _problems(draft: PlanDraft, **rules) -> list[str]:
    """The plan's problems but its tool's, which no catalogue here describes."""
    return [p for p in plan_problems(draft, ToolCatalog(), **rules) if "unknown tool" not in p]


def test_a_step_quorum_more_people_than_may_approve_it_is_refused():
    with pytest.raises(PlanValidationError, match=r"quorum 3 but only 2 may approve step 'pay' \(dana, lee\)"):
        validate_plan(
            _draft(quorum=3, approvers=["finance"]), ToolCatalog(), groups={"finance": ["dana", "lee", "Dana"]}
        )
    # Within the run's list: of the group, only lee may decide at all.
    problems = _problems(
        _draft(quorum=2, approvers=["finance"]), approvers=["lee", "kim"], groups={"finance": ["dana", "lee"]}
    )
    assert problems == ["quorum 2 but only 1 may approve step 'pay' (lee)"]
    # Nobody's list: anyone may, so any quorum can be reached.
    assert _problems(_draft(quorum=5)) == []


def test_a_run_that_approves_itself_may_not_need_more_than_one_person():
    [problem] = _problems(_draft(quorum=2), auto_approve=True)
    assert problem.startswith("step 'pay' needs a quorum of 2, but the run approves itself (auto_approve)")
    assert _problems(_draft(four_eyes=True), auto_approve=True)
    with pytest.raises(ValidationError, match="auto_approve approves alone"):
        RunInput(plan=_draft(), options=RunOptions(auto_approve=True, quorum=2))
    with pytest.raises(ValidationError, match="auto_approve approves alone"):
        RunInput(plan=_draft(), options=RunOptions(auto_approve=True, four_eyes=True))
    with pytest.raises(ValidationError, match="replan_requires_approval is off"):
        RunInput(plan=_draft(), options=RunOptions(quorum=2, replan_requires_approval=False))


def test_a_plan_quorum_more_people_than_the_approver_list_is_refused_at_start():
    with pytest.raises(ValidationError, match=r"quorum 3 but only 2 may approve the plan \(dana, lee\)"):
        RunInput(plan=_draft(), options=RunOptions(quorum=3, approvers=["dana", "lee"]))
    with pytest.raises(ValidationError, match="quorum 2 but only 1 may approve"):
        RunInput(plan=_draft(), options=RunOptions(quorum=2, approvers=["dana", "DANA"]))
    RunInput(plan=_draft(), options=RunOptions(approvers=[]))  # a quorum of one says nothing of the list
    # Four eyes bars the starter, who then is not one of those who may.
    with pytest.raises(ValidationError, match=r"only 1 may approve the plan \(lee\); four eyes bars dana"):
        RunInput(
            plan=_draft(), started_by="dana", options=RunOptions(quorum=2, four_eyes=True, approvers=["dana", "lee"])
        )
    RunInput(plan=_draft(), started_by="dana", options=RunOptions(quorum=2, approvers=["dana", "lee"]))
    with pytest.raises(ValidationError):
        RunOptions(quorum=0)


def test_a_quorum_or_four_eyes_makes_a_step_wait_for_approval():
    assert _draft(quorum=2).steps[0].needs_step_approval
    assert _draft(four_eyes=True).steps[0].needs_step_approval
    assert not _draft(quorum=1).steps[0].needs_step_approval


def test_a_reviewer_reads_the_quorum_and_four_eyes_beside_the_risk():
    step = _draft(quorum=2, four_eyes=True, approvers=["finance"]).steps[0]
    assert risk_label(step, ToolCatalog()) == "low · approval by finance · 2 people · four eyes"


def test_spellings_of_one_name_are_one_person():
    assert person("Dana") == person("dana") == person(" DANA ") == person("ｄａｎａ")
    assert person("dana") != person("dan")


def test_a_revision_may_not_lower_a_quorum_or_drop_four_eyes_without_a_person():
    author = Author(kind=AuthorKind.model, name="scripted:x")
    before = Plan.from_draft(_draft(quorum=2, four_eyes=True), revision=1, author=author)
    after = Plan.from_draft(_draft(quorum=1), revision=2, author=author)
    assert "step 'pay' quorum lowered from 2 to 1" in loosened(before, after)
    assert "step 'pay' no longer needs four eyes" in loosened(before, after)


def test_what_people_read_about_a_pending_approval():
    pending = PendingDecision(
        kind=DecisionKind.step_approval,
        revision=1,
        since=datetime(2026, 11, 27, tzinfo=UTC),
        step_id="pay",
        quorum=3,
        approved_by=["dana"],
        may_approve=["lee", "kim"],
        barred={"bob": "started the run"},
    )
    assert quorum.progress(pending) == (
        "approved by dana (1 of 3), waiting for 2 more of lee, kim; four eyes: not bob (started the run)"
    )
    pending.approved_by, pending.may_approve = [], None
    assert quorum.progress(pending) == (
        "no approval yet (0 of 3), waiting for 3 more from anyone else allowed; four eyes: not bob (started the run)"
    )
    assert quorum.progress(PendingDecision(kind=DecisionKind.plan_approval, revision=1, since=pending.since)) is None
