"""Stratagem: durable planner-executor AI agents on Temporal.

The names most users need are here; everything else lives in its own module.
"""

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
from .worker import build_worker, run_worker

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
