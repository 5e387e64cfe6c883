"""inbox_scale: the approval inbox with thousands of runs waiting.

N runs of one `noop` step start on one worker process (`worker.py --tools bench/tools.py`, the
default workflow cache) and wait for their plan's approval; once visibility lists all N as
waiting, the bench times:

- `stratagem list --status awaiting-approval --json`, a process of its own as a person runs it
  (interpreter start included), listing every waiting run: its wall time, median of 3;
- the console's first inbox page, `GET /api/inbox` (50 runs, and the total) through the app in
  this process: the first request, and the median of 5 after it;

and reports the worker's resident memory with N runs waiting (VmRSS, and its peak VmHWM), and
how long starting the N runs took (from the first start until visibility listed them all).

N is 2,000 (quick: 100). `STRATAGEM_BENCH_INBOX_RUNS=2000,10000` measures each size in turn (the
runs of one size are cancelled before the next starts). Goals (issue #39): with 2,000 waiting,
the listing in <= 3 s and the first page in <= 0.5 s; with 10,000, the first page in <= 0.5 s and
the worker's memory reported (goal <= 400 MiB).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from typing import Any

import httpx

from stratagem.client import ensure_status_attribute
from stratagem.console import AuthMode, IdentityConfig, Users, create_app
from stratagem.status_attribute import AWAITING_QUERY

from .common import REPO_DIR, Bench, Goal, Row, gather_limited, log, median, worker_env
from .long_horizon import worker_process

NAME = "inbox_scale"
PLAN = {"goal": "inbox at scale", "steps": [{"id": "pay", "title": "pay", "tool": "noop"}]}
STARTING_AT_ONCE = 32


def sizes(bench: Bench) -> list[int]:
    given = os.environ.get("STRATAGEM_BENCH_INBOX_RUNS")
    if given:
        return [int(n) for n in given.split(",") if n.strip()]
    return [100] if bench.quick else [2000]


async def _all_waiting(bench: Bench, baseline: int, n: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (await bench.client.count_workflows(AWAITING_QUERY)).count >= baseline + n:
            return
        await asyncio.sleep(1.0)
    raise TimeoutError(f"visibility did not list {n} waiting runs within {timeout:.0f} s")


def _cli_listing(bench: Bench, task_queue: str) -> tuple[float, int]:
    env = worker_env(bench, task_queue)
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "stratagem.cli", "list", "--status", "awaiting-approval", "--json"],
        cwd=REPO_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"stratagem list failed: {done.stderr.strip()[:300]}")
    return elapsed, len(json.loads(done.stdout))


async def _first_pages(bench: Bench) -> tuple[float, list[float], dict[str, Any]]:
    identity = IdentityConfig(mode=AuthMode.local, secret=b"bench", users=Users(), local_user="bench")
    app = create_app(bench.client, identity, store=bench.store)
    transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 50000))
    times: list[float] = []
    body: dict[str, Any] = {}
    async with httpx.AsyncClient(transport=transport, base_url="http://console.bench") as http:
        for _ in range(6):
            start = time.perf_counter()
            answer = await http.get("/api/inbox")
            times.append(time.perf_counter() - start)
            answer.raise_for_status()
            body = answer.json()
    return times[0], times[1:], body


async def _one_size(bench: Bench, n: int) -> dict[str, Any]:
    baseline = (await bench.client.count_workflows(AWAITING_QUERY)).count
    command = [sys.executable, "worker.py", "--tools", "bench/tools.py"]
    async with worker_process(bench, f"inbox-{n}", command) as (proc, task_queue, memory):
        log(f"starting {n:,} runs that wait for their plan's approval ...")
        started = time.perf_counter()
        runs = await gather_limited([lambda: bench.start(task_queue, PLAN) for _ in range(n)], STARTING_AT_ONCE)
        sent = time.perf_counter() - started
        await _all_waiting(bench, baseline, n, timeout=max(300.0, n * 0.5))
        waiting_after = time.perf_counter() - started
        log(f"{n:,} started in {sent:.1f} s; all waiting (visibility) after {waiting_after:.1f} s")
        await asyncio.sleep(2.0)  # let the worker settle before its memory is read
        from .meters import read_proc_status

        status = read_proc_status(proc.pid)
        rss, peak = status.get("VmRSS", 0) / 1024, status.get("VmHWM", 0) / 1024
        listing = [await asyncio.to_thread(_cli_listing, bench, task_queue) for _ in range(3)]
        first, again, body = await _first_pages(bench)
        listed = {count for _, count in listing}
        log(
            f"list: {median([t for t, _ in listing]):.2f} s for {sorted(listed)} rows; /api/inbox first "
            f"{first * 1000:.0f} ms, then median {median(again) * 1000:.0f} ms ({len(body['runs'])} rows, "
            f"total {body['total']}); worker RSS {rss:.0f} MiB (peak {peak:.0f})"
        )
        # Done with them: terminated (at once, by the server), so the next size starts from none waiting.
        await gather_limited([lambda run=run: run.handle.terminate("bench over") for run in runs], STARTING_AT_ONCE)
        return {
            "runs": n,
            "start_seconds": round(sent, 1),
            "all_waiting_seconds": round(waiting_after, 1),
            "list_seconds": [round(t, 3) for t, _ in listing],
            "list_rows": sorted(listed),
            "first_page_first_ms": round(first * 1000, 1),
            "first_page_ms": [round(t * 1000, 1) for t in again],
            "first_page_rows": len(body["runs"]),
            "total": body["total"],
            "worker_rss_mib": round(rss, 1),
            "worker_peak_mib": round(peak, 1),
            "worker_idle_rss_mib": round((memory.get("idle_rss_kib") or 0) / 1024, 1),
        }


async def run(bench: Bench) -> dict[str, Any]:
    if not await ensure_status_attribute(bench.client):
        raise RuntimeError("the dev server did not register the StratagemStatus search attribute")
    results = [await _one_size(bench, n) for n in sizes(bench)]
    rows: list[Row] = []
    for result in results:
        n = result["runs"]
        listing = median(result["list_seconds"])
        page = median(result["first_page_ms"])
        big = n >= 10000
        rows += [
            Row(
                f"stratagem list --status awaiting-approval, all {n:,} listed",
                listing,
                unit="s",
                goal=Goal.at_most(3.0) if n == 2000 else None,
                goal_on="stratagem",
                note=f"{result['list_rows']} rows",
            ),
            Row(
                f"  console's first inbox page, {n:,} waiting (median of 5)",
                page,
                unit="ms",
                goal=Goal.at_most(500.0) if n in (2000, 10000) else None,
                goal_on="stratagem",
                note=f"first request {result['first_page_first_ms']:.0f} ms",
            ),
            Row(
                f"  worker RSS, {n:,} runs waiting",
                result["worker_rss_mib"],
                unit="MiB",
                goal=Goal.at_most(400.0) if big else None,
                goal_on="stratagem",
                note=f"peak {result['worker_peak_mib']:.0f} MiB; {n:,} started in {result['start_seconds']:.0f} s",
            ),
        ]
    return {"rows": [r.as_dict() for r in rows], "details": {"sizes": results}}
