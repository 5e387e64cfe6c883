"""Where the run workflow spends its CPU: `python -m bench.profile_workflow [--chains 40] [--length 100]`.

Not part of the suite. Runs one plan of no-op chains (as `long_horizon` does) on an in-process
worker whose workflow-task threads each run cProfile, then prints the functions that took the
most time inside workflow tasks (the deterministic workflow code, the sandbox and payload
conversion; activities run elsewhere and are not profiled).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import os
import pstats
import shutil
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .common import dev_server
from .long_horizon import PARALLEL, plan_of

_profilers: list[cProfile.Profile] = []


def _start_profiling() -> None:
    profiler = cProfile.Profile()
    profiler.enable()  # profiles this thread only: the executor's thread, for its whole life
    _profilers.append(profiler)


async def main(chains: int, length: int, top: int) -> None:
    root = Path(tempfile.mkdtemp(prefix="stratagem-profile-"))
    try:
        async with dev_server(root, quick=True) as bench:
            executor = ThreadPoolExecutor(max_workers=4, initializer=_start_profiling)
            async with bench.worker("profile", workflow_task_executor=executor) as tq:
                seconds, _, _ = await bench.run_plan(
                    tq, plan_of(chains, length), auto_approve=True, max_parallel=PARALLEL
                )
            print(f"{chains * length:,} steps in {seconds:.1f} s")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    stats: pstats.Stats | None = None
    for profiler in _profilers:
        profiler.create_stats()
        stats = pstats.Stats(profiler) if stats is None else stats.add(profiler)
    assert stats is not None
    for order in ("tottime", "cumulative"):
        out = io.StringIO()
        stats.stream = out  # type: ignore[attr-defined]
        stats.sort_stats(order).print_stats(top)
        print(out.getvalue())


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chains", type=int, default=40)
    parser.add_argument("--length", type=int, default=100)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    asyncio.run(main(args.chains, args.length, args.top))
    sys.stdout.flush()
    os._exit(0)
