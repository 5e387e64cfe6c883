"""Worker roles: the workflow, planner, executor and tools roles in separate worker processes on
the dev server. Each kind of work runs where its role is served; killing one role's worker
pauses only that role's work, and a new worker resumes it."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml
from support import FIXTURE_TOOLS
from support.plans import step
from temporalio.api.enums.v1 import EventType

from stratagem.client import start_run
from stratagem.common.errors import ConfigError
from stratagem.domain import activity_io
from stratagem.domain.roles import ALL_ROLES, QueueLayout, Role, role_queue
from stratagem.domain.run_types import Phase, RunInput, RunOptions
from stratagem.tools import ToolRegistry
from stratagem.worker import build_worker
from stratagem.worker_options import add_worker_arguments, check_worker_args, child_argv

ROOT = Path(__file__).resolve().parent.parent


class Workers:
    """One `python worker.py --role ROLE` process per role, on one task queue."""

    def __init__(self, dev_env, tmp_path: Path):
        self.task_queue = f"roles-{uuid.uuid4().hex[:8]}"
        self.env = {
            **os.environ,
            "TEMPORAL_ADDRESS": dev_env.client.service_client.config.target_host,
            "TEMPORAL_TASK_QUEUE": self.task_queue,
            "STRATAGEM_WORKSPACE": str(tmp_path / "ws"),
            "STRATAGEM_STORE": str(tmp_path / "store"),  # shared by every role, as in production
        }
        self.processes: dict[Role, subprocess.Popen] = {}
        self.logs = tmp_path

    def start(self, role: Role) -> subprocess.Popen:
        log = (self.logs / f"{role.value}-{len(self.processes)}.log").open("w")
        process = subprocess.Popen(
            [sys.executable, "worker.py", "--tools", "tests/support/fixture_tools.py", "--role", role.value],
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self.processes[role] = process
        return process

    def kill(self, role: Role) -> None:
        process = self.processes.pop(role)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)

    def stop_all(self) -> None:
        for process in self.processes.values():
            process.terminate()
        for process in self.processes.values():
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()


def identities(history) -> dict[str, set[str]]:
    """Which worker (pid@host) started each activity type, and the workflow tasks ("workflow")."""
    scheduled: dict[int, str] = {}
    found: dict[str, set[str]] = {}
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            scheduled[event.event_id] = event.activity_task_scheduled_event_attributes.activity_type.name
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            attributes = event.activity_task_started_event_attributes
            found.setdefault(scheduled[attributes.scheduled_event_id], set()).add(attributes.identity)
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
            found.setdefault("workflow", set()).add(event.workflow_task_started_event_attributes.identity)
    return found


def pid_of(identities_: set[str]) -> set[int]:
    return {int(identity.split("@", 1)[0]) for identity in identities_}


@pytest.mark.system
async def test_roles_in_separate_processes_and_a_killed_role_pauses_only_its_work(dev_env, tmp_path):
    executor = tmp_path / "executor.yaml"
    executor.write_text(
        yaml.safe_dump({"executor": {"draft": "Welcome aboard, Ada."}, "synthesis": "Ada is on board."})
    )
    plan = {
        "goal": "welcome ada",
        "steps": [
            step("profile", "fetch_profile", user="ada"),
            {"id": "draft", "title": "Draft", "kind": "llm", "instructions": "Write a welcome."},
            step("note", "record", ["profile", "draft"], label="sent: ${draft}"),
        ],
    }
    planner = tmp_path / "planner.yaml"
    planner.write_text(yaml.safe_dump({"planner": [{"plan": plan}, {"plan": plan}]}))
    options = RunOptions(
        auto_approve=True,
        planner=f"scripted:{planner}",
        executor=f"scripted:{executor}",
        synthesizer=f"scripted:{executor}",
    )
    workers = Workers(dev_env, tmp_path)
    client = dev_env.client
    try:
        pids = {role: workers.start(role).pid for role in ALL_ROLES}
        run = await start_run(client, RunInput(goal="welcome ada", options=options), task_queue=workers.task_queue)
        result = await asyncio.wait_for(run.result(), timeout=90)
        assert result.status is Phase.succeeded and result.synthesis == "Ada is on board."

        # Each kind of work ran in its role's process, and nowhere else.
        ran = identities(await run.handle.fetch_history())
        assert pid_of(ran["workflow"]) == {pids[Role.workflow]}
        assert pid_of(ran[activity_io.PLAN]) == pid_of(ran[activity_io.SYNTHESIZE]) == {pids[Role.planner]}
        assert pid_of(ran[activity_io.RUN_LLM]) == {pids[Role.executor]}
        assert pid_of(ran[activity_io.RUN_TOOL]) == pid_of(ran[activity_io.DESCRIBE_TOOLS]) == {pids[Role.tools]}

        # The tools worker dies. The run still plans and drafts; its tool steps wait, and nothing fails.
        workers.kill(Role.tools)
        catalog_plan = await start_run(
            client, RunInput(goal="welcome ada", options=options), task_queue=workers.task_queue
        )
        await asyncio.sleep(3)
        status = await catalog_plan.status()
        assert status.phase is Phase.planning and status.steps.failed == 0  # waiting on the catalogue, a tools task
        workers.start(Role.tools)
        result = await asyncio.wait_for(catalog_plan.result(), timeout=90)
        assert result.status is Phase.succeeded

        # Now the executor dies mid-run: tool steps go on, the llm step waits for a new executor.
        workers.kill(Role.executor)
        paused = await start_run(client, RunInput(goal="welcome ada", options=options), task_queue=workers.task_queue)
        for _ in range(100):
            ledger = await paused.ledger()
            if ledger.steps.get("profile") and ledger.steps["profile"].status.value == "succeeded":
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(2)
        ledger = await paused.ledger()
        assert ledger.steps["profile"].status.value == "succeeded"
        assert ledger.steps["draft"].status.value == "running" and ledger.steps["note"].status.value == "pending"
        workers.start(Role.executor)
        result = await asyncio.wait_for(paused.result(), timeout=90)
        assert result.status is Phase.succeeded and result.outputs["note"] == "sent: Welcome aboard, Ada."
    finally:
        workers.stop_all()


@pytest.mark.unit
def test_role_queues():
    assert [role_queue("ops", r) for r in ALL_ROLES] == ["ops", "ops-planner", "ops-executor", "ops-tools"]


@pytest.mark.unit
def test_worker_options_are_checked_in_one_line(monkeypatch):
    parser = argparse.ArgumentParser()
    add_worker_arguments(parser)
    options = check_worker_args(
        parser.parse_args(["--role", "planner", "--rate-limit", "planner=0.5", "--rate-limit", "executor=5"])
    )
    assert options.roles == (Role.planner,) and options.rate_limits == {Role.planner: 0.5, Role.executor: 5.0}
    assert options.layout is QueueLayout.split  # a worker serving some roles sends each to its queue
    # --processes' children get the same worker, checked values included, one process each.
    args = parser.parse_args(
        [
            "--tools",
            "t.py",
            "--role",
            "planner",
            "--rate-limit",
            "planner=0.5",
            "--max-concurrent",
            "3",
            "--processes",
            "4",
        ]
    )
    child = child_argv(check_worker_args(args))
    assert child == ["--tools", "t.py", "--role", "planner", "--rate-limit", "planner=0.5", "--max-concurrent", "3"]
    again = check_worker_args(parser.parse_args(child))
    assert (again.roles, again.rate_limits, again.processes) == ((Role.planner,), {Role.planner: 0.5}, 1)
    # Every role: one queue for everything, unless asked to split; children split as their parent does.
    assert check_worker_args(parser.parse_args([])).layout is QueueLayout.shared
    split = check_worker_args(parser.parse_args(["--split-queues", "--processes", "2"]))
    assert split.layout is QueueLayout.split and child_argv(split) == [
        "--role",
        "workflow",
        "--role",
        "planner",
        "--role",
        "executor",
        "--role",
        "tools",
        "--split-queues",
    ]
    assert check_worker_args(parser.parse_args(child_argv(split))).layout is QueueLayout.split
    monkeypatch.setenv("STRATAGEM_SPLIT_QUEUES", "1")
    assert check_worker_args(parser.parse_args([])).layout is QueueLayout.split
    monkeypatch.setenv("STRATAGEM_SPLIT_QUEUES", "maybe")
    with pytest.raises(ConfigError, match="STRATAGEM_SPLIT_QUEUES=maybe is not a yes/no value"):
        check_worker_args(parser.parse_args([]))
    monkeypatch.delenv("STRATAGEM_SPLIT_QUEUES")
    monkeypatch.setenv("STRATAGEM_WORKER_ROLES", "executor,tools")
    monkeypatch.setenv("STRATAGEM_RATE_LIMITS", "executor=2")
    options = check_worker_args(parser.parse_args([]))
    assert (options.roles, options.rate_limits) == ((Role.executor, Role.tools), {Role.executor: 2.0})
    for argv, message in [
        (
            ["--rate-limit", "workflow=1"],
            "rate limit 'workflow=1' is not ROLE=N with ROLE one of planner, executor, tools",
        ),
        (["--rate-limit", "executor=fast"], "rate limit 'executor=fast': N must be a positive number"),
        (["--rate-limit", "executor=0"], "rate limit 'executor=0': N must be a positive number"),
        (["--processes", "0"], "--processes must be at least 1"),
    ]:
        with pytest.raises(ConfigError, match=message):
            check_worker_args(parser.parse_args(argv))
    monkeypatch.setenv("STRATAGEM_WORKER_ROLES", "planer")
    with pytest.raises(ConfigError, match="unknown worker role 'planer'"):
        check_worker_args(parser.parse_args([]))


@pytest.mark.parametrize("layout", [QueueLayout.shared, QueueLayout.split])
@pytest.mark.system
async def test_one_worker_for_every_role_keeps_activities_on_the_workflow_queue(dev_env, tmp_path, layout):
    """A worker serving every role sends a run's activities to the workflow's own queue, where the
    server can hand them straight back to it (the fast path); asked to split, it uses the role
    queues. Either way the run's outcome is the same."""
    script = tmp_path / "models.yaml"
    script.write_text(yaml.safe_dump({"executor": {"draft": "Welcome aboard, Ada."}, "synthesis": "Ada is on board."}))
    plan = {
        "goal": "welcome ada",
        "steps": [
            step("profile", "fetch_profile", user="ada"),
            {"id": "draft", "title": "Draft", "kind": "llm", "instructions": "Write a welcome."},
            step("note", "record", ["profile", "draft"], label="sent: ${draft}"),
        ],
    }
    planner = tmp_path / "planner.yaml"
    planner.write_text(yaml.safe_dump({"planner": [{"plan": plan}]}))
    options = RunOptions(
        auto_approve=True,
        planner=f"scripted:{planner}",
        executor=f"scripted:{script}",
        synthesizer=f"scripted:{script}",
    )
    queue = f"layout-{uuid.uuid4().hex[:8]}"
    registry = ToolRegistry.from_modules([FIXTURE_TOOLS])
    async with build_worker(
        dev_env.client, task_queue=queue, registry=registry, workspace=tmp_path / "ws", layout=layout
    ):
        run = await start_run(dev_env.client, RunInput(goal="welcome ada", options=options), task_queue=queue)
        result = await asyncio.wait_for(run.result(), timeout=60)
    assert result.status is Phase.succeeded and result.outputs["note"] == "sent: Welcome aboard, Ada."
    queues: dict[str, set[str]] = {}
    for event in (await run.handle.fetch_history()).events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attributes = event.activity_task_scheduled_event_attributes
            queues.setdefault(attributes.activity_type.name, set()).add(attributes.task_queue.name)
    expected = {
        activity_io.PLAN: Role.planner,
        activity_io.SYNTHESIZE: Role.planner,
        activity_io.RUN_LLM: Role.executor,
        activity_io.RUN_TOOL: Role.tools,
    }
    for activity_type, role in expected.items():
        want = queue if layout is QueueLayout.shared else role_queue(queue, role)
        assert queues[activity_type] == {want}, activity_type


@pytest.mark.unit
def test_a_shared_layout_needs_every_role(tmp_path):
    with pytest.raises(ConfigError, match="a shared queue layout needs a worker that serves every role"):
        build_worker(
            None,
            task_queue="q",
            registry=ToolRegistry(),
            workspace=tmp_path,
            roles=[Role.workflow],  # type: ignore[arg-type]
            layout=QueueLayout.shared,
        )


@pytest.mark.system
async def test_a_fan_out_starts_every_branch_with_the_workflow_task_that_scheduled_it(dev_env, tmp_path):
    """On a worker serving every role, the steps one workflow task starts come back with its
    completion (eager activities; stratagem.worker.EAGER_ACTIVITIES), instead of 3 at once and
    the rest a poll each: the branches of a fan-out start together."""
    width = 12
    plan = {"goal": "fan out", "steps": [step(f"b{i}", "add", a=i, b=1) for i in range(width)]}
    queue = f"fan-{uuid.uuid4().hex[:8]}"
    registry = ToolRegistry.from_modules([FIXTURE_TOOLS])
    async with build_worker(dev_env.client, task_queue=queue, registry=registry, workspace=tmp_path / "ws"):
        run = await start_run(
            dev_env.client,
            RunInput(plan=plan, options=RunOptions(auto_approve=True, max_parallel=width)),
            task_queue=queue,
        )
        result = await asyncio.wait_for(run.result(), timeout=60)
    assert result.status is Phase.succeeded and len(result.outputs) == width
    events = (await run.handle.fetch_history()).events
    tools = {
        e.event_id
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == activity_io.RUN_TOOL
    }
    started = [
        e.event_time.ToNanoseconds()
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
        and e.activity_task_started_event_attributes.scheduled_event_id in tools
    ]
    assert len(started) == width
    # Eager activities are started as the server records the workflow task's completion: one
    # timestamp for all. Polled ones start one by one, milliseconds apart.
    assert max(started) - min(started) < 1_000_000, (max(started) - min(started)) / 1e6


@pytest.mark.system
async def test_a_worker_without_external_storage_visits_payloads_in_line(dev_env, tmp_path, monkeypatch):
    """The SDK's external-storage pass over each activation and completion ran every payload in a
    task of its own (three at a time), though no external storage is configured (the claim
    checks are a codec). One at a time it runs in line: no bounded visitor, no tasks. A worker
    given the option keeps it."""
    from temporalio.bridge import _visitor_functions

    bounded: list[int] = []
    real_init = _visitor_functions.BoundedVisitorFunctions.__init__

    def counting(self, inner, concurrency_limit):  # type: ignore[no-untyped-def]
        bounded.append(concurrency_limit)
        real_init(self, inner, concurrency_limit)

    monkeypatch.setattr(_visitor_functions.BoundedVisitorFunctions, "__init__", counting)
    plan = {"goal": "two steps", "steps": [step("a", "add", a=1, b=2), step("b", "add", a=3, b=4)]}
    registry = ToolRegistry.from_modules([FIXTURE_TOOLS])
    for options, expected in (({}, []), ({"max_workflow_task_external_storage_concurrency": 4}, [4])):
        queue = f"visit-{uuid.uuid4().hex[:8]}"
        bounded.clear()
        async with build_worker(dev_env.client, task_queue=queue, registry=registry, workspace=tmp_path, **options):
            run = await start_run(
                dev_env.client, RunInput(plan=plan, options=RunOptions(auto_approve=True)), task_queue=queue
            )
            result = await asyncio.wait_for(run.result(), timeout=60)
        assert result.status is Phase.succeeded
        assert sorted(set(bounded)) == expected and (not expected or len(bounded) >= 4)
