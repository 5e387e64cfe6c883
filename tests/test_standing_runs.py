"""Standing approvals at a run's review gate (issue #40, item 5), on the time-skipping server: a run
of the approved version inside the bounds goes through with nobody asked and the ledger names the
grant and its grantor; anything else waits for a person, who is told what differs. The fixture
tools' own log (calls.jsonl, written when a tool runs) proves what ran.

The attacks: a grant nobody trusted signed, sent straight to the registry; a grant by someone
who may not approve the run; a grant for one process used for another; a grant limited to a
schedule, claimed by a run started by hand; a quorum that one grant cannot meet.
"""

from __future__ import annotations

import asyncio

import pytest
from temporalio.client import WorkflowUpdateFailedError
from temporalio.common import WorkflowIDConflictPolicy
from test_standing_registry import replay_registry

from stratagem.common.signing import Signer
from stratagem.domain.ledger import DecisionAction, EventKind
from stratagem.domain.process import ProcessRun, ProcessSpec
from stratagem.domain.run_types import ApproveInput, Phase, RunInput, RunOptions
from stratagem.domain.standing import GRANT_KIND, GRANT_UPDATE, REGISTRY_WORKFLOW, Grant, registry_id
from stratagem.standing_approvals import grant_standing, revoke_standing

pytestmark = pytest.mark.workflow


def payout(version: str = "1", label: str = "pay ${inputs.vendor} ${inputs.amount}") -> ProcessSpec:
    return ProcessSpec.model_validate(
        {
            "name": "payout",
            "version": version,
            "inputs": {
                "vendor": {"type": "string"},
                "amount": {"type": "number", "minimum": 0},
                "currency": {"type": "string", "enum": ["EUR", "USD"], "default": "EUR"},
            },
            "goal": "Pay ${inputs.vendor}",
            "steps": [
                {"id": "lookup", "title": "Look up", "tool": "fetch_profile", "args": {"user": "${inputs.vendor}"}},
                {
                    "id": "pay",
                    "title": "Pay ${inputs.vendor}",
                    "tool": "record",
                    "args": {"label": label},
                    "depends_on": ["lookup"],
                    "risk": "high",
                },
            ],
        }
    )


PAYOUT = payout()


@pytest.fixture(autouse=True)
async def replayed(harness):
    yield
    await replay_registry(harness)


async def _grant(harness, spec: ProcessSpec = PAYOUT, **fields):
    fields.setdefault("by", "dana")
    return await grant_standing(harness.client, spec, task_queue=harness.task_queue, **fields)


async def _start(harness, spec: ProcessSpec = PAYOUT, approvers=("dana", "lee"), **inputs):
    process = ProcessRun(spec=spec, inputs={"vendor": "acme", **inputs})
    return await harness.start_input(RunInput(process=process, options=RunOptions(approvers=list(approvers))))


async def _waiting(harness, run, ran: int = 0):
    """The run's plan waiting for a person, nothing of it run (`ran`: calls by earlier runs)."""
    status = await harness.wait_for(run, lambda s: s.phase is not Phase.planning and bool(s.pending))
    assert status.phase is Phase.awaiting_approval and len(harness.calls()) == ran
    return status.pending[0]


async def test_a_run_inside_the_bounds_goes_through_and_the_ledger_names_the_grant(harness):
    grant = await _grant(harness, bounds=["amount<=5000", "currency=EUR"], steps=["pay"])
    run = await _start(harness, amount=120)
    result = await run.result()
    assert result.status is Phase.succeeded
    assert [c["label"] for c in harness.calls()] == ["pay acme 120"]
    ledger = await run.ledger()
    plan, step = ledger.decisions
    assert (plan.action, plan.by, plan.via, plan.signed_by, plan.step_id) == (
        DecisionAction.approve, "dana", "standing", "dana", None,
    )  # fmt: skip
    assert f"standing approval {grant.id} of payout v1, granted by dana within amount<=5000, currency=EUR" in (
        plan.comment
    )
    assert (step.step_id, step.by, step.via) == ("pay", "dana", "standing") and grant.id in step.comment
    approved = [e for e in ledger.events if e.kind is EventKind.plan_approved]
    assert approved[0].actor == "dana" and grant.id in approved[0].message


async def test_a_gated_step_the_grant_does_not_name_still_asks(harness):
    await _grant(harness, bounds=["amount<=5000"])
    run = await _start(harness, amount=120)
    status = await harness.wait_for(run, lambda s: [p.step_id for p in s.pending] == ["pay"])
    assert status.pending[0].preview is not None and harness.calls() == []
    await run.approve(ApproveInput(by="lee", step_id="pay", digest=status.pending[0].preview.digest))
    assert (await run.result()).status is Phase.succeeded


async def test_out_of_bounds_waits_and_the_review_names_the_bound_and_the_value(harness):
    await _grant(harness, bounds=["amount<=5000"], steps=["pay"], grant_id="small")
    run = await _start(harness, amount=7000)
    waiting = await _waiting(harness, run)
    assert waiting.standing == (
        "a standing approval exists but did not apply: standing approval small (dana): amount=7000 is outside "
        "the bound amount<=5000"
    )
    assert "A standing approval did not apply: standing approval small (dana): amount=7000" in waiting.prompt
    await run.approve(ApproveInput(by="lee"))
    await harness.wait_for(run, lambda s: [p.step_id for p in s.pending] == ["pay"])  # a person's: no grant
    assert harness.calls() == []


async def test_a_changed_version_waits_and_shows_what_changed(harness):
    await _grant(harness, grant_id="v1")
    changed = payout("2", label="pay ${inputs.vendor} ${inputs.amount} twice")
    waiting = await _waiting(harness, await _start(harness, changed, amount=120))
    assert "standing approval v1 (dana) approves payout v1; this run is v2" in waiting.standing
    assert "What changed since the approved version: ~ pay" in waiting.standing
    assert "args.label: pay acme 120 → pay acme 120 twice" in waiting.standing


async def test_revoking_makes_the_next_run_wait(harness):
    grant = await _grant(harness, bounds=["amount<=5000"], steps=["pay"])
    first = await _start(harness, amount=10)
    # Waited for by its status: awaiting a result lets the time-skipping server skip ahead to the
    # registry's own run timeout (the test server's default; a real server has none).
    await harness.wait_for(first, lambda s: s.phase is Phase.succeeded)
    await revoke_standing(harness.client, grant.id, by="lee", reason="vendor audit", task_queue=harness.task_queue)
    waiting = await _waiting(harness, await _start(harness, amount=10), ran=1)
    assert f"standing approval {grant.id} (dana) was revoked by lee: vendor audit" in waiting.standing
    assert [c["label"] for c in harness.calls()] == ["pay acme 10"]  # the first run's, only


async def test_a_grant_nobody_trusted_signed_is_refused_and_approves_nothing(harness):
    handle = await harness.client.start_workflow(
        REGISTRY_WORKFLOW,
        id=registry_id(harness.task_queue),
        task_queue=harness.task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
    )
    forged = Grant(
        id="forged", by="dana", process="payout", version="1", digest=PAYOUT.digest, spec=PAYOUT,
        steps=["pay"], granted_at=await harness.env.get_current_time(),
    )  # fmt: skip
    for grant in (forged, Signer.generate("dana").sign(handle.id, GRANT_KIND, forged)):  # unsigned; a stranger's key
        with pytest.raises(WorkflowUpdateFailedError):
            await handle.execute_update(GRANT_UPDATE, grant, result_type=str)
    waiting = await _waiting(harness, await _start(harness, amount=10))
    assert waiting.standing is None  # no grant exists: an ordinary review


async def test_a_grant_by_someone_who_may_not_approve_the_run_does_not_approve_it(harness):
    await _grant(harness, by="mallory", grant_id="mallorys")
    waiting = await _waiting(harness, await _start(harness, approvers=["lee"], amount=10))
    assert (
        "standing approval mallorys (mallory) cannot approve this run: mallory is not on this run's approver list "
        "(lee)" in waiting.standing
    )


async def test_a_quorum_of_two_is_not_met_by_one_grant(harness):
    await _grant(harness, grant_id="one")
    process = ProcessRun(spec=PAYOUT, inputs={"vendor": "acme", "amount": 1})
    run = await harness.start_input(
        RunInput(process=process, options=RunOptions(approvers=["dana", "lee", "kim"], quorum=2))
    )
    waiting = await _waiting(harness, run)
    assert "this run's plan needs 2 approvers; a standing approval counts as one" in waiting.standing
    assert waiting.approved_by == []


async def test_a_grant_for_one_process_is_not_used_for_another(harness):
    await _grant(harness)
    refund = PAYOUT.model_copy(update={"name": "refund"})
    waiting = await _waiting(harness, await _start(harness, refund, amount=10))
    assert waiting.standing is None


async def test_a_run_started_by_hand_is_not_a_run_of_the_schedule_it_names(harness):
    await _grant(harness, schedule="monthly-payout", grant_id="monthly")
    process = ProcessRun(spec=PAYOUT, inputs={"vendor": "acme", "amount": 10}, schedule="monthly-payout")
    waiting = await _waiting(harness, await harness.start_input(RunInput(process=process)))
    assert "standing approval monthly (dana) is for schedule monthly-payout; this run is not from a schedule" in (
        waiting.standing
    )


async def test_a_grant_recorded_while_unsigned_ones_were_let_in_approves_nothing_once_keys_are_required(
    time_env, tmp_path
):
    """The run verifies each grant again with its worker's keys: an operator who once let unsigned
    grants in (STRATAGEM_ALLOW_UNSIGNED=1) and no longer does is not bound by them."""
    from support import FIXTURE_TOOLS

    from stratagem.common.signing import DecisionPolicy
    from stratagem.tools import ToolRegistry
    from stratagem.worker import build_worker

    queue = f"tq-lax-{tmp_path.name[-8:]}"
    tools = ToolRegistry.from_modules([FIXTURE_TOOLS])
    lax = build_worker(
        time_env.client,
        task_queue=queue,
        registry=tools,
        workspace=tmp_path / "w",
        decision_policy=DecisionPolicy(allow_unsigned=True),
        max_cached_workflows=0,  # nothing sticks to it: the strict worker takes the registry at once,
    )
    async with lax:
        handle = await time_env.client.start_workflow(REGISTRY_WORKFLOW, id=registry_id(queue), task_queue=queue)
        unsigned = Grant(
            id="lax", by="dana", process="payout", version="1", digest=PAYOUT.digest, spec=PAYOUT,
            granted_at=await time_env.get_current_time(),
        )  # fmt: skip
        await handle.execute_update(GRANT_UPDATE, unsigned, result_type=str)
    strict = build_worker(time_env.client, task_queue=queue, registry=tools, workspace=tmp_path / "w")
    async with strict:
        from stratagem.client import start_run

        process = ProcessRun(spec=PAYOUT, inputs={"vendor": "acme", "amount": 1})
        run = await start_run(time_env.client, RunInput(process=process), task_queue=queue, run_id=f"lax-{queue}")
        for _ in range(600):
            status = await run.status()
            if status.pending:
                break
            await asyncio.sleep(0.05)
        assert status.phase is Phase.awaiting_approval
        assert "standing approval lax is not trusted: this deployment accepts only signed decisions" in (
            status.pending[0].standing or ""
        )
        await run.handle.terminate(reason="test finished")
        await handle.terminate(reason="test finished")


async def test_a_planners_plan_is_never_approved_by_a_grant(harness):
    """A process that plans from its goal: whatever the planner writes is no version anyone approved."""
    spec = ProcessSpec(name="greeting", inputs={"who": {"type": "string"}}, goal="Greet ${inputs.who}")
    await grant_standing(harness.client, spec, by="dana", grant_id="greet", task_queue=harness.task_queue)
    plan = {"goal": "Greet grace", "steps": [{"id": "g", "title": "greet", "tool": "record", "args": {"label": "hi"}}]}
    planner = harness.script("greeting-planner.yaml", {"planner": [{"plan": plan}]})
    process = ProcessRun(spec=spec, inputs={"who": "grace"})
    run = await harness.start_input(RunInput(process=process, options=RunOptions(planner=planner)))
    waiting = await _waiting(harness, run)
    assert "standing approval greet (dana) approves the process's own plan; this plan is not it" in waiting.standing
