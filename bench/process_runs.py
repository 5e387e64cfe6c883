"""process_runs: what a run of a process costs on its way to its first step, against a plain plan.

Both runs need nobody: the plain plan approves itself (`auto_approve`, signed by the bench's
home key), the process run is approved by a standing approval granted once (signed the same
way). What the process adds is on the path measured: rendering its plan in an activity
(`stratagem.prepare_process`), then, at its review, an activity that reads the standing approvals'
registry (a query to another workflow) and checks each grant's signature. The figure: the first
step's start (the `stamp` tool records time.time()) minus the moment the start call was sent,
median and p95 over interleaved runs. Client, worker and tools share one process, so one clock.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from stratagem.client import start_run
from stratagem.domain.plan import PlanDraft
from stratagem.domain.process import ProcessRun, ProcessSpec
from stratagem.domain.run_types import RunInput, RunOptions
from stratagem.standing_approvals import grant_standing

from .common import Bench, Goal, Row, log, median, p95, ratio

NAME = "process_runs"

SPEC = ProcessSpec(
    name="bench-stamp",
    inputs={"label": {"type": "string"}, "amount": {"type": "integer", "minimum": 0}},
    goal="stamp ${inputs.label}",
    steps=[{"id": "first", "title": "stamp ${inputs.label}", "tool": "stamp", "args": {"label": "${inputs.label}"}}],
)


async def _first_step(bench: Bench, tq: str, run: RunInput) -> float:
    sent = time.time()
    handle = await start_run(bench.client, run, task_queue=tq, run_id=f"bench-{uuid.uuid4().hex[:10]}")
    result = await handle.result()
    if result.status.value != "succeeded":
        raise RuntimeError(f"run {handle.id} ended {result.status.value}: {result.reason}")
    return float(result.outputs["first"]["start"]) - sent


def _plain(i: int) -> RunInput:
    plan = PlanDraft.model_validate(
        {"goal": f"stamp p{i}", "steps": [{"id": "first", "title": "stamp", "tool": "stamp", "args": {"label": "x"}}]}
    )
    return RunInput(plan=plan, options=RunOptions(auto_approve=True))


def _process(i: int) -> RunInput:
    return RunInput(process=ProcessRun(spec=SPEC, inputs={"label": f"p{i}", "amount": abs(i)}))


async def run(bench: Bench) -> dict[str, Any]:
    n = 5 if bench.quick else 20
    samples: dict[str, list[float]] = {"process": [], "plain": []}
    async with bench.worker(NAME) as tq:
        await grant_standing(bench.client, SPEC, by="bench", bounds=["amount<=100000"], task_queue=tq)
        await _first_step(bench, tq, _plain(-1))  # warm-up
        await _first_step(bench, tq, _process(-1))
        for i in range(n):  # interleaved
            samples["process"].append(await _first_step(bench, tq, _process(i)))
            samples["plain"].append(await _first_step(bench, tq, _plain(i)))
    ms = {name: {"median": 1000 * median(s), "p95": 1000 * p95(s)} for name, s in samples.items()}
    for name, m in ms.items():
        log(f"{name}: start -> first step median {m['median']:.1f} ms (p95 {m['p95']:.1f})")
    proc, plain = ms["process"], ms["plain"]
    added = proc["median"] - plain["median"]
    rows = [
        Row(
            f"start -> first step, process run approved by a standing approval, median ({n} runs)",
            proc["median"],
            plain["median"],
            "ms",
            ratio(proc["median"], plain["median"]),
            note="baseline: a plain plan that approves itself (auto_approve)",
        ),
        Row("  same, p95", proc["p95"], plain["p95"], "ms", ratio(proc["p95"], plain["p95"])),
        # Absolute: a process run renders its plan and reads the registry (two activities, one
        # query) where the plain run does neither, so the ratio says little; what a user would
        # notice is the time added before the first step, against a review or a monthly cadence.
        Row(
            "  added before the first step, median",
            added,
            None,
            "ms",
            None,
            Goal.at_most(100),
            goal_on="stratagem",
            note="rendering the plan and reading the standing approvals",
        ),
    ]
    return {
        "rows": [r.as_dict() for r in rows],
        "details": {"runs": n, "ms": ms, "samples_s": samples},
    }
