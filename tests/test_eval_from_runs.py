"""`set_from_runs`: an eval set from the runs a namespace recorded, read from their histories.

Real runs on the dev server (visibility lists them), a real worker, scripted planners. Every
query names the harness's own task queue: other tests' runs share the session's server.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from support.plans import awaiting, step
from support.signing import send_signed

from stratagem.common.errors import StratagemError
from stratagem.domain.plan import PlanDraft
from stratagem.domain.process import ProcessRun, ProcessSpec
from stratagem.domain.run_types import WORKFLOW_NAME, ApproveInput, Phase, RejectInput, RunInput, RunOptions
from stratagem.evals.from_runs import set_from_runs

pytestmark = pytest.mark.system

GREETING = {"goal": "Greet grace", "steps": [step("hello", "record", label="hi grace")]}
FIRST = {
    "goal": "onboard ada",
    "steps": [step("profile", "fetch_profile", user="ada"), step("charge", "broken", ["profile"], reason="declined")],
}
SECOND = {"goal": "onboard ada", "steps": [step("invoice", "record", label="invoice instead")]}
OTHER = {"goal": "tidy up", "steps": [step("tidy", "record", label="tidy")]}


async def listed(client, query: str, count: int) -> None:
    """Wait until visibility lists `count` runs for `query` (it trails the runs a moment)."""
    for _ in range(200):
        if len([e async for e in client.list_workflows(query)]) >= count:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"visibility never listed {count} runs for {query}")


async def test_a_set_holds_the_runs_a_person_approved(dev_harness, monkeypatch, tmp_path):
    h = dev_harness
    queue = f"TaskQueue = '{h.task_queue}'"

    # A run of a process, planned from its goal, approved by a signal: its goal is the rendered one.
    spec = ProcessSpec(name="greeting", inputs={"who": {"type": "string"}}, goal="Greet ${inputs.who}")
    greeting = await h.start_input(
        RunInput(
            process=ProcessRun(spec=spec, inputs={"who": "grace"}),
            options=RunOptions(planner=h.script("greeting.yaml", {"planner": [{"plan": GREETING}]})),
        )
    )
    await h.wait_for(greeting, awaiting)
    await send_signed(greeting, "approve_signal", ApproveInput(by="dana", revision=1))
    # Approved by bob; its step fails and the planner's revision 2 runs on policy: bob's stays the reference.
    replanned = await h.start(
        goal="onboard ada",
        planner=h.script("onboard.yaml", {"planner": [{"plan": FIRST}, {"plan": SECOND}]}),
        replan_requires_approval=False,
        step_max_attempts=1,
    )
    await h.wait_for(replanned, awaiting)
    await replanned.approve(ApproveInput(by="bob", revision=1))
    # Rejected, left waiting, and approved by the run itself: none is a case.
    rejected = await h.start(goal="tidy up", planner=h.script("rejected.yaml", {"planner": [{"plan": OTHER}]}))
    waiting = await h.start(goal="tidy up", planner=h.script("waiting.yaml", {"planner": [{"plan": OTHER}]}))
    automatic = await h.start(
        goal="tidy up", planner=h.script("automatic.yaml", {"planner": [{"plan": OTHER}]}), auto_approve=True
    )
    await h.wait_for(rejected, awaiting)
    await rejected.reject(RejectInput(by="erin", reason="not now"))
    await h.wait_for(waiting, awaiting)
    for run in (greeting, replanned, rejected, automatic):
        await run.result()
    assert (await replanned.status()).revision == 2
    await listed(h.client, queue, 5)

    found = await set_from_runs(h.client, query=queue)
    assert found.name == f"runs in {h.client.namespace} matching {queue}"
    cases = {case.id: case for case in found.cases}
    assert set(cases) == {greeting.id, replanned.id}
    greeted = cases[greeting.id]
    assert greeted.goal == "Greet grace" and greeted.inputs == {} and greeted.checks == []
    drafted = PlanDraft.model_validate(GREETING)
    assert greeted.reference is not None and (greeted.reference.goal, greeted.reference.steps) == (
        drafted.goal,
        drafted.steps,
    )
    assert greeted.catalog is not None and greeted.catalog == await greeting.catalog()
    onboarding = cases[replanned.id]
    assert onboarding.goal == "onboard ada"
    assert onboarding.reference is not None and [s.id for s in onboarding.reference.steps] == ["profile", "charge"]
    assert onboarding.catalog == await replanned.catalog()

    # The user's query narrows the runs; the limit caps the cases.
    one = await set_from_runs(h.client, query=f"{queue} AND WorkflowId = '{replanned.id}'")
    assert [case.id for case in one.cases] == [replanned.id]
    assert len((await set_from_runs(h.client, query=queue, limit=1)).cases) == 1

    # None qualifies: one line, with how many runs were looked at and why each was passed over.
    others = f"{queue} AND WorkflowId IN ('{rejected.id}', '{waiting.id}', '{automatic.id}')"
    with pytest.raises(StratagemError) as refused:
        await set_from_runs(h.client, query=others)
    line = str(refused.value)
    assert "\n" not in line and "3 runs looked at" in line, line
    for reason in ("1 rejected", "1 still awaiting approval", f"1 {Phase.succeeded.value} without a person's approval"):
        assert reason in line, line
    with pytest.raises(StratagemError, match="there are no runs in"):
        await set_from_runs(h.client, query=f"{queue} AND WorkflowId = 'no-such-run'")
    with pytest.raises(StratagemError, match="cannot list the runs"):
        await set_from_runs(h.client, query="NoSuchAttribute = 'x'")
    # Read where the approver's key is not trusted, the signalled approval replays as refused: passed over, saying why.
    with monkeypatch.context() as env:
        env.setenv("STRATAGEM_HOME", str(tmp_path / "another-home"))
        with pytest.raises(
            StratagemError, match="1 not replayable here .it decides otherwise without the workers' keys"
        ):
            await set_from_runs(h.client, query=f"{queue} AND WorkflowId = '{greeting.id}'")


async def test_a_malformed_run_is_passed_over_not_read(dev_env):
    """A workflow of the run's type started by hand with an input that is no run, then sent an
    approval: its history does not replay, and it is counted, not a crash."""
    client = dev_env.client
    run_id = f"forged-{uuid.uuid4().hex[:10]}"
    handle = await client.start_workflow(
        WORKFLOW_NAME, {"goal": 5, "options": "everything"}, id=run_id, task_queue=f"nobody-{uuid.uuid4().hex[:8]}"
    )
    try:
        await handle.signal("approve_signal", {"by": "mallory", "revision": 1})
        await listed(client, f"WorkflowId = '{run_id}'", 1)
        with pytest.raises(StratagemError) as refused:
            await set_from_runs(client, query=f"WorkflowId = '{run_id}'")
        assert "1 run looked at: 1 not replayable here (its workflow does not start from its input)" in str(
            refused.value
        ), refused.value
    finally:
        await handle.terminate(reason="test finished")
