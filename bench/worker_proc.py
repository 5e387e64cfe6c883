"""A worker process for the bare baselines: `python -m bench.worker_proc`.

The counterpart of `python worker.py --tools bench/tools.py` (Stratagem's own worker process)
for measures that need a worker of their own (peak memory): the same connection settings
(TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_TASK_QUEUE), the same data converter (pydantic
plus claim checks into STRATAGEM_STORE), the same workflow runner and default worker limits,
serving only the bare workflows and activities.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from temporalio.client import Client
from temporalio.worker import Worker

from stratagem.common.config import Settings
from stratagem.io.payloads import stratagem_data_converter, with_claim_checks
from stratagem.io.store import FileStore
from stratagem.temporal.plugin import workflow_runner

from .baseline import BARE_ACTIVITIES, BARE_WORKFLOWS


async def main() -> None:
    settings = Settings.from_env()
    converter = with_claim_checks(stratagem_data_converter, FileStore(Path(os.environ["STRATAGEM_STORE"])))
    client = await Client.connect(settings.address, namespace=settings.namespace, data_converter=converter)
    worker = Worker(
        client,
        task_queue=settings.task_queue,
        workflows=BARE_WORKFLOWS,
        activities=BARE_ACTIVITIES,
        workflow_runner=workflow_runner(),
    )
    print(f"bare worker: {settings.address} task_queue={settings.task_queue}", flush=True)
    await worker.run()


if __name__ == "__main__":
    try:
        asyncio.run(main())
        code = 0
    except KeyboardInterrupt:
        code = 130
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
