"""Compensation (issue #41, item 2) on the time-skipping server: a run that ends without its goal
after effects ran undoes them, in reverse dependency order, as a revision reviewed like any other.

The tools (tests/support/compensation_tools.py) write every call to calls.jsonl with its start
and end, so each test proves which effects happened and in which order they were undone; the
ledger says what the run decided.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import support
from conftest import harness_for
from support.signing import send_signed
from temporalio.client import WorkflowFailureError

from stratagem.domain.ledger import EventKind, StepStatus
from stratagem.domain.ledger_events import CompensationPlanned
from stratagem.domain.run_types import (
    ApproveInput,
    DecisionKind,
    Phase,
    RejectInput,
    RepairAction,
    RepairInput,
    ReviseInput,
)
from stratagem.tools.registry import ToolRegistry

pytestmark = pytest.mark.workflow

TOOLS = str(Path(support.__file__).parent / "compensation_tools.py")


def booking(sid: str, depends_on: list[str] | None = None, seconds: float = 0.01, **extra: object) -> dict:
    return {
        "id": sid,
        "title": f"book {sid}",
        "tool": "book",
        "args": {"slot": sid, "seconds": seconds},
        "depends_on": depends_on or [],
        **extra,
    }


def failing(sid: str, depends_on: list[str]) -> dict:
    return {"id": sid, "title": sid, "tool": "fail", "args": {"reason": f"{sid} broke"}, "depends_on": depends_on}


# A -> (B, C) -> D, where D fails for good; an email after A that nothing undoes; a read-only look-up.
DIAMOND = {
    "goal": "book a trip",
    "steps": [
        booking("a"),
        booking("b", ["a"], seconds=0.5),
        booking("c", ["a"], seconds=0.5),
        {"id": "email", "title": "tell them", "tool": "send_email", "args": {"to": "ada"}, "depends_on": ["a"]},
        {"id": "look", "title": "look", "tool": "look_up", "args": {"slot": "a"}},
        failing("d", ["b", "c"]),
        booking("never", ["d"]),
    ],
}


@pytest.fixture
async def comp(time_env, tmp_path):
    async with harness_for(time_env, tmp_path, ToolRegistry.from_modules([TOOLS])) as h:
        yield h


def calls(harness, tool: str) -> list[dict]:
    return [c for c in harness.calls() if c["tool"] == tool]


def waits_for(kind: DecisionKind, step_id: str | None = None):
    return lambda s: any(p.kind is kind and (step_id is None or p.step_id == step_id) for p in s.pending)


async def test_a_failure_undoes_a_diamond_in_reverse_dependency_order_after_a_person_approves(comp):
    run = await comp.start(DIAMOND, on_failure="compensate", approvers=["dana"])
    await comp.wait_for(run, lambda s: s.phase is Phase.awaiting_approval)
    await run.approve(ApproveInput(by="dana", revision=1))
    status = await comp.wait_for(run, lambda s: s.phase is Phase.awaiting_approval and s.revision == 2)
    # The review names what is undone and what stays; nothing was undone before it is approved.
    prompt = status.pending[0].prompt
    assert prompt.startswith("undo 3 effects of a run that ends without its goal (step 'd' failed")
    assert "these stay: email" in prompt
    assert calls(comp, "unbook") == []
    plan = await run.plan()
    assert plan is not None
    undos = {s.id: s for s in plan.steps if s.id.startswith("undo-")}
    assert set(undos) == {"undo-a", "undo-b", "undo-c"}
    assert sorted(undos["undo-a"].depends_on) == ["a", "undo-b", "undo-c"]
    assert undos["undo-b"].depends_on == ["b"] and undos["undo-c"].depends_on == ["c"]
    # Shown to the approver as it runs: the output of b itself, not a reference to it.
    b_output = (await run.ledger()).steps["b"].output
    assert b_output and undos["undo-b"].args == {"slot": "b", "seconds": 0.5, "original_output": b_output}
    # The failed and never-run steps left the revision; the succeeded ones are kept, not run again.
    assert {"d", "never"}.isdisjoint(plan.step_ids) and {"a", "b", "c", "email", "look"} <= set(plan.step_ids)

    await run.approve(ApproveInput(by="dana", revision=2))
    result = await run.result()
    assert result.status is Phase.compensated
    assert result.reason is not None and "undone: a, b, c; these stay: email" in result.reason
    assert len(calls(comp, "book")) == 3  # nothing ran twice
    undone = {c["slot"]: c for c in calls(comp, "unbook")}
    assert {s: c["booking"] for s, c in undone.items()} == {"a": "B-a", "b": "B-b", "c": "B-c"}
    b, c, a = undone["b"], undone["c"], undone["a"]
    assert b["start"] < c["end"] and c["start"] < b["end"], "the independent undos ran side by side"
    assert a["start"] >= max(b["end"], c["end"]), "a is undone only after what was built on it"

    ledger = await run.ledger()
    planned = next(e for e in ledger.events if e.kind is EventKind.compensation_planned)
    data = planned.details_as(CompensationPlanned)
    assert data.undos == {"undo-a": "a", "undo-b": "b", "undo-c": "c"} and data.cannot_undo == ["email"]
    assert ledger.events[-1].kind is EventKind.run_compensated
    assert ledger.steps["d"].status is StepStatus.failed  # its record stays
    assert ledger.steps["never"].status is StepStatus.skipped
    memo = await (await run.handle.describe()).memo()
    assert memo["phase"] == "compensated"
    assert (await run.status()).phase is Phase.compensated


async def test_auto_approve_compensates_with_a_plan_level_undo_that_reads_its_own_output(comp):
    plan = {
        "goal": "order a part",
        "steps": [
            {
                "id": "order",
                "title": "order",
                "tool": "place_order",
                "args": {"item": "bolt"},
                "compensate": {"tool": "cancel_order", "args": {"order": "${order.id}", "note": "run gave up"}},
            },
            failing("ship", ["order"]),
        ],
    }
    run = await comp.start(plan, on_failure="compensate", auto_approve=True)
    result = await run.result()
    assert result.status is Phase.compensated
    assert calls(comp, "cancel_order") == [
        {"tool": "cancel_order", "order": "O-bolt", "note": "run gave up", "step": "undo-order", "attempt": 1}
    ]
    ledger = await run.ledger()
    approvals = [e for e in ledger.events if e.kind is EventKind.plan_approved]
    assert [(e.revision, e.actor) for e in approvals] == [(1, "auto_approve"), (2, "auto_approve")]


async def test_a_person_compensates_at_a_repair_and_someone_not_on_the_list_cannot(comp):
    run = await comp.start(
        {"goal": "book", "steps": [booking("a"), failing("d", ["a"])]}, approvers=["dana"], on_failure="repair"
    )
    await comp.wait_for(run, lambda s: s.phase is Phase.awaiting_approval)
    await run.approve(ApproveInput(by="dana", revision=1))
    await comp.wait_for(run, lambda s: s.phase is Phase.awaiting_repair)
    # An attacker's compensate is refused, and nothing is undone.
    with pytest.raises(Exception, match="mallory"):
        await run.repair(RepairInput(by="mallory", action=RepairAction.compensate, reason="undo it all"))
    await send_signed(run, "repair_signal", RepairInput(by="mallory", action=RepairAction.compensate))
    ignored = None
    for _ in range(200):  # a signal is applied, or recorded as ignored, on the run's next task
        ledger = await run.ledger()
        ignored = next((e for e in ledger.events if e.kind is EventKind.signal_ignored), None)
        if ignored is not None:
            break
        await asyncio.sleep(0.05)
    assert ignored is not None and ignored.actor == "mallory" and "mallory" in ignored.message
    status = await run.status()
    assert status.revision == 1 and calls(comp, "unbook") == []
    assert not any(e.kind is EventKind.compensation_planned for e in ledger.events)

    outcome = await run.repair(RepairInput(by="dana", action=RepairAction.compensate, reason="customer cancelled"))
    assert "revision 2 awaits approval" in outcome.message
    status = await comp.wait_for(run, waits_for(DecisionKind.plan_approval))
    assert "dana chose to undo what ran: customer cancelled" in status.pending[0].prompt
    # A second compensate, or a revision of the undos, is refused while they wait.
    with pytest.raises(Exception, match="not waiting for a repair"):
        await run.repair(RepairInput(by="dana", action=RepairAction.compensate))
    plan = await run.plan()
    assert plan is not None
    with pytest.raises(Exception, match="undoing its effects"):
        await run.revise(ReviseInput(by="dana", plan=plan.draft(), revision=2))
    await run.approve(ApproveInput(by="dana", revision=2))
    assert (await run.result()).status is Phase.compensated
    assert [c["booking"] for c in calls(comp, "unbook")] == ["B-a"]
    ledger = await run.ledger()
    assert any(d.action.value == "compensate" and d.by == "dana" for d in ledger.decisions)


async def test_a_rejected_revision_after_effects_ran_is_undone_and_a_rejected_first_plan_ends_rejected(comp):
    first = await comp.start({"goal": "book", "steps": [booking("a")]}, on_failure="compensate")
    await comp.wait_for(first, lambda s: s.phase is Phase.awaiting_approval)
    await first.reject(RejectInput(by="dana", revision=1, reason="not now"))
    assert (await first.result()).status is Phase.rejected

    # Gated so the run holds while a revision is proposed and rejected.
    gated = {**booking("b", ["a"]), "requires_approval": True}
    run = await comp.start({"goal": "book", "steps": [booking("a"), gated]}, on_failure="compensate")
    await comp.wait_for(run, lambda s: s.phase is Phase.awaiting_approval)
    await run.approve(ApproveInput(by="dana", revision=1))
    await comp.wait_for(run, waits_for(DecisionKind.step_approval, "b"))
    revised = {"goal": "book", "steps": [booking("a"), booking("b2", ["a"])]}
    await run.revise(ReviseInput.model_validate({"by": "dana", "plan": revised, "revision": 1}))
    await comp.wait_for(run, lambda s: s.phase is Phase.awaiting_approval and s.revision == 2)
    await run.reject(RejectInput(by="lee", revision=2, reason="wrong slot"))
    status = await comp.wait_for(run, lambda s: s.phase is Phase.awaiting_approval and s.revision == 3)
    assert "undo 1 effect of a run that ends without its goal" in status.pending[0].prompt
    assert "wrong slot" in status.pending[0].prompt
    await run.approve(ApproveInput(by="dana", revision=3))
    assert (await run.result()).status is Phase.compensated
    assert [c["booking"] for c in calls(comp, "unbook")] == ["B-a"]
    assert [c["slot"] for c in calls(comp, "book")] == ["a"]


async def test_a_person_who_sends_a_step_back_in_a_run_that_compensates_has_what_ran_undone(comp):
    # No planner, no repair waits (on_failure: compensate): a person's "no" to the next step ends
    # the goal, and what ran before it is undone instead of left standing.
    gated = {**booking("b", ["a"]), "requires_approval": True}
    run = await comp.start({"goal": "book", "steps": [booking("a"), gated]}, on_failure="compensate")
    await comp.wait_for(run, lambda s: s.phase is Phase.awaiting_approval)
    await run.approve(ApproveInput(by="dana", revision=1))
    await comp.wait_for(run, waits_for(DecisionKind.step_approval, "b"))
    await run.reject(RejectInput(by="dana", step_id="b", reason="too dear"))
    status = await comp.wait_for(run, lambda s: s.phase is Phase.awaiting_approval and s.revision == 2)
    assert "rejected by dana: too dear" in status.pending[0].prompt
    await run.approve(ApproveInput(by="dana", revision=2))
    result = await run.result()
    assert result.status is Phase.compensated
    assert [c["slot"] for c in calls(comp, "book")] == ["a"]
    assert [c["booking"] for c in calls(comp, "unbook")] == ["B-a"]


async def test_an_undo_that_fails_waits_for_a_repair_a_retry_undoes_it_and_a_stop_leaves_it(comp):
    plan = {"goal": "book", "steps": [booking("shaky-1"), booking("stuck-1"), failing("d", ["shaky-1", "stuck-1"])]}
    run = await comp.start(plan, on_failure="compensate", auto_approve=True)
    status = await comp.wait_for(run, lambda s: s.phase is Phase.awaiting_repair)
    assert {p.step_id for p in status.pending} == {"undo-shaky-1", "undo-stuck-1"}
    assert status.pending[0].prompt.endswith("or stop (the compensation fails: effects remain)")
    assert status.replans == 0  # a failed undo never replans
    # Retried, both run again: the shaky one is undone this time, the stuck one fails again.
    await run.repair(RepairInput(by="dana", action=RepairAction.retry, step_id="undo-shaky-1"))
    await run.repair(RepairInput(by="dana", action=RepairAction.retry, step_id="undo-stuck-1"))
    status = await comp.wait_for(run, lambda s: s.phase is Phase.awaiting_repair and s.steps.failed == 1)
    assert [p.step_id for p in status.pending] == ["undo-stuck-1"]
    ledger = await run.ledger()
    assert ledger.steps["undo-shaky-1"].status is StepStatus.succeeded
    await run.repair(RepairInput(by="dana", action=RepairAction.stop, reason="call the hotel"))
    with pytest.raises(WorkflowFailureError):
        await run.result()
    status = await run.status()
    assert status.phase is Phase.compensation_failed
    assert status.reason is not None and status.reason.endswith("effects remain: stuck-1")
    assert sorted(c["booking"] for c in calls(comp, "unbook")) == ["B-shaky-1"] * 2 + ["B-stuck-1"] * 2
    ledger = await run.ledger()
    assert ledger.events[-1].kind is EventKind.run_compensation_failed
    memo = await (await run.handle.describe()).memo()
    assert memo["phase"] == "compensation_failed"


async def test_rejecting_the_compensation_ends_it_failed_and_nothing_is_undone(comp):
    run = await comp.start({"goal": "book", "steps": [booking("a"), failing("d", ["a"])]}, on_failure="compensate")
    await comp.wait_for(run, lambda s: s.phase is Phase.awaiting_approval)
    await run.approve(ApproveInput(by="dana", revision=1))
    await comp.wait_for(run, lambda s: s.phase is Phase.awaiting_approval and s.revision == 2)
    await run.reject(RejectInput(by="dana", revision=2, reason="leave it"))
    with pytest.raises(WorkflowFailureError):
        await run.result()
    status = await run.status()
    assert status.phase is Phase.compensation_failed and "effects remain: a" in (status.reason or "")
    assert calls(comp, "unbook") == []


async def test_a_compensation_continues_as_new_and_finishes(comp):
    steps = [booking(f"s{n}") for n in range(6)]
    plan = {"goal": "book many", "steps": [*steps, failing("d", [s["id"] for s in steps])]}
    run = await comp.start(plan, on_failure="compensate", auto_approve=True, continue_as_new_after_events=20)
    result = await run.result()
    assert result.status is Phase.compensated
    assert sorted(c["booking"] for c in calls(comp, "unbook")) == [f"B-s{n}" for n in range(6)]
    assert (await run.status()).continued >= 1
    ledger = await run.ledger()
    planned = next(e.seq for e in ledger.events if e.kind is EventKind.compensation_planned)
    assert any(e.kind is EventKind.continued_as_new and e.seq > planned for e in ledger.events)


async def test_effects_nothing_undoes_end_compensation_failed_and_no_effect_ends_as_before(comp):
    email = {"id": "email", "title": "email", "tool": "send_email", "args": {"to": "ada"}}
    run = await comp.start({"goal": "tell", "steps": [email, failing("d", ["email"])]}, on_failure="compensate")
    await comp.wait_for(run, lambda s: s.phase is Phase.awaiting_approval)
    await run.approve(ApproveInput(by="dana", revision=1))
    with pytest.raises(WorkflowFailureError):
        await run.result()
    status = await run.status()
    assert status.phase is Phase.compensation_failed
    assert "nothing undoes email" in (status.reason or "") and "effects remain: email" in (status.reason or "")

    look = {"id": "look", "title": "look", "tool": "look_up", "args": {"slot": "a"}}
    quiet = await comp.start({"goal": "look", "steps": [look, failing("d", ["look"])]}, on_failure="compensate")
    await comp.wait_for(quiet, lambda s: s.phase is Phase.awaiting_approval)
    await quiet.approve(ApproveInput(by="dana", revision=1))
    with pytest.raises(WorkflowFailureError):
        await quiet.result()
    status = await quiet.status()
    assert status.phase is Phase.failed and status.reason is not None
    assert status.reason.endswith("nothing to undo: no step with an effect ran")


async def test_a_plan_whose_compensation_is_wrong_is_refused_before_anything_runs(comp):
    bad = {
        "goal": "order",
        "steps": [
            {
                "id": "order",
                "title": "order",
                "tool": "place_order",
                "args": {"item": "bolt"},
                "compensate": {"tool": "cancel_ordr"},
            },
            {
                "id": "order2",
                "title": "order",
                "tool": "place_order",
                "args": {"item": "nut"},
                "compensate": {"tool": "cancel_order", "args": {"order": 7, "colour": "red"}},
            },
        ],
    }
    run = await comp.start(bad, on_failure="compensate", auto_approve=True)
    with pytest.raises(WorkflowFailureError):
        await run.result()
    status = await run.status()
    assert status.phase is Phase.failed
    assert "compensate uses unknown tool 'cancel_ordr' (did you mean 'cancel_order'?)" in (status.reason or "")
    assert "step 'order2': compensate:" in (status.reason or "")
    assert comp.calls() == []
