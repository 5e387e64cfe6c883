"""A decision sent while a lost worker's workflow task waits on its dead sticky queue.

Real processes on the dev server. A run's workflow worker is SIGKILLed while its step `a` runs on
a separate tools worker; `a` ends, and the workflow task that processes its end waits on the dead
worker's sticky queue (~10 s). A query sent just before `a` ended waits there too, then goes to a
new workflow worker, which answers it by replaying the history, `a`'s end included, and keeps the
run it built: the question `a`'s end asks shows. A decision sent at once reaches the run in the
task that records `a`'s end, after it on this worker, before it on a replay (which applies an
update first in its activation): a nondeterminism error. The run refuses such a decision as too
soon, which leaves no trace in history; the client sends it again and it is taken in a task of
its own. Each history is replayed.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support import CRASH_TOOLS
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.worker import Replayer

from stratagem.client import RunHandle, decision_signer, start_run
from stratagem.common.workflow_errors import DecisionTooSoon
from stratagem.domain.decisions import Kind, kinds
from stratagem.domain.plan import Author, AuthorKind, PlanDraft
from stratagem.domain.run_types import (
    AnswerInput,
    ApproveInput,
    DecisionInput,
    DecisionOutcome,
    PendingDecision,
    Phase,
    RepairAction,
    RepairInput,
    RunInput,
)
from stratagem.io.payloads import stratagem_data_converter
from stratagem.temporal.plugin import StratagemPlugin
from stratagem.workflows import StratagemRun

pytestmark = pytest.mark.system

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW


class Processes:
    """`python worker.py --role ...` processes, SIGKILLed at the end."""

    def __init__(self, env: dict[str, str], logs: Path) -> None:
        self.env, self.logs = env, logs
        self.all: list[subprocess.Popen[bytes]] = []

    def start(self, role: str) -> subprocess.Popen[bytes]:
        with (self.logs / f"worker-{len(self.all)}-{role}.log").open("wb") as log:
            process = subprocess.Popen(
                [sys.executable, "worker.py", "--tools", CRASH_TOOLS, "--role", role],
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        self.all.append(process)
        return process

    def close(self) -> None:
        for process in self.all:
            if process.poll() is None:
                os.kill(process.pid, signal.SIGKILL)
                process.wait(timeout=10)


async def polling(client: Any, queue: str, kind: TaskQueueType.ValueType, pid: int, seconds: float = 45) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        described = await client.workflow_service.describe_task_queue(
            DescribeTaskQueueRequest(namespace=client.namespace, task_queue=TaskQueue(name=queue), task_queue_type=kind)
        )
        if any(p.identity.split("@")[0] == str(pid) for p in described.pollers):
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"worker {pid} never polled {queue}")


async def until(run: RunHandle, check: Callable[[Any], bool], seconds: float = 60) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        status = await run.status()
        if check(status):
            return status
        await asyncio.sleep(0.1)
    raise AssertionError(f"run {run.id} never got there: {(await run.status()).model_dump(mode='json')}")


async def asked_early(run: RunHandle, workspace: Path, killed: float, text: str, step_id: str) -> PendingDecision:
    """Send queries 1 to 5 s after the kill (each waits on the dead worker's sticky queue, then
    goes to the new worker about 10 s later), end `a` at 6 s (the server still takes the dead
    worker for a poller of its sticky queue: the run's task waits there until ~16 s), and return
    the decision on `step_id` that the first query to show one shows (from ~11 s)."""
    shown: asyncio.Queue[PendingDecision] = asyncio.Queue()

    async def ask() -> None:
        status = await run.status()
        for pending in status.pending:
            if pending.step_id == step_id:
                shown.put_nowait(pending)

    queries = []
    for at in (1.0, 2.0, 3.0, 4.0, 5.0):
        await asyncio.sleep(max(0.0, at - (time.monotonic() - killed)))
        queries.append(asyncio.create_task(ask()))
    await asyncio.sleep(max(0.0, 6.0 - (time.monotonic() - killed)))
    (workspace / "go").write_text(text)
    try:
        return await asyncio.wait_for(shown.get(), timeout=40)
    finally:
        for query in queries:
            query.cancel()


def wait_step(depends: dict[str, Any]) -> PlanDraft:
    return PlanDraft.model_validate(
        {
            "goal": "fetch, then what depends on it",
            "steps": [{"id": "a", "title": "a", "tool": "crash_wait_for", "args": {"name": "go"}}, depends],
        }
    )


def then(tool: dict[str, Any]) -> dict[str, Any]:
    return {"id": "b", "title": "b", "depends_on": ["a"], **tool}


# (plan, what a's file says, the step whose decision is asked, the kind, the decision, b's output)
RACES = {
    "gated step": (
        then({"tool": "crash_work", "args": {"label": "${a}", "seconds": 0.1}, "requires_approval": True}),
        "fetched",
        "b",
        kinds.APPROVE,
        lambda p: ApproveInput(by="ops", step_id="b", digest=p.preview.digest),
        "fetched",
    ),
    "human step": (
        then({"kind": "human", "instructions": "Go on with ${a}?"}),
        "fetched",
        "b",
        kinds.ANSWER,
        lambda p: AnswerInput(by="ops", step_id="b", answer="yes"),
        "yes",
    ),
    "repair": (
        then({"tool": "crash_work", "args": {"label": "${a}", "seconds": 0.1}}),
        "failed upstream",
        "a",
        kinds.REPAIR,
        lambda p: RepairInput(by="ops", action=RepairAction.skip, step_id="a", output="by hand"),
        "by hand",
    ),
}


@pytest.mark.parametrize("race", list(RACES))
async def test_a_decision_sent_while_the_lost_workers_task_waits_is_taken_once_and_replays(dev_env, tmp_path, race):
    depends, text, step_id, kind, decide, output = RACES[race]
    client = dev_env.client
    task_queue = f"race-{uuid.uuid4().hex[:8]}"
    workspace = tmp_path / "ws"
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": client.service_client.config.target_host,
        "TEMPORAL_NAMESPACE": "default",
        "TEMPORAL_TASK_QUEUE": task_queue,
        "STRATAGEM_WORKSPACE": str(workspace),
    }
    processes = Processes(env, tmp_path)
    try:
        tools = processes.start("tools")  # a runs here, and ends while the run's task is stuck
        first = processes.start("workflow")
        await polling(client, f"{task_queue}-tools", TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY, tools.pid)
        await polling(client, task_queue, WORKFLOW, first.pid)
        author = Author(kind=AuthorKind.human, name="ops")
        run = await start_run(client, RunInput(plan=wait_step(depends), author=author), task_queue=task_queue)
        await until(run, lambda s: s.phase is Phase.awaiting_approval)
        await run.approve(ApproveInput(by="ops", revision=1))
        await until(run, lambda s: (workspace / "go.started").exists())
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=10)
        killed = time.monotonic()
        second = processes.start("workflow")
        await polling(client, task_queue, WORKFLOW, second.pid)
        pending = await asked_early(run, workspace, killed, text, step_id)
        decision = decide(pending)
        # Sent at once (signed as the client signs, but without its second try), it reaches the run
        # in the task that records a's end: refused as too soon, and nothing recorded.
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await run.handle.execute_update(kind.update, await signed(run, kind, decision), result_type=DecisionOutcome)
        assert isinstance(refused.value.cause, ApplicationError)
        assert refused.value.cause.type == DecisionTooSoon.__name__, refused.value.cause
        outcome = await run.decide(kind, decision)  # the client sends it again until it is taken
        assert outcome.accepted, outcome
        result = await asyncio.wait_for(run.result(), timeout=60)
        ledger = await run.ledger()  # a query on a worker that replays the whole history
    finally:
        processes.close()
    assert result.status is Phase.succeeded, result
    assert result.outputs == {"b": output}
    taken = [e for e in ledger.events if e.actor == "ops" and e.step_id == step_id]
    assert len(taken) == 1, [(e.kind, e.message) for e in ledger.events]  # taken once
    replayer = Replayer(workflows=[StratagemRun], plugins=[StratagemPlugin(stratagem_data_converter)])
    await replayer.replay_workflow(await run.handle.fetch_history())


async def signed(run: RunHandle, kind: Kind, decision: DecisionInput) -> DecisionInput:
    signer = decision_signer(decision.by, run.signer, run.keyring)
    return signer.sign(run.id, kind.update, decision, await run.execution())
