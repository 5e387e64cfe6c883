"""Stratagem: durable planner-executor AI agents on Temporal.

The names most users need are here; everything else lives in its own module.
"""

from typing import TYPE_CHECKING, Any

from .client import RunHandle, connect, get_run, start_run
from .errors import DecisionRefusedError, PlanFileError, PlanValidationError, StratagemError, ToolError
from .ledger import Ledger, StepStatus
from .plan import Author, AuthorKind, Plan, PlanDraft, Risk, Step, StepKind
from .plan_files import load_plan_file
from .run_types import (
    AnswerInput,
    ApproveInput,
    BudgetInput,
    DecisionOutcome,
    Mode,
    Phase,
    RejectInput,
    ReviseInput,
    RunInput,
    RunOptions,
    RunResult,
    RunStatus,
)
from .tools import ToolContext, ToolRegistry, tool
from .validation import validate_plan

if TYPE_CHECKING:
    from .worker import build_worker, run_worker


def __getattr__(name: str) -> Any:
    # The worker imports the run workflow, and the workflow imports this package's modules (which
    # runs this file first): the worker's names load on first use, so importing the workflow on
    # its own (a replayer, a test) does not start from the worker.
    if name in ("build_worker", "run_worker"):
        from . import worker

        return getattr(worker, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AnswerInput",
    "ApproveInput",
    "Author",
    "AuthorKind",
    "BudgetInput",
    "DecisionOutcome",
    "DecisionRefusedError",
    "Ledger",
    "Mode",
    "Phase",
    "Plan",
    "PlanDraft",
    "PlanFileError",
    "PlanValidationError",
    "RejectInput",
    "ReviseInput",
    "Risk",
    "RunHandle",
    "RunInput",
    "RunOptions",
    "RunResult",
    "RunStatus",
    "Step",
    "StepKind",
    "StepStatus",
    "StratagemError",
    "ToolContext",
    "ToolError",
    "ToolRegistry",
    "build_worker",
    "connect",
    "get_run",
    "load_plan_file",
    "run_worker",
    "start_run",
    "tool",
    "validate_plan",
]
