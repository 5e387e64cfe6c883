"""What the crash tests share (tests/test_crash.py, tests/test_crash_effects.py): `python worker.py`
processes started and SIGKILLed by a test, waits for their pollers, for a run's state and for
evidence on disk, the plans of slow steps with side effects, and what those steps leave behind.
"""

from __future__ import annotations

import asyncio
import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import DescribeTaskQueueMode, TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest

from stratagem.client import RunHandle
from support import CRASH_TOOLS

ROOT = Path(__file__).resolve().parents[2]
"""The repository: where worker processes run (`python worker.py`)."""

SEED = int(os.environ.get("CRASH_SEED", "20251121"))
"""The seed of the kill schedules; set CRASH_SEED to replay a particular one."""


def work(id: str, label: str, seconds: float, depends_on: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    """A plan step of the tool `crash_work` (tests/support/crash_tools.py): `seconds` slow, one side effect."""
    return {
        "id": id,
        "title": id.replace("_", " "),
        "tool": "crash_work",
        "args": {"label": label, "seconds": round(seconds, 2)},
        "depends_on": depends_on or [],
        **extra,
    }


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The records of a JSON-lines file (the tools' attempts.jsonl); none if it is not there yet."""
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def effect_rows(workspace: Path, run_id: str) -> list[dict[str, str]]:
    """The side effects the crash tools made for run `run_id`, one CSV row each."""
    path = workspace / "effects" / f"{run_id}.csv"
    if not path.exists():
        return []
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def kill(process: subprocess.Popen[Any]) -> None:
    """SIGKILL `process` if it still runs, and reap it."""
    if process.poll() is None:
        try:
            os.kill(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def kill_if_ours(pid: int, marker: str) -> None:
    """SIGKILL `pid` if it is still a process of this test: its command line or environment
    names `marker` (a folder of the test's own). A pid that died may have been reused since."""
    try:
        proc = Path(f"/proc/{pid}")
        seen = (proc / "cmdline").read_bytes() + (proc / "environ").read_bytes()
    except OSError:
        return
    if marker.encode() in seen:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


class Workers:
    """`python worker.py` processes on one task queue, started and SIGKILLed by the test."""

    def __init__(self, env: dict[str, str], logs: Path, tools: str = CRASH_TOOLS):
        self.env = env
        self.logs = logs
        self.tools = tools
        self.alive: list[subprocess.Popen[bytes]] = []
        self.killed: list[subprocess.Popen[bytes]] = []
        self.started = 0

    def start(self) -> subprocess.Popen[bytes]:
        self.started += 1
        with (self.logs / f"worker-{self.started}.log").open("wb") as log:
            process = subprocess.Popen(
                [sys.executable, "worker.py", "--tools", self.tools],
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        self.alive.append(process)
        return process

    def sigkill(self, process: subprocess.Popen[bytes]) -> None:
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
        self.alive.remove(process)
        self.killed.append(process)

    @property
    def killed_pids(self) -> set[int]:
        return {p.pid for p in self.killed}

    def close(self) -> None:
        for process in self.alive + self.killed:
            kill(process)


async def wait_for_pollers(client: Any, task_queue: str, pids: set[int], seconds: float = 45) -> None:
    """Until a worker of each pid polls the queue for activities (the SDK's identity is pid@host).
    The enhanced description gathers the pollers of every partition of the queue; the legacy one
    only the root partition's."""
    deadline = time.monotonic() + seconds
    seen: set[int] = set()
    while time.monotonic() < deadline:
        activity = TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY
        queue = TaskQueue(name=task_queue)
        legacy = await client.workflow_service.describe_task_queue(
            DescribeTaskQueueRequest(namespace=client.namespace, task_queue=queue, task_queue_type=activity)
        )
        enhanced = await client.workflow_service.describe_task_queue(
            DescribeTaskQueueRequest(
                namespace=client.namespace,
                task_queue=queue,
                task_queue_types=[activity],
                report_pollers=True,
                api_mode=DescribeTaskQueueMode.DESCRIBE_TASK_QUEUE_MODE_ENHANCED,
            )
        )
        pollers = [
            *legacy.pollers,
            *(p for v in enhanced.versions_info.values() for t in v.types_info.values() for p in t.pollers),
        ]
        seen |= {int(p.identity.split("@")[0]) for p in pollers if p.identity.split("@")[0].isdigit()}
        if pids <= seen:
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"workers {sorted(pids - seen)} never polled {task_queue}")


def wait_until(what: str, check: Any, seconds: float = 60) -> Any:
    """What `check()` returns once it is truthy, polled every 0.2 s for `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"never saw {what}")


def has_pending(kind: str) -> Any:
    """A check of a run's status: something of `kind` (e.g. "in_doubt") waits for a person."""
    return lambda status: any(p.kind.value == kind for p in status.pending)


async def run_until(run: RunHandle, check: Any, seconds: float = 60) -> Any:
    """The run's status once `check(status)` holds, polled every 0.2 s for `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        status = await run.status()
        if check(status):
            return status
        await asyncio.sleep(0.2)
    raise AssertionError(f"run {run.id} never got there: {(await run.status()).model_dump(mode='json')}")
