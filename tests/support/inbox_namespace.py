"""A namespace of its own on the dev server, with the StratagemStatus attribute and a worker: the
inbox lists a whole namespace, so counting and paging are checked where only the test's runs wait."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from google.protobuf.duration_pb2 import Duration
from temporalio.api.workflowservice.v1 import RegisterNamespaceRequest
from temporalio.client import Client

from stratagem.client import ensure_status_attribute
from stratagem.io.store import FileStore
from stratagem.tools import ToolRegistry
from stratagem.worker import build_worker
from support import FIXTURE_TOOLS


@asynccontextmanager
async def namespace_harness(dev_env: Any, tmp_path: Path) -> AsyncIterator[Any]:
    from conftest import Harness

    namespace = f"inbox-{uuid.uuid4().hex[:8]}"
    await dev_env.client.workflow_service.register_namespace(
        RegisterNamespaceRequest(namespace=namespace, workflow_execution_retention_period=Duration(seconds=86400))
    )
    target = dev_env.client.service_client.config.target_host
    client = await Client.connect(target, namespace=namespace, data_converter=dev_env.client.data_converter)
    for _ in range(100):  # a new namespace is served once the server's cache has it
        try:
            if await ensure_status_attribute(client):
                break
        except Exception:
            pass
        await asyncio.sleep(0.2)
    env = SimpleNamespace(client=client, get_current_time=dev_env.get_current_time)
    task_queue = f"tq-{uuid.uuid4().hex[:8]}"
    store = FileStore(tmp_path / "store")
    harness = Harness(env, tmp_path / "workspace", task_queue, store)  # type: ignore[arg-type]
    registry = ToolRegistry.from_modules([FIXTURE_TOOLS])
    async with build_worker(
        client, task_queue=task_queue, registry=registry, workspace=tmp_path / "workspace", store=store
    ):
        try:
            yield harness
        finally:
            await harness.close()
