"""Stratagem: durable planner-executor AI agents on Temporal.

The names most users need are here; everything else lives in its own module.
"""

from stratagem.client import RunHandle, connect, get_run, start_run
from stratagem.common.config import Settings
from stratagem.common.errors import (
    ConfigError,
    DecisionRefusedError,
    PlanFileError,
    PlanValidationError,
    RunAlreadyStartedError,
    RunUnresponsiveError,
    StratagemError,
    ToolError,
)
from stratagem.domain.ledger import EventKind, Ledger, LedgerEvent, StepStatus
from stratagem.domain.plan import Author, AuthorKind, Plan, PlanDraft, Risk, Step, StepKind
from stratagem.domain.process import ProcessSpec
from stratagem.domain.run_types import (
    AnswerInput,
    ApproveInput,
    BudgetInput,
    DecisionKind,
    DecisionOutcome,
    Mode,
    PendingDecision,
    Phase,
    RejectInput,
    RepairAction,
    RepairInput,
    ResolveInput,
    ReviseInput,
    RunInput,
    RunOptions,
    RunResult,
    RunStatus,
)
from stratagem.domain.validation import validate_plan
from stratagem.io.plan_files import load_plan_file, load_process_file
from stratagem.io.process_library import ProcessLibrary
from stratagem.process_runs import InputsRefusedError, start_process
from stratagem.schedules import (
    ScheduleNotFound,
    ScheduleRequest,
    ScheduleTiming,
    ScheduleView,
    create_schedule,
    delete_schedule,
    describe_schedule,
    list_schedules,
    pause_schedule,
    trigger_schedule,
    unpause_schedule,
)
from stratagem.standing_approvals import grant_standing, list_standing, revoke_standing
from stratagem.tools import ToolContext, ToolRegistry, tool
from stratagem.worker import build_worker, run_worker

__all__ = [
    "AnswerInput",
    "ApproveInput",
    "Author",
    "AuthorKind",
    "BudgetInput",
    "ConfigError",
    "DecisionKind",
    "DecisionOutcome",
    "DecisionRefusedError",
    "EventKind",
    "InputsRefusedError",
    "Ledger",
    "LedgerEvent",
    "Mode",
    "PendingDecision",
    "Phase",
    "Plan",
    "PlanDraft",
    "PlanFileError",
    "PlanValidationError",
    "ProcessLibrary",
    "ProcessSpec",
    "RejectInput",
    "RepairAction",
    "RepairInput",
    "ResolveInput",
    "ReviseInput",
    "Risk",
    "RunAlreadyStartedError",
    "RunHandle",
    "RunInput",
    "RunOptions",
    "RunResult",
    "RunStatus",
    "RunUnresponsiveError",
    "ScheduleNotFound",
    "ScheduleRequest",
    "ScheduleTiming",
    "ScheduleView",
    "Settings",
    "Step",
    "StepKind",
    "StepStatus",
    "StratagemError",
    "ToolContext",
    "ToolError",
    "ToolRegistry",
    "build_worker",
    "connect",
    "create_schedule",
    "delete_schedule",
    "describe_schedule",
    "get_run",
    "grant_standing",
    "list_schedules",
    "list_standing",
    "load_plan_file",
    "load_process_file",
    "pause_schedule",
    "revoke_standing",
    "run_worker",
    "start_process",
    "start_run",
    "tool",
    "trigger_schedule",
    "unpause_schedule",
    "validate_plan",
]
