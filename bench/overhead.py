"""overhead: what Stratagem adds to each step of a sequential chain.

A chain of N no-op tool steps run by Stratagem (auto-approved), against the same N no-op
activities run one after another by a bare Temporal workflow (`BareChain`) on the same worker.
Also the `@tool(local=True)` fast path, against the bare activities and against a bare workflow
running local activities (`BareLocalChain`).

Each variant is warmed up once, then run `REPS` times, interleaved (A B C D, A B C D, ...) so
drift on a shared machine hits every variant alike; the figure is the median wall time from
start to result, divided by N. The event timestamps of the last repetition's histories break
each step's time down (workflow tasks, activity queueing, activity run time).
"""

from __future__ import annotations

from typing import Any

from stratagem.client import execution_histories
from stratagem.domain.roles import QueueLayout

from .common import (
    Bench,
    Goal,
    Row,
    chain_plan,
    log,
    median,
    ratio,
)
from .histories import history_breakdown, per_step

NAME = "overhead"
REPS = 3
GOAL = Goal.at_most(1.05)


def _sum(breakdowns: list[dict[str, Any]]) -> dict[str, Any]:
    total: dict[str, Any] = {}
    for b in breakdowns:
        for k, v in b.items():
            total[k] = total.get(k, 0) + v
    return total


async def run(bench: Bench) -> dict[str, Any]:
    n = 50 if bench.quick else 200
    async with (
        bench.worker(NAME) as tq,
        bench.worker(f"{NAME}-split", layout=QueueLayout.split) as split_tq,
        bench.plain_worker(NAME) as (plain, plain_tq),
    ):

        def variants(steps: int) -> dict[str, Any]:
            return {
                "stratagem": lambda: bench.run_plan(tq, chain_plan(steps, "noop"), auto_approve=True),
                "stratagem_local": lambda: bench.run_plan(tq, chain_plan(steps, "noop_local"), auto_approve=True),
                "stratagem_split": lambda: bench.run_plan(split_tq, chain_plan(steps, "noop"), auto_approve=True),
                "bare": lambda: bench.run_bare(tq, "BareChain", steps, result_type=int),
                "bare_local": lambda: bench.run_bare(tq, "BareLocalChain", steps, result_type=int),
                "plain": lambda: bench.run_bare(plain_tq, "BareChain", steps, result_type=int, client=plain),
            }

        for factory in variants(20).values():  # warm-up: imports, caches, the sandbox
            await factory()
        times: dict[str, list[float]] = {k: [] for k in variants(n)}
        ids: dict[str, str] = {}
        for rep in range(REPS):
            for name, factory in variants(n).items():
                out = await factory()
                times[name].append(out[0])
                ids[name] = out[1].id if name.startswith("stratagem") else out[2]
            log(f"rep {rep + 1}/{REPS}: " + ", ".join(f"{k} {1000 * v[-1] / n:.1f} ms/step" for k, v in times.items()))

    ms = {k: 1000 * median(v) / n for k, v in times.items()}
    breakdown = {}
    for name, workflow_id in ids.items():
        histories = await execution_histories(bench.client, workflow_id)
        breakdown[name] = per_step(_sum([history_breakdown(h) for h in histories]), n)
        breakdown[name]["local_activity_markers"] = sum(
            history_breakdown(h)["local_activity_markers"] for h in histories
        )
    # Count the markers, so the table says which path the `noop_local` steps really took.
    local_path_active = breakdown["stratagem_local"]["local_activity_markers"] >= n

    rows = [
        Row(
            f"chain of {n} no-op tool steps vs bare activities",
            ms["stratagem"],
            ms["bare"],
            "ms/step",
            ratio(ms["stratagem"], ms["bare"]),
            GOAL,
            note="bare: the same worker, converter and codecs",
        ),
        Row(
            "  the same, each role on its own queue (--split-queues)",
            ms["stratagem_split"],
            ms["bare"],
            "ms/step",
            ratio(ms["stratagem_split"], ms["bare"]),
            note="the price of scaling roles apart: a task-queue hop per step",
        ),
        Row(
            f"chain of {n} no-op tool steps vs plain Temporal",
            ms["stratagem"],
            ms["plain"],
            "ms/step",
            ratio(ms["stratagem"], ms["plain"]),
            note="plain: a worker with every SDK default",
        ),
        Row(
            "  bare activities on Stratagem's worker vs plain Temporal",
            ms["bare"],
            ms["plain"],
            "ms/step",
            ratio(ms["bare"], ms["plain"]),
            note="what the worker setup costs on its own",
        ),
        Row(
            f"chain of {n} local=True tool steps vs bare activities",
            ms["stratagem_local"],
            ms["bare"],
            "ms/step",
            ratio(ms["stratagem_local"], ms["bare"]),
            note="" if local_path_active else "local path not taken: ran as normal activities",
        ),
        Row(
            f"chain of {n} local=True tool steps vs bare local activities",
            ms["stratagem_local"],
            ms["bare_local"],
            "ms/step",
            ratio(ms["stratagem_local"], ms["bare_local"]),
        ),
    ]
    return {
        "rows": [row.as_dict() for row in rows],
        "details": {
            "steps": n,
            "reps": REPS,
            "wall_seconds": times,
            "ms_per_step_median": ms,
            "local_path_active": local_path_active,
            "breakdown_ms_per_step": breakdown,
            "workflow_ids": ids,
        },
    }
