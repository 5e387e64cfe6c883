"""Where a run reads its tool catalogue (RUN_LEVEL 3): the worker running its first workflow task
answers in a local activity when it serves the tools role too; a workflow-only worker answers that
it has no tools, and the tools role answers in an activity; a command line hosting the workflow
for a moment answers nothing and leaves the task to a worker. Either way the catalogue is the tools role's, never the workflow's guess."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from conftest import session_approver_keys
from support import FIXTURE_TOOLS
from support.plans import step
from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput, Interceptor

from stratagem.client import sign_auto_approval, start_run
from stratagem.common.signing import Keyring
from stratagem.domain import activity_io
from stratagem.domain.plan import Author, AuthorKind, PlanDraft
from stratagem.domain.process import ProcessRun, ProcessSpec
from stratagem.domain.roles import Role, role_queue
from stratagem.domain.run_types import Phase, RunInput, RunOptions
from stratagem.temporal.interceptors import HOSTED_ONLY
from stratagem.tools import ToolRegistry
from stratagem.worker import build_worker

pytestmark = pytest.mark.system

PLAN = {"goal": "add twice", "steps": [step("a", "add", a=1, b=2), step("b", "add", ["a"], a=3, b=4)]}


def run_input(plan: dict = PLAN, level: int = 0) -> RunInput:
    return RunInput(
        plan=PlanDraft.model_validate(plan),
        author=Author(kind=AuthorKind.human, name="ada"),
        options=RunOptions(auto_approve=True),
        level=level,
    )


def process_input() -> RunInput:
    """A process's run: its plan rendered by an activity first, so the catalogue comes in the
    run's second workflow task, which any worker of the queue may take."""
    spec = ProcessSpec(name="adds", goal="add twice", steps=PLAN["steps"])
    return RunInput(process=ProcessRun(spec=spec, inputs={}), options=RunOptions(auto_approve=True))


def scheduled(history, activity_type: str) -> list[str]:
    """The task queues `activity_type` was scheduled on, in order."""
    return [
        e.activity_task_scheduled_event_attributes.task_queue.name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == activity_type
    ]


def local_catalogue_markers(history) -> int:
    return sum(
        1
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
        and activity_io.DESCRIBE_TOOLS_HERE.encode() in e.SerializeToString()
    )


async def test_a_worker_serving_every_role_reads_the_catalogue_in_the_first_workflow_task(dev_env, tmp_path):
    queue = f"catalog-{uuid.uuid4().hex[:8]}"
    registry = ToolRegistry.from_modules([FIXTURE_TOOLS])
    async with build_worker(dev_env.client, task_queue=queue, registry=registry, workspace=tmp_path / "ws"):
        run = await start_run(dev_env.client, run_input(), task_queue=queue)
        result = await asyncio.wait_for(run.result(), timeout=60)
    assert result.status is Phase.succeeded and result.outputs == {"b": 7}
    history = await run.handle.fetch_history()
    assert scheduled(history, activity_io.DESCRIBE_TOOLS) == []
    assert local_catalogue_markers(history) == 1
    # One workflow task per step's end and one to start: no task waits for the catalogue.
    tasks = sum(1 for e in history.events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED)
    assert tasks == 3


async def test_a_workflow_only_worker_takes_the_catalogue_of_the_tools_role_not_its_own(dev_env, tmp_path):
    """The workflow worker knows no `add` (only the built-in tools); the tools worker does. The
    plan passes validation only with the tools role's catalogue."""
    queue = f"catalog-{uuid.uuid4().hex[:8]}"
    tools = ToolRegistry.from_modules([FIXTURE_TOOLS])
    workflow_only = build_worker(
        dev_env.client,
        task_queue=queue,
        registry=ToolRegistry.from_modules([]),
        workspace=tmp_path / "ws",
        roles=[Role.workflow],
    )
    the_rest = build_worker(
        dev_env.client,
        task_queue=queue,
        registry=tools,
        workspace=tmp_path / "ws",
        roles=[Role.planner, Role.executor, Role.tools],
    )
    async with workflow_only, the_rest:
        run = await start_run(dev_env.client, run_input(), task_queue=queue)
        result = await asyncio.wait_for(run.result(), timeout=60)
    assert result.status is Phase.succeeded, result.reason
    history = await run.handle.fetch_history()
    assert local_catalogue_markers(history) == 1  # asked here first: "no tools here"
    assert scheduled(history, activity_io.DESCRIBE_TOOLS) == [role_queue(queue, Role.tools)]


def hosted_failures(history) -> list[str]:
    """The messages of the workflow tasks that failed in a command hosting the workflow."""
    return [
        e.workflow_task_failed_event_attributes.failure.message
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
        and HOSTED_ONLY in e.workflow_task_failed_event_attributes.failure.message
    ]


@pytest.fixture
def hosting(monkeypatch):
    """A command hosts the workflow only where it knows the keys the workers trust."""
    Keyring.of_home().signer("ada")  # the author's key, which lets the run approve itself, listed below
    for name, value in session_approver_keys().items():
        monkeypatch.setenv(name, value)


async def test_a_command_line_hosting_the_first_task_leaves_the_catalogue_to_a_worker(dev_env, tmp_path, hosting):
    """`stratagem status` and the rest host the workflow while they run. If such a process, alone
    on its queue, takes a run's first workflow task, the task completes (no failure, no retry
    elsewhere) and the catalogue waits for a worker with tools."""
    from stratagem.cli.session import workflow_host

    queue = f"catalog-{uuid.uuid4().hex[:8]}"
    async with workflow_host(dev_env.client, queue):
        run = await start_run(dev_env.client, run_input(), task_queue=queue)
        for _ in range(100):
            history = await run.handle.fetch_history()
            if scheduled(history, activity_io.DESCRIBE_TOOLS):
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the hosted task never asked the tools role for the catalogue")
    kinds = [e.event_type for e in history.events]
    assert EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED not in kinds
    assert local_catalogue_markers(history) == 1
    registry = ToolRegistry.from_modules([FIXTURE_TOOLS])
    async with build_worker(dev_env.client, task_queue=queue, registry=registry, workspace=tmp_path / "ws"):
        result = await asyncio.wait_for(run.result(), timeout=60)
    assert result.status is Phase.succeeded and result.outputs == {"b": 7}


async def test_a_command_line_beside_a_worker_leaves_the_catalogue_to_the_worker(dev_env, tmp_path, hosting):
    """Beside a worker, a command hosting the workflow answers nothing in the worker's place: a
    run's first task, taken there, fails at the catalogue, and the worker takes it and reads its
    own. (The worker stops here once the command has seen it, so that the command takes the task.)"""
    from stratagem.cli.session import workers_polling, workflow_host

    queue = f"catalog-{uuid.uuid4().hex[:8]}"
    registry = ToolRegistry.from_modules([FIXTURE_TOOLS])
    assert not await workers_polling(dev_env.client, queue)
    async with build_worker(dev_env.client, task_queue=queue, registry=registry, workspace=tmp_path / "ws"):
        await _until_polled(dev_env.client, queue)
        host = workflow_host(await _own_client(dev_env), queue)
        await host.__aenter__()
    try:
        run = await start_run(dev_env.client, run_input(), task_queue=queue)
        for _ in range(200):
            history = await run.handle.fetch_history()
            if hosted_failures(history):
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the hosted task never reached the catalogue")
    finally:
        await host.__aexit__(None, None, None)
    assert "stratagem.describe_tools_here needs a Stratagem worker" in hosted_failures(history)[0]
    assert local_catalogue_markers(history) == 0 and scheduled(history, activity_io.DESCRIBE_TOOLS) == []
    async with build_worker(dev_env.client, task_queue=queue, registry=registry, workspace=tmp_path / "ws"):
        result = await asyncio.wait_for(run.result(), timeout=60)
    assert result.status is Phase.succeeded and result.outputs == {"b": 7}
    history = await run.handle.fetch_history()
    assert local_catalogue_markers(history) == 1 and scheduled(history, activity_io.DESCRIBE_TOOLS) == []


async def _until_polled(client: Client, queue: str) -> None:
    """Until the server lists the worker's poller, as a command looks for one before hosting."""
    from stratagem.cli.session import workers_polling

    for _ in range(100):
        if await workers_polling(client, queue):
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the worker never polled its queue")


async def _own_client(dev_env) -> Client:
    """A command's own connection, as in its own process: one client takes one worker per queue."""
    target = dev_env.client.service_client.config.target_host
    return await Client.connect(
        target, namespace=dev_env.client.namespace, data_converter=dev_env.client.data_converter
    )


class _SlowCatalogue(Interceptor):
    """The worker's catalogue takes a while: its workflow task is under way all that time."""

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        class Slow(ActivityInboundInterceptor):
            async def execute_activity(self, input: ExecuteActivityInput) -> Any:
                if activity.info().activity_type == activity_io.DESCRIBE_TOOLS_HERE:
                    await asyncio.sleep(1.5)
                return await super().execute_activity(input)

        return Slow(next)


async def _ask_until(run, ended: asyncio.Future) -> int:
    """Ask the run for its status until it ends; each query must be answered."""
    asked = 0
    while not ended.done():
        await run.status()  # raises on a query the run cannot answer
        asked += 1
    return asked


async def test_queries_a_command_answers_while_a_worker_is_mid_task_leave_the_run_whole(dev_env, tmp_path, hosting):
    """Found by CI: `stratagem run` (which hosts the workflow while it follows the run) failed with
    "Nondeterminism error: Activity machine does not handle this event" in 1 of 10 runs under load.
    A query that reached the command while the worker's first task was reading the catalogue ran
    the host's catalogue ("no tools here") in the worker's place; a later query replayed the
    worker's catalogue marker into the host's answer. Here the worker's catalogue is slow and a
    command hosts the workflow and asks for the status all along: every query is answered."""
    from stratagem.cli.session import workflow_host

    queue = f"catalog-{uuid.uuid4().hex[:8]}"
    command = await _own_client(dev_env)
    registry = ToolRegistry.from_modules([FIXTURE_TOOLS])
    ada = Keyring.of_home().signer("ada")  # a key the command trusts, as the workers do
    answered = 0
    for _ in range(2):
        worker = build_worker(
            dev_env.client,
            task_queue=queue,
            registry=registry,
            workspace=tmp_path / "ws",
            interceptors=[_SlowCatalogue()],
        )
        async with worker:
            await _until_polled(dev_env.client, queue)  # as the background worker has, when `run` hosts
            async with workflow_host(command, queue):
                run = await start_run(dev_env.client, process_input(), task_queue=queue, signer=ada)
                ended = asyncio.ensure_future(run.result())
                answered += sum(await asyncio.gather(*(_ask_until(run, ended) for _ in range(4))))
                for _ in range(5):
                    assert (await run.status()).phase is Phase.succeeded
                assert ended.result().outputs == {"b": 7}
    assert answered > 3


async def test_a_new_run_started_below_level_3_reads_the_catalogue_as_today(dev_harness):
    """Runs started before level 3 replay the activity they scheduled (the golden histories hold
    such runs: test_golden_replay.py). A run started by hand at level 2 today takes level 7's
    patch, and today's rules with it (issue #35): the catalogue in a local activity."""
    run_id = f"test-{uuid.uuid4().hex[:10]}"
    handle = await dev_harness.client.start_workflow(
        "StratagemRun",
        sign_auto_approval(run_input(level=2), run_id),  # a run that approves itself is signed for
        id=run_id,
        task_queue=dev_harness.task_queue,
    )
    await asyncio.wait_for(handle.result(), timeout=60)
    history = await handle.fetch_history()
    assert local_catalogue_markers(history) == 1
    assert scheduled(history, activity_io.DESCRIBE_TOOLS) == []


async def test_the_catalogue_a_run_records_says_where_secrets_go_and_never_their_values(dev_env, tmp_path, monkeypatch):
    """Plan validation inside the run refuses a secret sent elsewhere only from what the run
    recorded: the bindings travel in the catalogue, the values stay in the worker's environment."""
    import base64
    import json

    monkeypatch.setenv("STRATAGEM_SECRET_CRM", "crm-value-never-recorded")
    monkeypatch.setenv("STRATAGEM_SECRET_CRM_HOSTS", "crm.example.com")
    monkeypatch.setenv("STRATAGEM_SECRET_CRM_HEADERS", "Authorization")
    queue = f"catalog-{uuid.uuid4().hex[:8]}"
    registry = ToolRegistry.from_modules([FIXTURE_TOOLS])
    async with build_worker(dev_env.client, task_queue=queue, registry=registry, workspace=tmp_path / "ws"):
        run = await start_run(dev_env.client, run_input(), task_queue=queue)
        await asyncio.wait_for(run.result(), timeout=60)
    payloads = []

    def walk(node):
        if isinstance(node, dict):
            if "metadata" in node and isinstance(node.get("data"), str):
                payloads.append(base64.b64decode(node["data"]).decode(errors="replace"))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk((await run.handle.fetch_history()).to_json_dict())
    [catalogue] = [json.loads(p) for p in payloads if '"tools"' in p and '"secrets"' in p]
    assert catalogue["secrets"] == {"CRM": {"hosts": ["crm.example.com"], "headers": ["Authorization"]}}
    assert not any("crm-value-never-recorded" in p for p in payloads)
