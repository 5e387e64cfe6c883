"""The failures the run workflow and the interceptors around it report to Temporal: what a caller
sees is an ApplicationError's `type`, which is each class's name (clients and people read it; it
stays as it was), so no part spells it by hand."""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio.client import WorkflowHandle, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError

# How long a caller waits before sending a decision refused as too soon again, each time: the
# run records the task that asked within a moment, so the first pause is nearly always enough.
TOO_SOON_PAUSES = (0.2, 0.5, 1.0, 2.0)


class DecisionRefused(ApplicationError):
    """A refused decision or start, as update callers receive it (an ApplicationError keeps its type):
    refused by the run's rules (workflows/decider.py) or by a worker's keys (stratagem.temporal.interceptors)."""

    def __init__(self, message: str):
        super().__init__(message, type=DecisionRefused.__name__, non_retryable=True)


class DecisionTooSoon(DecisionRefused):
    """A decision that reached the run while it held work no workflow task had recorded yet:
    refused, so a replay (which applies an update before its task's other work) never meets it
    (workflows/decider.py). Sent again a moment later it is taken; the client does so itself."""

    def __init__(self, message: str):
        ApplicationError.__init__(self, message, type=DecisionTooSoon.__name__, non_retryable=True)


class RunFailed(ApplicationError):
    """A run that failed as a business process ends as a failed workflow, so the Temporal UI tells the truth."""

    def __init__(self, message: str):
        super().__init__(message, type=RunFailed.__name__, non_retryable=True)


async def execute_decision(handle: WorkflowHandle[Any, Any], update: str, decision: Any, **kwargs: Any) -> Any:
    """`handle.execute_update(update, decision, **kwargs)`, sent again after a pause while the run
    refuses it as too soon (`DecisionTooSoon`): a refusal that says "a moment later", not "no"."""
    for pause in TOO_SOON_PAUSES:
        try:
            return await handle.execute_update(update, decision, **kwargs)
        except WorkflowUpdateFailedError as exc:
            if not (isinstance(exc.cause, ApplicationError) and exc.cause.type == DecisionTooSoon.__name__):
                raise
        await asyncio.sleep(pause)
    return await handle.execute_update(update, decision, **kwargs)
