"""Which STRATAGEM_HOME an embedded server belongs to, written where any client of the server can
read it: the data of each of its namespaces (`stratagem.home`).

A home's commands use a local server it did not start only when told to. A pid file can say
which server this home started, but not whose a server at another port is: a home pointed (by
TEMPORAL_ADDRESS) at a port another home's embedded server owns started a worker with its own
tools on that server's task queue, and the other home's runs failed with "unknown tool". The
namespace data is kept in the server's database, survives its restarts, and reaches every client
that can reach the server, whichever user or container it runs as.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

from temporalio.api.namespace.v1 import UpdateNamespaceInfo
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest, UpdateNamespaceRequest
from temporalio.client import Client
from temporalio.runtime import LoggingConfig, Runtime, TelemetryConfig, TelemetryFilter
from temporalio.service import RPCError

HOME_KEY = "stratagem.home"


async def marked_home(client: Client, namespace: str | None = None) -> Path | None:
    """The home named in the namespace's data, or None (a server no home started: a cluster,
    docker compose, a dev server started by hand; or a namespace that does not exist)."""
    try:
        found = await client.workflow_service.describe_namespace(
            DescribeNamespaceRequest(namespace=namespace or client.namespace)
        )
    except RPCError:
        return None
    value = found.namespace_info.data.get(HOME_KEY)
    return Path(value) if value else None


async def mark_home(client: Client, namespaces: list[str], home: Path) -> None:
    """Name `home` in the data of `namespaces` (merged with any other data they have)."""
    for namespace in namespaces:
        await client.workflow_service.update_namespace(
            UpdateNamespaceRequest(namespace=namespace, update_info=UpdateNamespaceInfo(data={HOME_KEY: str(home)}))
        )


def mark_when_serving(address: str, namespaces: list[str], home: Path, seconds: float = 60) -> threading.Thread:
    """Mark the server at `address` from a thread of its own, once its frontend serves: for
    `stratagem server`, a process with no Temporal client of its own. Best effort: the home's
    next command marks its server too (cli/session.open_client)."""

    async def mark() -> None:
        # The core's warnings ("Frontend is not healthy yet") would land in the server's terminal.
        runtime = Runtime(
            telemetry=TelemetryConfig(
                logging=LoggingConfig(filter=TelemetryFilter(core_level="ERROR", other_level="ERROR"))
            )
        )
        deadline = time.monotonic() + seconds
        while True:
            try:
                client = await Client.connect(address, runtime=runtime)
                await mark_home(client, namespaces, home)
                return
            except (RuntimeError, RPCError):
                if time.monotonic() >= deadline:
                    return
                await asyncio.sleep(0.25)

    thread = threading.Thread(target=asyncio.run, args=(mark(),), name="stratagem-mark-home", daemon=True)
    thread.start()
    return thread
