"""long_horizon: a 10,000-step plan (quick: 1,000) runs to the end in a worker process.

The plan is many chains of no-op steps side by side (40 chains of 250 steps, at most 32 steps in
flight), so it finishes in reasonable time while still needing continue-as-new. The worker is a
separate process, Stratagem's own `python worker.py --tools bench/tools.py`, so its memory can
be read from /proc: VmHWM (peak resident set) at the end of the run, and VmRSS once the worker
is up and idle.

Reported: wall time from start to result, continue-as-new cycles (RunStatus.continued), the
most history events in any one execution of the chain, and peak worker memory. The baseline is
a bare workflow (`BareChains`: the same chains, the same limit on activities in flight, the
same continue-as-new policy: when Temporal suggests it, let running activities finish and carry
the progress) in a bare worker process (`python -m bench.worker_proc`).
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from stratagem.client import execution_histories

from .baseline import ChainsInput, ChainsResult
from .common import (
    REPO_DIR,
    Bench,
    Goal,
    Row,
    log,
    ratio,
    wait_for_pollers,
    worker_env,
)
from .meters import read_proc_status

NAME = "long_horizon"
PARALLEL = 32


def plan_of(chains: int, length: int) -> dict[str, Any]:
    steps = []
    for c in range(chains):
        for i in range(length):
            steps.append(
                {
                    "id": f"c{c}_{i}",
                    "title": f"chain {c} step {i}",
                    "tool": "noop",
                    "depends_on": [f"c{c}_{i - 1}"] if i else [],
                }
            )
    return {"goal": f"long horizon: {chains} chains of {length} steps", "steps": steps}


@asynccontextmanager
async def worker_process(
    bench: Bench, name: str, command: list[str]
) -> AsyncIterator[tuple[subprocess.Popen[bytes], str, dict[str, Any]]]:
    """A worker process on a task queue of its own; samples its memory while it runs."""
    task_queue = bench.task_queue(name)
    log_path = bench.root / f"{name}-worker.log"
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(
            command, cwd=REPO_DIR, env=worker_env(bench, task_queue), stdout=out, stderr=subprocess.STDOUT
        )
    memory: dict[str, Any] = {"samples_kib": []}

    async def sample() -> None:
        while proc.poll() is None:
            status = read_proc_status(proc.pid)
            if "VmRSS" in status:
                memory["samples_kib"].append(status["VmRSS"])
            await asyncio.sleep(1.0)

    sampler = None
    try:
        await wait_for_pollers(bench.client, task_queue)
        await asyncio.sleep(1.0)  # let start-up allocations settle
        memory["idle_rss_kib"] = read_proc_status(proc.pid).get("VmRSS")
        sampler = asyncio.create_task(sample())
        yield proc, task_queue, memory
        memory["peak_kib"] = read_proc_status(proc.pid).get("VmHWM")
        memory["log"] = str(log_path)
    finally:
        if sampler is not None:
            sampler.cancel()
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                await asyncio.to_thread(proc.wait, 15)
            except subprocess.TimeoutExpired:
                proc.kill()
                await asyncio.to_thread(proc.wait)


def _events(histories: list[Any]) -> list[int]:
    return [len(h.events) for h in histories]  # oldest execution first


async def run(bench: Bench) -> dict[str, Any]:
    chains, length = (20, 50) if bench.quick else (40, 250)
    total = chains * length
    plan = plan_of(chains, length)

    log(f"stratagem: {total:,} steps ({chains} chains x {length}), max_parallel {PARALLEL}, worker process worker.py")
    async with worker_process(bench, "long-stratagem", [sys.executable, "worker.py", "--tools", "bench/tools.py"]) as (
        _,
        tq,
        s_mem,
    ):
        s_wall, run_handle, _ = await bench.run_plan(tq, plan, auto_approve=True, max_parallel=PARALLEL)
        status = await run_handle.status()
    s_events = _events(await execution_histories(bench.client, run_handle.id))
    if status.steps.succeeded != total:
        raise RuntimeError(f"only {status.steps.succeeded} of {total} steps succeeded")
    log(
        f"stratagem: {s_wall:.1f} s, {status.continued} continue-as-new, events per execution {s_events}, "
        f"peak RSS {s_mem['peak_kib'] / 1024:.0f} MiB (idle {s_mem['idle_rss_kib'] / 1024:.0f} MiB)"
    )

    log("bare: the same chains in BareChains, worker process bench.worker_proc")
    async with worker_process(bench, "long-bare", [sys.executable, "-m", "bench.worker_proc"]) as (_, tq, b_mem):
        b_wall, b_result, workflow_id = await bench.run_bare(
            tq, "BareChains", ChainsInput(chains=chains, length=length, parallel=PARALLEL), result_type=ChainsResult
        )
    b_events = _events(await execution_histories(bench.client, workflow_id))
    log(
        f"bare: {b_wall:.1f} s, {b_result.continued} continue-as-new, events per execution {b_events}, "
        f"peak RSS {b_mem['peak_kib'] / 1024:.0f} MiB (idle {b_mem['idle_rss_kib'] / 1024:.0f} MiB)"
    )

    s_peak, b_peak = s_mem["peak_kib"] / 1024, b_mem["peak_kib"] / 1024
    rows = [
        Row(
            f"{total:,} steps ({chains}x{length} chains, {PARALLEL} in flight): wall time",
            s_wall,
            b_wall,
            "s",
            ratio(s_wall, b_wall),
            Goal.at_most(1.20),
        ),
        Row("  ms per step", 1000 * s_wall / total, 1000 * b_wall / total, "ms/step", ratio(s_wall, b_wall)),
        Row(
            "  continue-as-new cycles",
            status.continued,
            b_result.continued,
            "",
            ratio(status.continued, b_result.continued),
        ),
        Row(
            "  most history events in one execution",
            max(s_events),
            max(b_events),
            "events",
            ratio(max(s_events), max(b_events)),
        ),
        Row(
            "  peak worker memory (VmHWM)",
            s_peak,
            b_peak,
            "MiB",
            ratio(s_peak, b_peak),
            Goal.at_most(1.5),
            note=f"idle {s_mem['idle_rss_kib'] / 1024:.0f} vs {b_mem['idle_rss_kib'] / 1024:.0f} MiB",
        ),
    ]
    return {
        "rows": [r.as_dict() for r in rows],
        "details": {
            "steps": total,
            "chains": chains,
            "length": length,
            "max_parallel": PARALLEL,
            "stratagem": {
                "wall_s": s_wall,
                "continued": status.continued,
                "events_per_execution": s_events,
                "memory_kib": s_mem,
                "run_id": run_handle.id,
            },
            "bare": {
                "wall_s": b_wall,
                "continued": b_result.continued,
                "events_per_execution": b_events,
                "memory_kib": b_mem,
                "workflow_id": workflow_id,
            },
        },
    }
