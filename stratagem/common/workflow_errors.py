"""The failures the run workflow and the interceptors around it report to Temporal: what a caller
sees is an ApplicationError's `type`, which is each class's name (clients and people read it; it
stays as it was), so no part spells it by hand."""

from __future__ import annotations

from temporalio.exceptions import ApplicationError


class DecisionRefused(ApplicationError):
    """A refused decision or start, as update callers receive it (an ApplicationError keeps its type):
    refused by the run's rules (workflows/decider.py) or by a worker's keys (stratagem.temporal.interceptors)."""

    def __init__(self, message: str):
        super().__init__(message, type=DecisionRefused.__name__, non_retryable=True)


class RunFailed(ApplicationError):
    """A run that failed as a business process ends as a failed workflow, so the Temporal UI tells the truth."""

    def __init__(self, message: str):
        super().__init__(message, type=RunFailed.__name__, non_retryable=True)
