"""How `RunHandle` asks a run a query (stratagem/client.py holds the handle's other methods; here
to keep that module under its size): a query nobody answers in time is RunUnresponsiveError, one
the workflow cannot answer StratagemError, and the answers that say "ask again" are asked again."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from temporalio.client import WorkflowExecutionStatus, WorkflowQueryFailedError
from temporalio.service import RPCError, RPCStatusCode

from stratagem.common.errors import RunUnresponsiveError, StratagemError
from stratagem.temporal.interceptors import HOSTED_ONLY

if TYPE_CHECKING:
    from datetime import timedelta

    from temporalio.client import WorkflowHandle

NO_WORKER = "no worker is running its workflow; start one with `stratagem worker`"
# How long a query that a command's hosted workflow could not answer (a worker's task under way)
# is asked again before the caller hears that no worker took the task.
HOSTED_WAIT_SECONDS = 10.0
# What the server says to a query while the run's last workflow task failed.
TASK_FAILED = "Workflow Task in failed state"


def _query_timed_out(exc: RPCError) -> bool:
    if exc.status is RPCStatusCode.DEADLINE_EXCEEDED:
        return True
    # The SDK's own query timeout arrives as CANCELLED "Timeout expired".
    text = exc.message.lower()
    return exc.status is RPCStatusCode.CANCELLED and ("timeout" in text or "deadline" in text)


class RunQueries:
    """The query plumbing of `RunHandle`."""

    if TYPE_CHECKING:  # RunHandle's
        handle: WorkflowHandle
        rpc_timeout: timedelta | None

        @property
        def id(self) -> str: ...

    async def _closed(self) -> bool:
        """Whether the run has ended (False if that cannot be told)."""
        try:
            description = await self.handle.describe(rpc_timeout=self.rpc_timeout)
        except RPCError:
            return False
        return description.status not in (None, WorkflowExecutionStatus.RUNNING)

    async def _query(self, name: str, result_type: Any, *args: Any) -> Any:
        """A query. One that times out (nobody runs the workflow) raises RunUnresponsiveError;
        one the workflow cannot answer (a worker with another encryption key) StratagemError."""
        try:
            try:
                return await self._ask(name, result_type, *args)
            except RPCError as exc:
                # "context canceled": the worker the query went to dropped it (its process going
                # away; once, an SDK panic in a command's hosted worker). Asked again, another answers.
                if exc.status is not RPCStatusCode.CANCELLED:
                    raise
                await asyncio.sleep(0.2)
                return await self._ask(name, result_type, *args)
        except RunUnresponsiveError:
            # A query that reaches a worker just as the run ends can be dropped with the run's
            # cached state; asked again, a closed run answers from its history.
            if not await self._closed():
                raise
            return await self._ask(name, result_type, *args)

    async def _ask(self, name: str, result_type: Any, *args: Any) -> Any:
        loop = asyncio.get_running_loop()
        deadline, pause = loop.time() + HOSTED_WAIT_SECONDS, 0.05
        while True:
            try:
                return await self.handle.query(name, *args, result_type=result_type, rpc_timeout=self.rpc_timeout)
            except WorkflowQueryFailedError as exc:
                if HOSTED_ONLY not in exc.message:
                    raise StratagemError(f"run {self.id} could not answer the {name} query: {exc.message}") from None
                # A command hosting the workflow took the query while a worker's workflow task was
                # under way, up to a local activity it leaves to workers (HostOnly). The worker's
                # task ends soon; asked again, the run answers from it.
                why = "its next workflow task needs a worker with its tools"
            except RPCError as exc:
                if _query_timed_out(exc):
                    raise RunUnresponsiveError(
                        f"run {self.id} did not answer the {name} query in time: {NO_WORKER}"
                    ) from None
                if TASK_FAILED not in exc.message:
                    raise
                # Temporal answers no query while the run's last workflow task failed: a command
                # hosting the workflow fails the tasks it leaves to workers. One takes it soon.
                why = "its last workflow task failed (a worker's log says why)"
            if loop.time() >= deadline:
                raise RunUnresponsiveError(
                    f"run {self.id} did not answer the {name} query: {why}, and no worker took it within "
                    f"{HOSTED_WAIT_SECONDS:g} s; is one running? start one with `stratagem worker`"
                ) from None
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.5)
