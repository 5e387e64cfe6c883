"""Run levels (stratagem.domain.run_types.RUN_LEVEL): a run started by today's client asks Temporal for no
patch, and writes its phase into the memo once per workflow task; a run without a level (an
older client, or someone starting the workflow by hand) still gets every patched behaviour; a
run above the worker's level waits for a newer worker instead of running on old code."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest
from support.plans import step
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowExecutionStatus

from stratagem.client import sign_auto_approval
from stratagem.domain.plan import Author, AuthorKind, PlanDraft
from stratagem.domain.run_types import RUN_LEVEL, WORKFLOW_NAME, ApproveInput, RunInput, RunOptions, RunResult

CHAIN = {
    "goal": "three steps",
    "steps": [step("a", "add", a=1, b=2), step("b", "add", ["a"], a=3, b=4), step("c", "add", ["b"], a=5, b=6)],
}
# A header holding a literal credential: refused by a patched rule (stratagem.domain.validation).
LEAKY = {
    "goal": "call an API",
    "steps": [
        {
            "id": "call",
            "title": "call",
            "tool": "http_request",
            "args": {
                "method": "GET",
                "url": "https://api.example.com",
                "headers": {"Authorization": "Bearer sk-live-0123456789abcdef"},
            },
        }
    ],
}


def kinds(history) -> list[int]:
    return [e.event_type for e in history.events]


async def start_by_hand(harness, plan: dict, level: int):
    """What an older client, or the plain Temporal API, sends: RunInput as it is, no stamping
    (but its auto_approve signed)."""
    run = RunInput(
        plan=PlanDraft.model_validate(plan),
        author=Author(kind=AuthorKind.human, name="mallory"),
        options=RunOptions(auto_approve=True),
        level=level,
    )
    run_id = f"test-{uuid.uuid4().hex[:10]}"
    # Signed, as a run that approves itself must be (stratagem.common.signing): what is tested is the rest.
    run = sign_auto_approval(run, run_id, now=await harness.env.get_current_time())
    return await harness.client.start_workflow(
        WORKFLOW_NAME, run, id=run_id, task_queue=harness.task_queue, result_type=RunResult
    )


@pytest.mark.workflow
async def test_a_run_of_todays_client_writes_no_patch_markers_and_one_memo_per_task(harness):
    run = await harness.start(CHAIN, auto_approve=True)
    result = await run.result()
    assert result.status.value == "succeeded"
    history = await run.handle.fetch_history()
    events = kinds(history)
    markers = [
        e.marker_recorded_event_attributes.marker_name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
    ]
    assert markers == ["core_local_activity"]  # the tool catalogue (test_catalog.py); no patch
    assert EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES not in events
    # Planned, approved by policy and running in one task: one memo write there, one at the end.
    assert events.count(EventType.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED) == 2
    assert await (await run.handle.describe()).memo_value("phase") == "succeeded"  # what `list` reads
    started = history.events[0].workflow_execution_started_event_attributes
    assert b'"level":%d' % RUN_LEVEL in started.input.payloads[0].data


@pytest.mark.workflow
async def test_a_run_without_a_level_still_gets_every_patched_rule(harness):
    # Dropping the level must not drop a rule: the credentials rule is a patched behaviour. A new
    # run without a level takes level 7's patch, and today's rules with it (issue #35: the level
    # once decided whether a fork's carried outputs were checked).
    handle = await start_by_hand(harness, LEAKY, level=0)
    try:
        await handle.result()
        raise AssertionError("a plan with a literal credential ran")
    except Exception as exc:  # the run fails: the supplied plan is invalid
        assert "literal credential" in str(getattr(exc, "cause", None) or exc)
    history = await handle.fetch_history()
    markers = [
        e.marker_recorded_event_attributes.marker_name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
    ]
    assert markers == ["core_patch", "core_local_activity"]  # asked the one patch, then today's catalogue
    scheduled = [e for e in history.events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED]
    assert scheduled == []  # nothing ran


@pytest.mark.workflow
async def test_todays_level_refuses_the_same_plan(harness):
    handle = await start_by_hand(harness, LEAKY, level=RUN_LEVEL)
    try:
        await handle.result()
        raise AssertionError("a plan with a literal credential ran")
    except Exception as exc:
        assert "literal credential" in str(getattr(exc, "cause", None) or exc)


@pytest.mark.system
async def test_a_run_above_the_workers_level_waits_and_runs_nothing(dev_harness):
    # On the dev server: a workflow task failing over and over keeps the time-skipping server
    # from skipping time for every later test, even once the run is terminated.
    handle = await start_by_hand(dev_harness, CHAIN, level=RUN_LEVEL + 1)
    failed = False
    for _ in range(100):
        history = await handle.fetch_history()
        if EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED in kinds(history):
            failed = True
            break
        await asyncio.sleep(0.1)
    assert failed, "the workflow task should fail on a worker below the run's level"
    assert EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED not in kinds(history)
    failure = next(e for e in history.events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED)
    assert f"level {RUN_LEVEL + 1}" in failure.workflow_task_failed_event_attributes.failure.message
    description = await handle.describe()
    assert description.status == WorkflowExecutionStatus.RUNNING  # waiting for a newer worker, not failed
    await handle.terminate("test over")


async def awaiting_approval(run) -> None:
    for _ in range(200):
        if (await run.status()).phase.value == "awaiting_approval":
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the run never asked for approval")


def memo_writes_in_the_approving_task(history) -> int:
    """Memo and search attribute writes between the update's acceptance and the next workflow task."""
    events = history.events
    accepted = next(
        i for i, e in enumerate(events) if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
    )
    writes = 0
    for event in events[accepted:]:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
            break
        writes += event.event_type in (
            EventType.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED,
            EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES,
        )
    return writes


@pytest.mark.system
async def test_an_approval_starts_the_first_step_before_the_memo_says_running_and_list_says_running(cli_env):
    from support.cli import acli

    env, harness = cli_env
    # Long enough for three CLI processes to look while it runs (each starts an interpreter).
    run = await harness.start({"goal": "slow", "steps": [step("nap", "slow", label="nap", seconds=12)]})
    await awaiting_approval(run)
    await run.approve(ApproveInput(by="alice", revision=1))
    # The step runs; the memo still says awaiting_approval (written with the next task), and the
    # listing, seeing the run's activity in flight, says running.
    assert await (await run.handle.describe()).memo_value("phase") == "awaiting_approval"
    listed = json.loads((await acli("list", "--json", env=env)).stdout)
    assert next(r for r in listed if r["run_id"] == run.id)["phase"] == "running"
    # The inbox reads visibility alone (no query per run, issue #39): until the memo is written it
    # still lists the run, and an approval sent meanwhile is refused, changing nothing.
    inbox = json.loads((await acli("list", "--status", "awaiting-approval", "--json", env=env)).stdout)
    assert [r["waiting_for"] for r in inbox if r["run_id"] == run.id] == [["approval of revision 1"]]
    again = await acli("approve", run.id, "--revision", "1", "--by", "alice", env=env)
    assert again.returncode != 0 and "no plan is waiting for approval" in again.stderr
    assert (await run.result()).status.value == "succeeded"
    # This namespace has the status search attribute: it, the waits and the phase all wait.
    history = await run.handle.fetch_history()
    assert memo_writes_in_the_approving_task(history) == 0
    assert EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES in kinds(history)  # it is kept, just later
    assert await (await run.handle.describe()).memo_value("phase") == "succeeded"


@pytest.mark.workflow
async def test_an_approval_that_starts_a_question_writes_the_phase_at_once(harness):
    plan = {"goal": "ask", "steps": [{"id": "ask", "title": "Ask", "kind": "human", "instructions": "Budget?"}]}
    run = await harness.start(plan)
    await awaiting_approval(run)
    await run.approve(ApproveInput(by="alice", revision=1))
    # No activity will bring a next task: the run waits on a person, so the memo must say so now.
    assert await (await run.handle.describe()).memo_value("phase") == "running"
    assert memo_writes_in_the_approving_task(await run.handle.fetch_history()) == 1
    await run.handle.terminate("test over")
