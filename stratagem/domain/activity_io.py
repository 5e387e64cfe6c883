"""Inputs and outputs of Stratagem's activities, shared by the workflow and the worker.

Activity names are explicit and stable (`stratagem.<verb>`), so renaming a Python function
never breaks a run in flight.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from stratagem.domain.catalog import ToolCatalog
from stratagem.domain.compact import CompactModel
from stratagem.domain.ledger import LedgerEvent, StepRecord, ToolCallRecord
from stratagem.domain.model_settings import Capabilities
from stratagem.domain.plan import PlanDraft, Step
from stratagem.domain.process import ProcessRecord, ProcessRun
from stratagem.domain.usage import Allowance, CallUsage, Price, Usage

DESCRIBE_TOOLS = "stratagem.describe_tools"
# The same catalogue from the worker running the workflow task, when it serves the tools role too.
DESCRIBE_TOOLS_HERE = "stratagem.describe_tools_here"
PLAN = "stratagem.plan"
RUN_TOOL = "stratagem.run_tool"
RUN_LLM = "stratagem.run_llm"
SYNTHESIZE = "stratagem.synthesize"
CHECK_GOAL = "stratagem.check_goal"
ARCHIVE_EVENTS = "stratagem.archive_events"
NOTIFY = "stratagem.notify"
READ_FORK = "stratagem.read_fork"
PREPARE_PROCESS = "stratagem.prepare_process"


class PlanningInput(BaseModel):
    goal: str
    model: str
    catalog: ToolCatalog
    first_call_index: int = 0
    max_repairs: int = 2
    current: PlanDraft | None = Field(default=None, description="Set when replanning.")
    records: dict[str, StepRecord] = Field(default_factory=dict)
    failure: str | None = None
    history: list[str] = Field(
        default_factory=list, description="Earlier revisions, decisions and failures, oldest first."
    )
    has_executor: bool = True
    tiers: list[str] = Field(default_factory=list, description="Model tiers llm steps may name.")
    approvers: list[str] | None = Field(default=None, description="The run's approvers (None: anyone).")
    groups: dict[str, list[str]] = Field(default_factory=dict, description="Approver groups steps may name.")
    price: Price | None = Field(default=None, description="The model's price, for the cost on its call spans.")
    capabilities: Capabilities | None = Field(default=None, description="How to call the model, if configured.")
    fallbacks: list[str] = Field(default_factory=list, description="Models that answer, in order, when it cannot.")


class PlanningOutput(CompactModel):
    draft: PlanDraft
    model: str
    calls: int
    usage: Usage
    rejected_attempts: list[list[str]] = Field(default_factory=list)
    call_usage: list[CallUsage] = Field(
        default_factory=list, description="Every model call, failed attempts' included."
    )
    negotiated: list[str] = Field(default_factory=list, description="How the model's endpoint was found to work.")
    failovers: list[str] = Field(default_factory=list, description="Models passed over, and why.")
    repairs: list[str] = Field(
        default_factory=list, description="What the engine mended in the answers (ids, dependencies, a cut answer)."
    )


@dataclass(frozen=True)
class ResolvedArgs:
    """A tool step's arguments as its tool takes them: the workflow resolved every reference (stored
    values may still be in the store, which the activity reads)."""

    values: dict[str, Any]


@dataclass(frozen=True)
class TemplateArgs:
    """A tool step's arguments that still hold references to other steps' outputs, which the
    workflow only has in the store: the activity loads `outputs` and resolves `templates` with them."""

    templates: dict[str, Any]
    outputs: dict[str, Any]


ToolArgs = ResolvedArgs | TemplateArgs


@dataclass(frozen=True)
class ResolvedInstructions:
    """An llm step's instructions as its executor takes them: the workflow resolved every reference."""

    text: str


@dataclass(frozen=True)
class TemplateInstructions:
    """An llm step's instructions that still hold references to outputs the workflow only has in the
    store: the activity loads `outputs` and resolves `template` with them."""

    template: str
    outputs: dict[str, Any]


Instructions = ResolvedInstructions | TemplateInstructions


class ToolStepInput(CompactModel):
    """A tool step to run. Its arguments travel flat (`args`, and `references` when they are not
    resolved yet), as they always have; `arguments` reads them as one or the other."""

    run_id: str
    execution_id: str
    step_id: str
    revision: int
    tool: str
    args: dict[str, Any] = Field(description="Resolved values, or templates when `references` is set.")
    references: dict[str, Any] | None = Field(
        default=None,
        description="Set when `args` still hold references into stored outputs: the outputs they refer to, "
        "which the activity loads and resolves the references with.",
    )
    workspace: str | None = Field(default=None, description="The run's own workspace (RunOptions.workspace).")
    # Level 10: a tool that declares `reconcile` or is `irreversible` runs one attempt per
    # activity, the workflow counting them (workflows/attempts.py), so it knows how each ended.
    attempt: int | None = Field(default=None, description="The attempt's number when the workflow counts them.")
    reconcile_first: bool = Field(
        default=False,
        description="An earlier attempt's outcome is unknown: run the tool's reconcile check first, and the "
        "tool only if it finds no effect.",
    )
    check_only: bool = Field(
        default=False, description="With reconcile_first, no attempt is left: run the check, never the tool."
    )

    @property
    def arguments(self) -> ToolArgs:
        if self.references is None:
            return ResolvedArgs(self.args)
        return TemplateArgs(self.args, self.references)


class CallDecision(CompactModel):
    """A person's decision on one tool call an llm step's executor wants to make."""

    approved: bool
    by: str
    reason: str = ""
    digest: str | None = Field(
        default=None, description="The digest of the arguments the person approved (AwaitedCall.digest)."
    )


class AwaitedCall(CompactModel):
    """A tool call an llm step's executor paused on: it waits for a person's decision."""

    call_id: str = Field(description="The call's position in the step's conversation, as text.")
    tool: str
    arguments: str = Field(description="The exact arguments as JSON, every one of them (credentials redacted).")
    digest: str = Field(
        default="",
        description="SHA-256 of the exact arguments (canonical JSON, unmasked): an approval names it, so it "
        "approves exactly this call (empty for calls paused before level 7).",
    )


class LlmStepInput(CompactModel):
    run_id: str
    execution_id: str = ""
    revision: int
    step: Step
    instructions: str = Field(description="The step's instructions: resolved, or a template when `references` is set.")
    inputs: dict[str, Any] = Field(default_factory=dict, description="Outputs of the steps it depends on.")
    model: str
    max_rounds: int = Field(default=12, ge=1, description="Model calls the step may make.")
    max_parallel: int = Field(
        default=4, ge=1, description="Tool calls of one model answer running at once (RunOptions.max_parallel)."
    )
    price: Price | None = Field(default=None, description="The model's price, for the cost on its call spans.")
    references: dict[str, Any] | None = Field(
        default=None,
        description="Set when `instructions` still hold references into stored outputs (see ToolStepInput).",
    )
    allowance: Allowance | None = Field(
        default=None, description="What is left of the run's model budgets; checked before every model call."
    )
    workspace: str | None = Field(default=None, description="The run's own workspace (RunOptions.workspace).")
    resume: dict[str, Any] | None = Field(
        default=None,
        description="The executor's progress, in the store, when an earlier dispatch paused on a tool call that "
        "needs approval (StepOutput.resume): the conversation goes on from there.",
    )
    call_decisions: dict[str, CallDecision] = Field(
        default_factory=dict, description="Decisions on paused tool calls, by call id."
    )
    verifier: str | None = Field(
        default=None, description="The model that checks the answer against the step's success criteria."
    )
    verifier_price: Price | None = None
    max_verifications: int = Field(
        default=2, ge=0, description="Times the executor is sent back for unmet criteria before the step fails."
    )
    capabilities: dict[str, Capabilities] = Field(
        default_factory=dict, description="How to call the step's models, where the run's configuration fixes it."
    )
    fallbacks: dict[str, list[str]] = Field(
        default_factory=dict, description="For the step's models (executor, verifier): who answers when they cannot."
    )

    @property
    def instructions_given(self) -> Instructions:
        """The instructions, read as resolved or as a template with the outputs it needs; they travel
        flat (`instructions`, and `references` when not resolved yet), as they always have."""
        if self.references is None:
            return ResolvedInstructions(self.instructions)
        return TemplateInstructions(self.instructions, self.references)


class StepOutput(CompactModel):
    output: Any = None
    attempt: int = 1
    model: str | None = None
    calls: list[CallUsage] = Field(default_factory=list, description="Model calls, failed attempts' included.")
    tool_calls: list[ToolCallRecord] = Field(default_factory=list, description="Tool calls of an llm step's executor.")
    transcript: dict[str, Any] | None = Field(default=None, description="An llm step's conversation, in the store.")
    awaiting: AwaitedCall | None = Field(
        default=None,
        description="Set when the executor paused on a tool call that needs a person: the step is not done, "
        "and `output` is empty. Dispatch it again with `resume` and the decision.",
    )
    resume: dict[str, Any] | None = Field(default=None, description="The paused executor's progress, in the store.")
    negotiated: list[str] = Field(default_factory=list, description="How the models' endpoints were found to work.")
    failovers: list[str] = Field(default_factory=list, description="Models passed over, and why.")
    reconciled: bool = Field(
        default=False, description="The reconcile check found the effect: `output` is its answer; the tool did not run."
    )


class SynthesisInput(BaseModel):
    goal: str
    model: str
    outputs: dict[str, Any]
    price: Price | None = Field(default=None, description="The model's price, for the cost on its call spans.")
    capabilities: Capabilities | None = Field(default=None, description="How to call the model, if configured.")
    fallbacks: list[str] = Field(default_factory=list, description="Models that answer, in order, when it cannot.")


class SynthesisOutput(CompactModel):
    text: str
    usage: Usage
    model: str
    calls: list[CallUsage] = Field(default_factory=list)
    failovers: list[str] = Field(default_factory=list, description="Models passed over, and why.")


class GoalCheckInput(BaseModel):
    """The final check: do the run's outputs reach its goal?"""

    goal: str
    model: str
    outputs: dict[str, Any] = Field(description="The outputs of the plan's final steps, by step id.")
    call_index: int = Field(default=0, description="How many final checks the run made before this one.")
    price: Price | None = None
    capabilities: Capabilities | None = None
    fallbacks: list[str] = Field(default_factory=list)


class GoalCheckOutput(CompactModel):
    met: bool
    reason: str = ""
    calls: list[CallUsage] = Field(default_factory=list)
    negotiated: list[str] = Field(default_factory=list)
    failovers: list[str] = Field(default_factory=list)


class NotifyInput(BaseModel):
    """One pending decision to tell people about; `key` is unique to it (its idempotency key)."""

    run_id: str
    goal: str
    key: str
    waiting: str = Field(description="What the run waits for, in words (e.g. 'approval of step pay').")
    kind: str
    step_id: str | None = None
    revision: int
    prompt: str
    shows: list[str] = Field(
        default_factory=list,
        description="A gated step's: what it will run, one line per value (StepPreview.lines), sent in full.",
    )
    escalated_to: str | None = Field(
        default=None,
        exclude_if=lambda value: value is None,
        description="An escalation's (level 9): the approver group it went to, whose `people` may now decide.",
    )
    people: list[str] = Field(
        default_factory=list, exclude_if=lambda value: not value, description="The escalation group's members."
    )


class ArchiveEventsInput(BaseModel):
    run_id: str
    events: list[LedgerEvent] = Field(description="Routine events to move to the output store, in seq order.")


class ReadForkInput(BaseModel):
    """A fork asks its source run what it carries over: read from the source's own ledger."""

    source_run_id: str
    revision: int
    draft: PlanDraft


class ForkCarried(CompactModel):
    """What a fork carries over, as the source run's ledger recorded it."""

    outputs: dict[str, Any] = Field(default_factory=dict, description="Outputs of the carried steps, by step id.")
    rerun: list[str] = Field(default_factory=list, description="The fork's steps that run again.")


class ProcessInput(BaseModel):
    """What a run of a process renders from: the process and its inputs as started, and the time
    the run is for (a schedule's nominal time, or the run's start)."""

    process: ProcessRun
    nominal: datetime


class PreparedProcess(BaseModel):
    """The rendered run: its goal, its plan (None: the planner plans the goal) and its record; or
    every problem with its inputs, and then no plan."""

    goal: str
    plan: PlanDraft | None = None
    record: ProcessRecord | None = None
    problems: list[str] = Field(default_factory=list)
