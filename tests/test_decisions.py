"""Decision rules on a hand-built RunState: what a run refuses, with which message, and what it records."""

from __future__ import annotations

from typing import Any

import pytest
from support.states import NOW, draft, make_state, tool_step

from stratagem.common.errors import DecisionRefusedError
from stratagem.domain import decisions, repairs
from stratagem.domain.ledger import DecisionAction, EventKind, StepStatus
from stratagem.domain.plan import Author, AuthorKind, Plan, Step
from stratagem.domain.run_types import (
    AnswerInput,
    ApproveInput,
    DecisionKind,
    PendingDecision,
    Phase,
    RejectInput,
    RepairAction,
    RepairInput,
    ReviseInput,
    RunState,
)

pytestmark = pytest.mark.unit


def pending(kind: DecisionKind, step_id: str | None) -> PendingDecision:
    return PendingDecision(kind=kind, revision=1, since=NOW, step_id=step_id)


def refused(check: Any, state: RunState, decision: Any) -> str:
    with pytest.raises(DecisionRefusedError) as info:
        check(state, decision)
    return str(info.value)


# --- checks -------------------------------------------------------------------------------------


def test_a_plan_awaiting_approval_takes_an_approve_or_a_reject() -> None:
    state = make_state()
    decisions.check_approve(state, ApproveInput(by="bob"))
    decisions.check_approve(state, ApproveInput(by="bob", revision=1))
    decisions.check_reject(state, RejectInput(by="bob", reason="no", revision=1))


def test_a_stale_revision_is_refused() -> None:
    state = make_state(revisions=2)
    expected = "revision 1 is stale: the current plan is revision 2"
    assert refused(decisions.check_approve, state, ApproveInput(by="bob", revision=1)) == expected
    assert refused(decisions.check_reject, state, RejectInput(by="bob", reason="no", revision=1)) == expected
    assert (
        refused(decisions.check_revise, state, ReviseInput(by="bob", plan=draft(tool_step("a")), revision=1))
        == expected
    )


def test_a_finished_run_takes_no_decisions() -> None:
    state = make_state(phase=Phase.succeeded)
    expected = "run run-1 has finished (succeeded); it takes no decisions"
    assert refused(decisions.check_approve, state, ApproveInput(by="bob")) == expected
    assert refused(decisions.check_answer, state, AnswerInput(step_id="first", answer=1, by="bob")) == expected
    assert refused(decisions.check_revise, state, ReviseInput(by="bob", plan=draft(tool_step("a")))) == expected


def test_no_plan_approval_outside_review() -> None:
    state = make_state(phase=Phase.running)
    assert refused(decisions.check_approve, state, ApproveInput(by="bob")) == (
        "no plan is waiting for approval (the run is running)"
    )


def test_a_step_must_be_waiting_for_approval() -> None:
    state = make_state(phase=Phase.running)
    message = refused(decisions.check_reject, state, RejectInput(by="bob", reason="no", step_id="second"))
    assert message == "step 'second' is not waiting for approval"
    state.pending = [pending(DecisionKind.step_approval, "second")]
    decisions.check_approve(state, ApproveInput(by="bob", step_id="second"))
    decisions.check_reject(state, RejectInput(by="bob", reason="no", step_id="second"))


def test_a_step_must_be_waiting_for_an_answer() -> None:
    state = make_state(phase=Phase.running)
    state.pending = [pending(DecisionKind.step_approval, "first")]  # waiting, but for an approval
    answer = AnswerInput(step_id="first", answer="yes", by="bob")
    assert refused(decisions.check_answer, state, answer) == "step 'first' is not waiting for an answer"
    state.pending.append(pending(DecisionKind.human_answer, "first"))
    decisions.check_answer(state, answer)


def test_revise_during_review_repair_or_running_but_not_a_running_step() -> None:
    state = make_state(phase=Phase.replanning)
    state.level = 4
    assert refused(decisions.check_revise, state, ReviseInput(by="bob", plan=draft(tool_step("a")))) == (
        "a plan can only be revised while it awaits approval, runs or waits for a repair (the run is replanning)"
    )
    # A run from before level 4 ignored a revise signal while running; it still must, to replay.
    state = make_state(phase=Phase.running)
    assert refused(decisions.check_revise, state, ReviseInput(by="bob", plan=draft(tool_step("a")))) == (
        "a plan can only be revised while it awaits approval or a repair (the run is running)"
    )
    state.level = 4
    state.ledger.steps["first"].status = StepStatus.running
    changed = draft(tool_step("first", "other"), tool_step("second"))
    assert refused(decisions.check_revise, state, ReviseInput(by="bob", plan=changed)) == (
        "step 'first' is running and cannot be changed until it finishes"
    )
    assert refused(decisions.check_revise, state, ReviseInput(by="bob", plan=draft(tool_step("second")))) == (
        "step 'first' is running and cannot be dropped until it finishes"
    )
    decisions.check_revise(state, ReviseInput(by="bob", plan=draft(tool_step("first"), tool_step("second", "y"))))
    state.phase = Phase.awaiting_repair
    decisions.check_revise(state, ReviseInput(by="bob", plan=changed))


def test_an_invalid_revised_plan_is_refused_with_its_problems() -> None:
    state = make_state()
    bad = draft({"id": "a", "title": "a", "tool": "nope"})
    assert refused(decisions.check_revise, state, ReviseInput(by="bob", plan=bad)) == (
        "the revised plan is invalid: step 'a' uses unknown tool 'nope' (available: record)"
    )


def test_a_revision_may_not_change_a_step_that_already_succeeded() -> None:
    state = make_state()
    state.ledger.steps["first"].status, state.ledger.steps["first"].revision = StepStatus.succeeded, 1
    message = refused(decisions.check_revise, state, ReviseInput(by="bob", plan=draft(tool_step("first", "changed"))))
    assert message.startswith(
        "the revised plan is invalid: step 'first' already succeeded (revision 1) and cannot be changed"
    )
    decisions.check_revise(state, ReviseInput(by="bob", plan=draft(tool_step("third"))))  # omitting it carries it


def test_llm_steps_in_a_revision_need_an_executor() -> None:
    revision = ReviseInput(by="bob", plan=draft({"id": "a", "title": "a", "kind": "llm", "instructions": "write"}))
    assert "the run has no executor model" in refused(decisions.check_revise, make_state(), revision)
    decisions.check_revise(make_state(executor="scripted:x.yaml"), revision)


# --- applying -----------------------------------------------------------------------------------


def test_approving_the_plan_starts_the_run() -> None:
    state = make_state()
    state.pending = [decisions.plan_approval_request(state, NOW)]
    assert state.pending[0].prompt == "approve revision 1 (2 steps)"
    decisions.approve_plan(state, ApproveInput(by="bob", comment="ok"), via="signal", now=NOW)
    assert (state.phase, state.approved_revision, state.pending) == (Phase.running, 1, [])
    [decision] = state.ledger.decisions
    assert (decision.action, decision.by, decision.at, decision.via) == (DecisionAction.approve, "bob", NOW, "signal")
    assert state.ledger.events[-1].kind is EventKind.plan_approved and state.ledger.auto_approved is False
    assert decisions.outcome(state, "approved").phase is Phase.running


def test_a_step_rejection_says_why_the_run_stops() -> None:
    state = make_state(phase=Phase.running)
    decisions.request_step_approval(state, state.plan.steps[1], NOW)
    decisions.request_step_approval(state, state.plan.steps[1], NOW)  # already asked: not asked twice
    assert [p.step_id for p in state.pending] == ["second"]
    assert decisions.decide_step(state, ApproveInput(by="auto_approve", step_id="first"), via="auto", now=NOW) is None
    why = decisions.decide_step(
        state, RejectInput(by="cfo", reason="too costly", step_id="second"), via="update", now=NOW
    )
    assert why == "step 'second' rejected by cfo: too costly"
    assert state.step_approvals == {"first": True, "second": False} and state.ledger.auto_approved is True
    decisions.remove_pending(state, "second")
    assert state.pending == []


def test_a_revision_keeps_an_escalation_visible() -> None:
    state = make_state()
    state.pending = [decisions.plan_approval_request(state, NOW)]
    state.pending[0].escalated = True
    new = Plan.from_draft(
        draft(tool_step("a")), revision=2, author=Author(kind=AuthorKind.human, name="bob"), reason="edit"
    )
    state.ledger.add_revision(new)
    decisions.record_revision(state, ReviseInput(by="bob", plan=draft(tool_step("a"))), new, via="update", now=NOW)
    assert [(p.revision, p.escalated) for p in state.pending] == [(2, True)]
    assert state.ledger.decisions[-1].action is DecisionAction.revise


def test_an_answer_waits_for_its_step() -> None:
    state = make_state(phase=Phase.running)
    asked = decisions.request_answer(state, "first", "which colour?", NOW)
    assert decisions.pending_for(state, DecisionKind.human_answer, "first") is asked
    decisions.record_answer(state, AnswerInput(step_id="first", answer="blue", by="ann"), NOW)
    assert state.answers == {"first": "blue"} and state.ledger.events[-1].kind is EventKind.answer_received


# --- what a replan approved by policy may not change ----------------------------------------------


def _plan(revision: int, *steps: dict) -> Plan:
    return Plan(
        goal="g", steps=[Step(**s) for s in steps], revision=revision, author=Author(kind=AuthorKind.model, name="m")
    )


@pytest.mark.parametrize(
    "before, after, expected",
    [
        ({"risk": "high"}, {"risk": "medium"}, "risk lowered from high to medium"),
        ({"requires_approval": True}, {"requires_approval": False}, "no longer requires approval"),
        (
            {"kind": "llm", "tools": ["read_file"]},
            {"kind": "llm", "tools": ["read_file", "http_request"]},
            "may now call http_request",
        ),
        ({"risk": "high", "args": {"to": "a"}}, {"risk": "high", "args": {"to": "b"}}, "what it does changed"),
        ({"args": {"to": "a"}}, {"risk": "high", "args": {"to": "b"}}, "what it does changed"),
        ({"approvers": ["finance"]}, {}, "changes who may approve it (finance)"),
    ],
)
def test_a_loosening_revision_is_named(before, after, expected):
    base = {"id": "s", "title": "s", "tool": "record"}
    kinds = lambda d: {**base, **d, **({"tool": None, "instructions": "do"} if d.get("kind") == "llm" else {})}  # noqa: E731
    changes = decisions.loosened(_plan(1, kinds(before)), _plan(2, kinds(after)))
    assert len(changes) == 1 and expected in changes[0]


def test_a_replan_cannot_loosen_an_answer_schema_unseen():
    ask = {"id": "q", "title": "q", "kind": "human", "instructions": "?", "answer_schema": {"type": "integer"}}
    changes = decisions.loosened(_plan(1, ask), _plan(2, {**ask, "answer_schema": None}))
    assert changes == ["step 'q' changes what its answer must look like"]


def test_tightening_or_plain_changes_pass():
    base = {"id": "s", "title": "s", "tool": "record", "args": {"x": 1}}
    assert decisions.loosened(_plan(1, base), _plan(2, {**base, "risk": "high"})) == []
    assert decisions.loosened(_plan(1, base), _plan(2, {**base, "args": {"x": 2}})) == []  # not gated
    assert (
        decisions.loosened(
            _plan(1, base), _plan(2, base, {"id": "new", "title": "n", "tool": "record", "risk": "high"})
        )
        == []
    )


def test_plan_changes_and_the_step_approvals_a_revision_keeps() -> None:
    state = make_state(revisions=1)
    before = state.plan
    after = Plan.from_draft(
        draft(tool_step("first"), tool_step("second", "new"), tool_step("third")),
        revision=2,
        author=Author(kind=AuthorKind.human, name="ann"),
    )
    assert decisions.plan_changes(before, after) == {"added": ["third"], "changed": ["second"], "removed": []}
    state.step_approvals = {"first": True, "second": True}
    assert decisions.kept_step_approvals(state, before, after) == {"first": True}
    # A step that ran on its approval and failed is asked again before it runs again.
    assert decisions.kept_step_approvals(state, before, after, retried=["first"]) == {}
    state.step_approvals = {"first": False}  # a rejection is never carried: the step is asked again
    assert decisions.kept_step_approvals(state, before, after) == {}


def test_a_repair_names_a_failed_step_and_fits_it() -> None:
    state = make_state(phase=Phase.awaiting_repair, revisions=2)
    state.approved_revision = 2
    state.ledger.steps["first"].status = StepStatus.failed
    assert repairs.failed_steps(state) == ["first"]
    retry = RepairInput(by="bob", action=RepairAction.retry, step_id="second")
    assert refused(repairs.check_repair, state, retry) == "step 'second' did not fail; the failed steps are: first"
    assert (
        refused(repairs.check_repair, state, RepairInput(by="bob", action=RepairAction.skip))
        == "skip needs the failed step it applies to"
    )
    bad_args = RepairInput(by="bob", action=RepairAction.retry, step_id="first", args={"label": "${second}"})
    assert refused(repairs.check_repair, state, bad_args).startswith("the new arguments are refused")
    both = RepairInput(by="bob", action=RepairAction.skip, step_id="first", output="x", args={"label": "y"})
    assert "a skip takes the step's output, not arguments" in refused(repairs.check_repair, state, both)
    repairs.check_repair(state, RepairInput(by="bob", action=RepairAction.stop))

    assert (
        repairs.apply_repair(
            state, RepairInput(by="bob", action=RepairAction.skip, step_id="first", output="o"), via="update", now=NOW
        )
        is None
    )
    assert state.phase is Phase.running and state.ledger.steps["first"].output == "o"
    # Had revision 2 been made while the run ran and not approved yet, it is reviewed first.
    state.phase, state.approved_revision = Phase.awaiting_repair, 1
    state.ledger.steps["first"].status = StepStatus.failed
    repairs.apply_repair(
        state, RepairInput(by="bob", action=RepairAction.retry, step_id="first"), via="update", now=NOW
    )
    assert state.phase is Phase.awaiting_approval
    state.phase = Phase.running
    assert refused(repairs.check_repair, state, retry) == "the run is not waiting for a repair (it is running)"


def test_a_steps_approvers_expand_groups_and_narrow_the_runs_list() -> None:
    state = make_state(phase=Phase.running)
    state.options.approver_groups = {"finance": ["dana", "lee"]}
    state.options.approvers = ["dana", "bob"]
    state.ledger.revisions[-1] = Plan.from_draft(
        draft({**tool_step("first"), "approvers": ["finance", "kim"]}, tool_step("second")),
        revision=1,
        author=Author(kind=AuthorKind.human, name="ann"),
    )
    assert decisions.step_approvers(state, "first") == ["dana", "lee", "kim"]
    assert decisions.step_approvers(state, "second") is None
    state.pending = [pending(DecisionKind.step_approval, "first")]
    decisions.check_approve(state, ApproveInput(by="dana", step_id="first"))
    assert "bob may not decide on step 'first'" in refused(
        decisions.check_approve, state, ApproveInput(by="bob", step_id="first")
    )
    assert "not on this run's approver list" in refused(
        decisions.check_approve, state, ApproveInput(by="lee", step_id="first")
    )


def test_a_step_that_names_approvers_takes_its_answer_from_them_only() -> None:
    state = make_state(phase=Phase.running)
    state.ledger.revisions[-1] = Plan.from_draft(
        draft({"id": "first", "title": "q", "kind": "human", "instructions": "?", "approvers": ["dana"]}),
        revision=1,
        author=Author(kind=AuthorKind.human, name="ann"),
    )
    state.pending = [pending(DecisionKind.human_answer, "first")]
    message = refused(decisions.check_answer, state, AnswerInput(step_id="first", answer="x", by="bob"))
    assert message == "bob may not decide on step 'first': its approvers are dana"
    decisions.check_answer(state, AnswerInput(step_id="first", answer="x", by="dana"))
