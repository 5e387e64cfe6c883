"""A worker process of one framework: `python -m bench.peers.worker stratagem|pydantic_ai|openai_agents`.

Each framework's worker runs in a process of its own, so its memory can be read and it can be
killed. Connection settings come from TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE and
TEMPORAL_TASK_QUEUE, the model server from PEERS_LLM_URL, the effect log from PEERS_EFFECT_LOG.

Stratagem's worker is the one `python worker.py --tools bench.peers.tools` runs (run_worker, every
role in one process). A peer's is a plain `temporalio.worker.Worker` with what its module
(bench/peers/<name>_job.py) registers, on a client with that framework's plugins.

Every quarter second the process writes its meter to PEERS_METER (JSON): its CPU seconds, those
of its workflow task threads (the SDK's pool, named `temporal_workflow_*`: workflow code and the
SDK's work around it, whatever the framework), and its resident memory and peak (KiB).
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from ..meters import WORKFLOW_THREAD_PREFIX, read_proc_status

FRAMEWORKS = ("stratagem", "pydantic_ai", "openai_agents")
METER_ENV = "PEERS_METER"


def _thread_cpu_seconds(tid: int) -> float:
    """CPU time a thread of this process has used, to the nanosecond (schedstat's first field;
    /proc/.../stat counts clock ticks, 10 ms, too coarse for a twenty-call job)."""
    try:
        return int(Path(f"/proc/self/task/{tid}/schedstat").read_text().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


def meter() -> dict[str, Any]:
    threads = {t.native_id for t in threading.enumerate() if t.name.startswith(WORKFLOW_THREAD_PREFIX)}
    status = read_proc_status(os.getpid())
    return {
        "cpu_s": time.process_time(),
        "workflow_threads_cpu_s": sum(_thread_cpu_seconds(tid) for tid in threads if tid is not None),
        "rss_kib": status.get("VmRSS"),
        "hwm_kib": status.get("VmHWM"),
        "at": time.time(),
    }


def _write_meter(path: Path) -> None:
    while True:
        scratch = path.with_suffix(".tmp")
        scratch.write_text(json.dumps(meter()))
        scratch.replace(path)
        time.sleep(0.25)


async def _serve_peer(name: str) -> None:
    from temporalio.client import Client
    from temporalio.worker import Worker

    module = importlib.import_module(f"bench.peers.{name}_job")
    client = await Client.connect(
        os.environ["TEMPORAL_ADDRESS"],
        namespace=os.environ.get("TEMPORAL_NAMESPACE", "default"),
        plugins=module.client_plugins(),
    )
    worker = Worker(client, task_queue=os.environ["TEMPORAL_TASK_QUEUE"], **module.worker_options())
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with worker:
        print(f"{name} worker: {os.environ['TEMPORAL_TASK_QUEUE']}", flush=True)
        await stop.wait()


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in FRAMEWORKS:
        print(f"usage: python -m bench.peers.worker {'|'.join(FRAMEWORKS)}", file=sys.stderr)
        return 2
    if os.environ.get(METER_ENV):
        threading.Thread(target=_write_meter, args=(Path(os.environ[METER_ENV]),), daemon=True).start()
    if argv[0] == "stratagem":
        from stratagem.common.config import Settings
        from stratagem.worker import run_worker
        from stratagem.worker_options import WorkerOptions

        asyncio.run(run_worker(Settings.from_env(), WorkerOptions(tools=("bench.peers.tools",))))
    else:
        asyncio.run(_serve_peer(argv[0]))
    return 0


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
