"""Client helpers: connect with the right data converter, start runs, and send decisions."""

from __future__ import annotations

import uuid

from typing import Any

from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from .config import Settings
from .errors import DecisionRefusedError
from .ledger import Ledger
from .plan import Plan
from .run import (
    WORKFLOW_NAME,
    AnswerInput,
    ApproveInput,
    DecisionOutcome,
    PendingDecision,
    RejectInput,
    ReviseInput,
    RunInput,
    RunResult,
    RunStatus,
)


async def connect(settings: Settings | None = None) -> Client:
    settings = settings or Settings.from_env()
    return await Client.connect(settings.address, namespace=settings.namespace, data_converter=pydantic_data_converter)


def new_run_id() -> str:
    return f"run-{uuid.uuid4().hex[:12]}"


class Run:
    """A handle on one run, with typed decisions and queries."""

    def __init__(self, handle: WorkflowHandle):
        self.handle = handle

    @property
    def id(self) -> str:
        return self.handle.id

    async def approve(self, decision: ApproveInput) -> DecisionOutcome:
        return await self._decide("approve", decision)

    async def reject(self, decision: RejectInput) -> DecisionOutcome:
        return await self._decide("reject", decision)

    async def revise(self, decision: ReviseInput) -> DecisionOutcome:
        return await self._decide("revise", decision)

    async def answer(self, answer: AnswerInput) -> DecisionOutcome:
        return await self._decide("answer", answer)

    async def _decide(self, update: str, decision: Any) -> DecisionOutcome:
        """Send a decision as an update. A refusal raises DecisionRefusedError with the run's reason."""
        try:
            return await self.handle.execute_update(update, decision, result_type=DecisionOutcome)
        except WorkflowUpdateFailedError as exc:
            cause = exc.cause
            reason = cause.message if isinstance(cause, ApplicationError) else str(cause or exc)
            raise DecisionRefusedError(f"run {self.id} refused the decision: {reason}") from None
        except RPCError as exc:
            if exc.status is RPCStatusCode.NOT_FOUND:
                raise DecisionRefusedError(f"run {self.id} has finished or does not exist: it takes no decisions") from None
            raise

    async def status(self) -> RunStatus:
        return await self.handle.query("status", result_type=RunStatus)

    async def plan(self) -> Plan | None:
        return await self.handle.query("plan", result_type=Plan | None)  # type: ignore[arg-type]

    async def ledger(self) -> Ledger:
        return await self.handle.query("ledger", result_type=Ledger)

    async def pending(self) -> list[PendingDecision]:
        return await self.handle.query("pending", result_type=list[PendingDecision])

    async def result(self) -> RunResult:
        return await self.handle.result()

    async def cancel(self) -> None:
        await self.handle.cancel()


async def start_run(client: Client, run: RunInput, *, task_queue: str, run_id: str | None = None) -> Run:
    """Start a run. The goal goes into the memo (for listings) and the Temporal UI's summary."""
    workflow_id = run_id or run.run_id or new_run_id()
    goal = run.goal or (run.plan.goal if run.plan else "")
    try:
        handle = await client.start_workflow(
            WORKFLOW_NAME,
            run,
            id=workflow_id,
            task_queue=task_queue,
            result_type=RunResult,
            memo={"goal": goal},
            static_summary=f"Stratagem: {goal}"[:400],
        )
    except WorkflowAlreadyStartedError:
        raise DecisionRefusedError(f"a run with id '{workflow_id}' is already running; choose another id") from None
    return Run(handle)


def get_run(client: Client, run_id: str) -> Run:
    return Run(client.get_workflow_handle(run_id, result_type=RunResult))
