"""concurrency: many runs at once on one worker.

100 runs (quick: 25) of a 10-step chain of no-op tool steps, all started together on one
in-process worker, against 100 bare workflows (`BareChain`) of 10 no-op activities on the same
worker. The figure is steps per second: all steps ÷ the wall time from the first start to the
last result. After one full-size burst of each side (warm-up), each side runs 3 times (quick:
once), alternating which goes first; the median counts.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from .common import Bench, Goal, Row, chain_plan, log, median, ratio

NAME = "concurrency"
STEPS = 10


async def _stratagem(bench: Bench, tq: str, runs: int) -> float:
    start = time.perf_counter()
    handles = await asyncio.gather(
        *(bench.start(tq, chain_plan(STEPS, "noop"), auto_approve=True) for _ in range(runs))
    )
    results = await asyncio.gather(*(h.result() for h in handles))
    elapsed = time.perf_counter() - start
    failed = [r for r in results if r.status.value != "succeeded"]
    if failed:
        raise RuntimeError(f"{len(failed)} of {runs} runs did not succeed: {failed[0].reason}")
    return elapsed


async def _bare(bench: Bench, tq: str, runs: int) -> float:
    start = time.perf_counter()
    await asyncio.gather(*(bench.run_bare(tq, "BareChain", STEPS, result_type=int) for _ in range(runs)))
    return time.perf_counter() - start


async def run(bench: Bench) -> dict[str, Any]:
    runs = 25 if bench.quick else 100
    reps = 1 if bench.quick else 3
    s_times, b_times = [], []
    async with bench.worker(NAME) as tq:
        # Warm-up at full size: the first burst of a worker pays for growing its thread pool and
        # workflow cache, and the server for its task queue; whichever side went first paid it.
        await _stratagem(bench, tq, runs)
        await _bare(bench, tq, runs)
        for rep in range(reps):
            # Alternating which side goes first, so neither always runs on a server that has
            # just absorbed the other's burst.
            if rep % 2 == 0:
                s_times.append(await _stratagem(bench, tq, runs))
                b_times.append(await _bare(bench, tq, runs))
            else:
                b_times.append(await _bare(bench, tq, runs))
                s_times.append(await _stratagem(bench, tq, runs))
            log(
                f"rep {rep + 1}/{reps}: stratagem {runs * STEPS / s_times[-1]:.0f} steps/s, bare {runs * STEPS / b_times[-1]:.0f} steps/s"
            )
    steps = runs * STEPS
    s_rate, b_rate = steps / median(s_times), steps / median(b_times)
    rows = [
        Row(
            f"{runs} runs x {STEPS} steps at once: throughput",
            s_rate,
            b_rate,
            "steps/s",
            ratio(s_rate, b_rate),
            Goal.at_least(0.90),
            note="ratio < 1: Stratagem is slower",
        ),
        Row("  wall time for all runs", median(s_times), median(b_times), "s", ratio(median(s_times), median(b_times))),
    ]
    return {
        "rows": [r.as_dict() for r in rows],
        "details": {
            "runs": runs,
            "steps_per_run": STEPS,
            "reps": reps,
            "stratagem_wall_s": s_times,
            "bare_wall_s": b_times,
            "stratagem_steps_per_s": s_rate,
            "bare_steps_per_s": b_rate,
        },
    }
