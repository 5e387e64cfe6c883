"""Scheduling: which steps are ready, the plan's sinks, and laying a revision over what already ran."""

from __future__ import annotations

from typing import Any

import pytest

from stratagem.domain.ledger import Ledger, StepRecord, StepStatus
from stratagem.domain.plan import Author, AuthorKind, Plan, PlanDraft
from stratagem.domain.scheduling import all_succeeded, ready_steps, reconcile, sink_steps

pytestmark = pytest.mark.unit


def step(step_id: str, *deps: str, **fields: Any) -> dict[str, Any]:
    data: dict[str, Any] = {"id": step_id, "title": step_id.upper(), "tool": "add", "args": {"a": 1, "b": 2}}
    data.update(fields)
    data["depends_on"] = list(deps)
    return data


def draft(*steps: dict[str, Any], goal: str = "goal", reason: str = "") -> PlanDraft:
    return PlanDraft.model_validate({"goal": goal, "steps": list(steps), "reason": reason})


def records(**statuses: StepStatus) -> dict[str, StepRecord]:
    return {
        sid: StepRecord(
            step_id=sid, status=status, revision=1, output=f"out-{sid}" if status is StepStatus.succeeded else None
        )
        for sid, status in statuses.items()
    }


def ledger(**statuses: StepStatus) -> Ledger:
    return Ledger(run_id="run-1", steps=records(**statuses))


S = StepStatus


# --- ready_steps --------------------------------------------------------------------------------


def test_ready_steps_are_pending_steps_whose_dependencies_all_succeeded() -> None:
    plan = draft(
        step("root"),
        step("child", "root"),
        step("join", "root", "child"),
        step("free"),
        step("busy"),
        step("after_failure", "broken"),
        step("broken"),
        step("done"),
    )
    state = ledger(
        root=S.succeeded,
        child=S.pending,
        join=S.pending,
        free=S.pending,
        busy=S.running,
        after_failure=S.pending,
        broken=S.failed,
        done=S.succeeded,
    )
    assert [s.id for s in ready_steps(plan, state)] == ["child", "free"]


def test_ready_steps_follow_plan_order_and_progress() -> None:
    plan = draft(step("b", "a"), step("a"), step("c", "a", "b"))
    state = ledger(a=S.pending, b=S.pending, c=S.pending)
    assert [s.id for s in ready_steps(plan, state)] == ["a"]
    state.steps["a"].status = S.succeeded
    assert [s.id for s in ready_steps(plan, state)] == ["b"]
    state.steps["b"].status = S.succeeded
    assert [s.id for s in ready_steps(plan, state)] == ["c"]
    state.steps["c"].status = S.succeeded
    assert ready_steps(plan, state) == []


def test_step_without_a_record_or_with_an_unrecorded_dependency_is_not_ready() -> None:
    plan = draft(step("a"), step("b", "a"))
    assert ready_steps(plan, ledger()) == []
    assert ready_steps(plan, ledger(b=S.pending)) == []


def test_skipped_dependency_blocks_a_step() -> None:
    plan = draft(step("a"), step("b", "a"))
    assert ready_steps(plan, ledger(a=S.skipped, b=S.pending)) == []


def test_all_succeeded() -> None:
    plan = draft(step("a"), step("b", "a"))
    assert all_succeeded(plan, ledger(a=S.succeeded, b=S.succeeded)) is True
    assert all_succeeded(plan, ledger(a=S.succeeded, b=S.skipped)) is False


def test_ledger_outputs_hold_only_succeeded_steps() -> None:
    state = ledger(a=S.succeeded, b=S.failed, c=S.pending)
    assert state.outputs() == {"a": "out-a"}


def test_add_revision_creates_records_only_for_new_steps() -> None:
    state = ledger(a=S.succeeded)
    author = Author(kind=AuthorKind.human, name="alice")
    state.add_revision(Plan.from_draft(draft(step("a"), step("b", "a")), revision=2, author=author))
    assert state.steps["a"].status is S.succeeded
    assert state.steps["a"].output == "out-a"
    assert state.steps["b"].status is S.pending
    assert state.revision(2).step_ids == ["a", "b"]


# --- sink_steps ---------------------------------------------------------------------------------


def test_sink_steps_of_a_diamond() -> None:
    plan = draft(step("a"), step("b", "a"), step("c", "a"), step("d", "b", "c"))
    assert sink_steps(plan) == ["d"]


def test_sink_steps_of_independent_chains_in_plan_order() -> None:
    plan = draft(step("x2", "x1"), step("y1"), step("x1"), step("y2", "y1"), step("lone"))
    assert sink_steps(plan) == ["x2", "y2", "lone"]


# --- reconcile ----------------------------------------------------------------------------------


def test_succeeded_step_omitted_from_the_draft_is_carried() -> None:
    current = draft(step("fetch"), step("send", "fetch"))
    revised = draft(
        step("send_again", "fetch", args={"a": "${fetch}", "b": 1}), goal="new goal", reason="retry differently"
    )
    result = reconcile(current, revised, records(fetch=S.succeeded, send=S.failed))
    assert result.problems == []
    assert result.carried == ["fetch"]
    assert result.draft.step_ids == ["fetch", "send_again"]
    assert result.draft.step("fetch") == current.step("fetch")
    assert (result.draft.goal, result.draft.reason) == ("new goal", "retry differently")
    assert result.dropped == ["send"]
    assert result.retried == []


def test_nothing_carried_leaves_the_draft_as_it_was() -> None:
    current = draft(step("a"), step("b", "a"))
    revised = draft(step("a"), step("c", "a"))
    result = reconcile(current, revised, records(a=S.succeeded, b=S.pending))
    assert result.draft is revised
    assert result.carried == []


def test_changed_args_of_a_succeeded_step_is_a_problem() -> None:
    current = draft(step("a"))
    revised = draft(step("a", args={"a": 5, "b": 2}))
    result = reconcile(current, revised, records(a=S.succeeded))
    assert result.problems == [
        "step 'a' already succeeded (revision 1) and cannot be changed; "
        "keep it as it was, or add a step with a new id to do the work again"
    ]


def test_changed_instructions_tool_kind_or_output_format_of_a_succeeded_step_are_problems() -> None:
    current = draft(step("a"), step("b"), step("c"), step("d", kind="llm", tool=None, args={}, instructions="do"))
    revised = draft(
        step("a", instructions="now with care"),
        step("b", tool="greet"),
        step("c", kind="human", tool=None, args={}, instructions="ask"),
        step("d", kind="llm", tool=None, args={}, instructions="do", output_format="json"),
    )
    result = reconcile(current, revised, records(a=S.succeeded, b=S.succeeded, c=S.succeeded, d=S.succeeded))
    assert len(result.problems) == 4
    for sid, problem in zip("abcd", result.problems, strict=False):
        assert problem.startswith(f"step '{sid}' already succeeded")
        assert "a new id" in problem


def test_succeeded_step_changed_only_in_title_and_bookkeeping_is_fine() -> None:
    current = draft(step("a"), step("b", "a"))
    revised = draft(
        step("a", title="A better title", success_criteria=["sum is 3"], risk="medium"),
        step("b2", "a"),
    )
    result = reconcile(current, revised, records(a=S.succeeded, b=S.failed))
    assert result.problems == []
    assert result.carried == []


def test_pending_and_failed_steps_dropped_are_listed_but_finished_ones_are_not() -> None:
    current = draft(step("p"), step("f"), step("c"), step("s"), step("k"), step("norecord"))
    revised = draft(step("new"))
    result = reconcile(current, revised, records(p=S.pending, f=S.failed, c=S.cancelled, s=S.succeeded, k=S.skipped))
    assert result.dropped == ["p", "f", "c"]
    assert result.carried == ["s"]
    assert result.draft.step_ids == ["s", "new"]


def test_failed_and_cancelled_steps_kept_are_retried() -> None:
    current = draft(step("f"), step("c"), step("p"))
    revised = draft(step("f", args={"a": 9, "b": 9}), step("c"), step("p"))
    result = reconcile(current, revised, records(f=S.failed, c=S.cancelled, p=S.pending))
    assert result.retried == ["f", "c"]
    assert result.dropped == []
    assert result.problems == []


def test_skipped_step_brought_back_runs_again() -> None:
    # Revision 2 dropped 'b' (so it was marked skipped); revision 3 brings it back. Unless it is
    # reset, it would stay skipped and the run could never finish.
    current = draft(step("a"))
    revised = draft(step("a"), step("b", "a"))
    result = reconcile(current, revised, records(a=S.succeeded, b=S.skipped))
    assert result.retried == ["b"]
    assert result.problems == []


def test_new_steps_are_fine_and_not_listed() -> None:
    current = draft(step("a"))
    revised = draft(step("a"), step("b", "a"), step("c", "b"))
    result = reconcile(current, revised, records(a=S.succeeded))
    assert (result.carried, result.dropped, result.retried, result.problems) == ([], [], [], [])
    assert result.draft is revised


def test_first_plan_has_nothing_to_reconcile() -> None:
    revised = draft(step("a"))
    result = reconcile(None, revised, {})
    assert (result.carried, result.dropped, result.retried, result.problems) == ([], [], [], [])
    assert result.draft is revised


def test_the_frontier_agrees_with_a_full_rescan_at_every_point_of_a_run() -> None:
    import random

    from stratagem.domain.scheduling import Frontier

    rng = random.Random(11)
    for _ in range(20):
        ids = [f"s{i}" for i in range(30)]
        plan = draft(*(step(sid, *rng.sample(ids[:n], k=min(n, rng.randint(0, 3)))) for n, sid in enumerate(ids)))
        state = ledger(**{sid: S.pending for sid in ids})
        frontier = Frontier(plan, state)
        while True:
            expected = [s.id for s in ready_steps(plan, state)]
            assert [s.id for s in frontier.ready()] == expected
            if not expected:
                break
            chosen = rng.choice(expected)
            state.steps[chosen].status = S.running
            assert chosen not in [s.id for s in frontier.ready()]  # running is not ready
            outcome = rng.choice([S.succeeded, S.succeeded, S.succeeded, S.pending])  # pending: handed back
            state.steps[chosen].status = outcome
            if outcome is S.succeeded:
                frontier.succeeded(chosen)
        assert all_succeeded(plan, state)


def test_outputs_are_a_live_view_of_succeeded_steps() -> None:
    state = ledger(a=S.succeeded, b=S.failed, c=S.pending)
    outputs = state.outputs()
    assert dict(outputs) == {"a": "out-a"} and "b" not in outputs and outputs.get("c") is None
    state.steps["c"].status, state.steps["c"].output = S.succeeded, "late"
    assert outputs["c"] == "late" and len(outputs) == 2
