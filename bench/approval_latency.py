"""approval_latency: how soon the first step starts once a person approves.

A run of one `stamp` step (the tool records time.time() as it starts) waits for approval; once
it waits, the bench sends `approve` (an update: it returns once the workflow applied it) and
notes the time before sending and after it returned. The bare baselines: a workflow waiting
for a signal (`BareSignalled.go`) or an update (`go_update`), then starting one activity that
records its start time. Client, worker and tools share one process, so one clock.

Two figures each, median and p95 over the runs:

- from return: first step's start minus the moment the decision call returned. The figure the
  brief asks for; it is not like for like, because a signal returns once the server has it
  (before the workflow saw it) while an update returns once the workflow has applied it (and,
  in the same workflow task, scheduled the step), so it can even be negative.
- from send: first step's start minus the moment the decision was sent: the whole way from a
  person's decision to work starting, comparable across the three.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from stratagem.domain.run_types import ApproveInput, Phase

from .common import Bench, Goal, Row, log, median, p95, ratio

NAME = "approval_latency"
SETTLE = 0.3  # seconds between "waiting" being visible and the decision, so nothing else is in flight


async def _stratagem(bench: Bench, tq: str) -> tuple[float, float]:
    plan = {
        "goal": "approval latency",
        "steps": [{"id": "first", "title": "first", "tool": "stamp", "args": {"label": "first"}}],
    }
    run = await bench.start(tq, plan)
    while (await run.status()).phase is not Phase.awaiting_approval:
        await asyncio.sleep(0.02)
    await asyncio.sleep(SETTLE)
    sent = time.time()
    await run.approve(ApproveInput(by="bench", revision=1))
    returned = time.time()
    result = await run.result()
    started = result.outputs["first"]["start"]
    return started - returned, started - sent


async def _bare(bench: Bench, tq: str, via_update: bool) -> tuple[float, float]:
    handle = await bench.client.start_workflow(
        "BareSignalled", id=f"bare-{uuid.uuid4().hex[:10]}", task_queue=tq, result_type=float
    )
    while not await handle.query("ready", result_type=bool):
        await asyncio.sleep(0.02)
    await asyncio.sleep(SETTLE)
    sent = time.time()
    if via_update:
        await handle.execute_update("go_update", result_type=bool)
    else:
        await handle.signal("go")
    returned = time.time()
    started = await handle.result()
    return started - returned, started - sent


async def run(bench: Bench) -> dict[str, Any]:
    n = 5 if bench.quick else 20
    samples: dict[str, list[tuple[float, float]]] = {"stratagem": [], "bare_signal": [], "bare_update": []}
    async with bench.worker(NAME) as tq:
        await _stratagem(bench, tq)  # warm-up
        await _bare(bench, tq, False)
        await _bare(bench, tq, True)
        for _ in range(n):  # interleaved
            samples["stratagem"].append(await _stratagem(bench, tq))
            samples["bare_signal"].append(await _bare(bench, tq, False))
            samples["bare_update"].append(await _bare(bench, tq, True))
    ms = {
        name: {
            "from_return_median": 1000 * median([r for r, _ in s]),
            "from_return_p95": 1000 * p95([r for r, _ in s]),
            "from_send_median": 1000 * median([x for _, x in s]),
            "from_send_p95": 1000 * p95([x for _, x in s]),
        }
        for name, s in samples.items()
    }
    for name, m in ms.items():
        log(
            f"{name}: from return median {m['from_return_median']:.1f} ms (p95 {m['from_return_p95']:.1f}); "
            f"from send median {m['from_send_median']:.1f} ms (p95 {m['from_send_p95']:.1f})"
        )
    s, sig, upd = ms["stratagem"], ms["bare_signal"], ms["bare_update"]
    rows = [
        Row(
            f"approve -> first step starts, from the call's return, median ({n} runs)",
            s["from_return_median"],
            sig["from_return_median"],
            "ms",
            ratio(s["from_return_median"], sig["from_return_median"]),
            note="baseline: bare signal (returns before the workflow runs)",
        ),
        Row(
            "  same, p95",
            s["from_return_p95"],
            sig["from_return_p95"],
            "ms",
            ratio(s["from_return_p95"], sig["from_return_p95"]),
        ),
        Row(
            "approve -> first step starts, from sending, median",
            s["from_send_median"],
            sig["from_send_median"],
            "ms",
            ratio(s["from_send_median"], sig["from_send_median"]),
            note="baseline: bare signal",
        ),
        Row(
            "  same, p95",
            s["from_send_p95"],
            sig["from_send_p95"],
            "ms",
            ratio(s["from_send_p95"], sig["from_send_p95"]),
        ),
        Row(
            "approve -> first step starts, from sending, median",
            s["from_send_median"],
            upd["from_send_median"],
            "ms",
            ratio(s["from_send_median"], upd["from_send_median"]),
            Goal.at_most(1.3),
            note="baseline: bare update",
        ),
    ]
    return {
        "rows": [r.as_dict() for r in rows],
        "details": {"runs": n, "ms": ms, "samples_s": {k: [list(x) for x in v] for k, v in samples.items()}},
    }
