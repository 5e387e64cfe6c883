"""Running one job on one framework: its worker process, the run, and what it cost.

Every job gets a fresh worker process (`python -m bench.peers.worker NAME`), so its peak memory
is the job's. The figures:

- wall time from the start call to the result;
- CPU of the worker's workflow task threads over the job (workflow code, the framework's and
  the SDK's work around it), from the meter the worker writes (bench/peers/worker.py);
- the worker's peak resident memory (VmHWM) at the end;
- the history of every execution of the workflow (continue-as-new chains followed): events and
  serialized bytes (the protobuf a worker replays), the largest execution's too;
- for Stratagem, the bytes its store gained (large values live there, not in the history);
- the effect log: calls made, calls made twice, calls missing.

Each worker first runs a one-call job, not measured (a warm-up, as in the rest of the suite).
A job that does not finish within its deadline is terminated and reported with what held it
(the last workflow task failure in its history); one that fails, with its failure. With
`kill_after=k` the worker is SIGKILLed as soon as the k-th effect is logged (while that tool
call is still running: the tool waits after its effect), and started again at once; the time to
resume is from the kill to the next effect logged.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from temporalio.api.history.v1 import History
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle

from stratagem.client import execution_histories

from ..common import REPO_DIR, Bench, wait_for_pollers, worker_env
from ..meters import read_proc_status
from .jobs import Job
from .tools import EFFECT_LOG_ENV, logged
from .worker import METER_ENV

WARM_UP = Job("seq", 1, 100)


@dataclass(frozen=True)
class Variant:
    """One column of the comparison: a framework, used one way."""

    name: str  # key in the results
    label: str
    worker: str  # bench.peers.worker's argument
    module: Any  # its bench/peers/*_job.py
    joint: bool = False

    @property
    def is_stratagem(self) -> bool:
        return self.worker == "stratagem"

    async def start(self, client: Client, job: Job, workflow_id: str, task_queue: str, llm_url: str) -> Any:
        if self.is_stratagem:
            return await self.module.start(
                client, job, workflow_id=workflow_id, task_queue=task_queue, llm_url=llm_url, joint=self.joint
            )
        return await self.module.start(client, job, workflow_id=workflow_id, task_queue=task_queue)

    def completed(self, job: Job, result: Any) -> tuple[bool, str]:
        if self.is_stratagem:
            status = result.status.value
            return status == "succeeded", status if status == "succeeded" else f"{status}: {result.reason}"
        text = str(result)
        return text == job.answer(job.calls), text[:200]


class WorkerProcess:
    """A framework's worker process, which can be killed and started again."""

    def __init__(self, bench: Bench, variant: Variant, task_queue: str, env: dict[str, str], tag: str):
        self.bench, self.variant, self.task_queue, self.env = bench, variant, task_queue, env
        self.log_path = bench.root / f"peers-{tag}-worker.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "bench.peers.worker", self.variant.worker],
                cwd=REPO_DIR,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def memory(self) -> dict[str, int]:
        return read_proc_status(self.proc.pid) if self.proc is not None else {}

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.kill()


def _meter(path: Path, after: float) -> dict[str, Any]:
    """The worker's meter, written after `after` (time.time()); waits up to 5 s for it."""
    deadline = time.monotonic() + 5
    while True:
        try:
            sample: dict[str, Any] = json.loads(path.read_text())
            if sample["at"] >= after:
                return sample
        except (OSError, ValueError, KeyError):
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"the worker wrote no meter to {path} (see its log)")
        time.sleep(0.05)


def _tree_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) if root.exists() else 0


def _held_by(histories: list[Any]) -> str:
    """What ended or held a workflow that did not complete, from its last history."""
    for event in reversed(histories[-1].events):
        kind = event.WhichOneof("attributes") or ""
        attributes = getattr(event, kind)
        if kind == "workflow_task_failed_event_attributes":
            return f"workflow task failed: {attributes.failure.message[:300]}"
        if kind in ("workflow_execution_failed_event_attributes",):
            return f"failed: {attributes.failure.message[:300]}"
        if kind == "workflow_execution_terminated_event_attributes":
            continue  # terminated by the bench's deadline: look further back
        if kind == "activity_task_failed_event_attributes":
            return f"activity failed: {attributes.failure.message[:300]}"
    return "no failure recorded"


async def _wait_for_effects(path: Path, count: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while len(logged(path)) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{count} effects were not logged within {timeout:.0f} s")
        await asyncio.sleep(0.01)


async def run_job(
    bench: Bench,
    llm_url: str,
    variant: Variant,
    client: Client,
    job: Job,
    *,
    name: str,
    deadline: float,
    kill_after: int | None = None,
) -> dict[str, Any]:
    tag = f"{variant.name}-{name}"
    task_queue = bench.task_queue(f"peers-{variant.name}")
    effects = bench.root / f"peers-{tag}-effects.log"
    meter = bench.root / f"peers-{tag}-meter.json"
    env = worker_env(bench, task_queue)
    env.pop("OPENAI_API_KEY", None)
    env.update({"PEERS_LLM_URL": llm_url, EFFECT_LOG_ENV: str(effects), METER_ENV: str(meter)})
    env["OPENAI_AGENTS_DISABLE_TRACING"] = "1"
    worker = WorkerProcess(bench, variant, task_queue, env, tag)
    worker.start()
    out: dict[str, Any] = {"job": job.model, "tool_calls": job.calls}
    try:
        await wait_for_pollers(client, task_queue)
        # One call first, as every measure of the suite warms up: what a framework does once per
        # process (Stratagem imports the openai SDK at its first model call, half a second) is
        # not a cost per job. Its effect is wiped from the log.
        warm = await variant.start(client, WARM_UP, f"peers-{tag}-warm-{uuid.uuid4().hex[:6]}", task_queue, llm_url)
        await asyncio.wait_for(warm.result(), 60)
        effects.unlink(missing_ok=True)
        idle = _meter(meter, time.time())
        out["idle_rss_kib"] = idle["rss_kib"]
        store_before = _tree_bytes(bench.store.root)
        workflow_id = f"peers-{tag}-{uuid.uuid4().hex[:6]}"
        started = time.perf_counter()
        handle: WorkflowHandle[Any, Any] = await variant.start(client, job, workflow_id, task_queue, llm_url)
        if kill_after is not None:
            await _wait_for_effects(effects, kill_after, deadline)
            worker.kill()
            killed = time.perf_counter()
            out["killed_after_effects"] = len(logged(effects))
            worker.start()
            await _wait_for_effects(effects, out["killed_after_effects"] + 1, deadline)
            out["resume_s"] = time.perf_counter() - killed
        try:
            result = await asyncio.wait_for(handle.result(), deadline - (time.perf_counter() - started))
            out["completed"], out["outcome"] = variant.completed(job, result)
        except TimeoutError:
            await handle.terminate(reason="the peers bench's deadline")
            out["completed"], out["outcome"] = False, f"did not finish in {deadline:.0f} s"
        except WorkflowFailureError as exc:
            cause = exc.cause
            out["completed"], out["outcome"] = False, f"failed: {getattr(cause, 'message', str(cause))[:300]}"
        out["wall_s"] = time.perf_counter() - started
        if kill_after is None:
            done = _meter(meter, time.time())
            out["workflow_cpu_s"] = done["workflow_threads_cpu_s"] - idle["workflow_threads_cpu_s"]
            out["worker_cpu_s"] = done["cpu_s"] - idle["cpu_s"]
        out["peak_rss_kib"] = worker.memory().get("VmHWM")
        histories = await execution_histories(client, workflow_id)
        sizes = [History(events=h.events).ByteSize() for h in histories]
        out["history"] = {
            "executions": len(histories),
            "events": sum(len(h.events) for h in histories),
            "bytes": sum(sizes),
            "largest_execution_bytes": max(sizes),
        }
        if not out["completed"]:
            out["held_by"] = _held_by(histories)
        if variant.is_stratagem:
            out["store_bytes"] = _tree_bytes(bench.store.root) - store_before
        calls = [index for index, _key in logged(effects)]
        out["effects"] = len(calls)
        out["twice"] = len(calls) - len(set(calls))
        out["missing"] = job.calls - len(set(calls)) if out["completed"] else None
    finally:
        worker.stop()
    return out


def env_without_keys() -> None:
    """The peers bench sends no API key anywhere: the model server is local."""
    os.environ.pop("OPENAI_API_KEY", None)
    os.environ["OPENAI_AGENTS_DISABLE_TRACING"] = "1"
