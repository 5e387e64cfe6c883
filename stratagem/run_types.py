"""The run: its options, its durable state, the decisions people send it, and its result.

Every workflow entry point takes one of these models and returns one, so fields can be added
later without breaking runs already in flight.
"""

from __future__ import annotations

from datetime import datetime
from enum import Enum
from typing import Any

from pydantic import BaseModel, Field, PrivateAttr, model_validator

from .activity_io import AwaitedCall, CallDecision
from .catalog import ToolCatalog
from .compact import CompactModel
from .ledger import EventArchive, Ledger, LedgerEvent
from .model_settings import Capabilities, capabilities_for
from .plan import MAX_SECONDS, Author, Plan, PlanDraft, Step
from .signing import Verdict, input_digest
from .usage import Budget, Price, UsageTotals

WORKFLOW_NAME = "StratagemRun"
# A Keyword search attribute holding a run's status (`run_status`), for visibility queries such as
# the approval inbox. The embedded server registers it; `stratagem.client.ensure_search_attribute`
# registers it on other servers where the caller may.
STATUS_SEARCH_ATTRIBUTE = "StratagemStatus"
AWAITING_APPROVAL = "awaiting_approval"


class ReviewTimeoutAction(str, Enum):
    fail = "fail"
    """End the run as failed."""
    escalate = "escalate"
    """Record an escalation, flag the pending decision, and keep waiting."""


class FailureAction(str, Enum):
    repair = "repair"
    """Wait for a person to retry the step, skip it with an output, revise the plan, or stop."""
    fail = "fail"
    """End the run as failed."""


class Mode(str, Enum):
    plan = "plan"
    """A planner writes a task graph; executors run its steps."""
    joint = "joint"
    """One model thinks and acts in a single tool-calling loop (a one-step plan, still reviewed)."""


JOINT_STEP_ID = "task"


class RunOptions(CompactModel):
    planner: str | None = Field(default=None, description="Model string of the planner, e.g. openai:gpt-4.1.")
    executor: str | None = Field(default=None, description="Model string for llm steps that name no tier.")
    tiers: dict[str, str] = Field(
        default_factory=dict, description="Model tiers llm steps may name (e.g. fast, strong) and their model strings."
    )
    synthesizer: str | None = Field(default=None, description="Model string for the final synthesis; none skips it.")
    mode: Mode = Field(default=Mode.plan, description="plan (planner + executors) or joint (one ReAct-style loop).")
    joint_tools: list[str] | None = Field(
        default=None, description="Joint mode: the tools the model may call. None: every tool the worker has."
    )
    max_tool_rounds: int = Field(default=12, ge=1, le=200, description="Model calls one llm step may make.")
    budget: Budget = Field(default_factory=Budget)
    prices: dict[str, Price] = Field(
        default_factory=dict, description="Prices of the run's models (USD per million tokens), for cost estimates."
    )
    verifier: str | None = Field(
        default=None,
        description="Model string that checks llm steps' answers against their success criteria. "
        "None: each step's own model.",
    )
    capabilities: dict[str, Capabilities] = Field(
        default_factory=dict,
        description="How to call a model (structured output, tool calling), by model string, where the "
        "configuration fixes it; other models are negotiated with their endpoints.",
    )
    final_check: bool = Field(
        default=False,
        description="Before the run counts as a success, a verifier model judges the final outputs against the "
        "goal; not reached, the run replans (trigger goal_unmet).",
    )
    fallbacks: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Failover: for a model string, the models that answer, in order, when it cannot "
        "(its provider is out, or it refuses the request).",
    )
    escalate: dict[str, str] = Field(
        default_factory=dict,
        description="Escalation: an llm step that failed on the first model runs once more on the second "
        "before the run replans (model string to model string).",
    )

    @property
    def models(self) -> list[str]:
        """Every model string the run may call."""
        found = [self.planner, self.executor, self.synthesizer, self.verifier, *self.tiers.values()]
        found += [m for chain in self.fallbacks.values() for m in chain] + list(self.escalate.values())
        return sorted({m for m in found if m})

    def capabilities_of(self, *models: str | None) -> dict[str, Capabilities]:
        """The configured settings of `models` (those that have any), by model string."""
        found = {m: capabilities_for(m, self.capabilities) for m in models if m}
        return {m: c for m, c in found.items() if c is not None}

    def model_for(self, step: Step) -> str | None:
        """The model that runs an llm step: its tier's, else the executor."""
        return self.tiers.get(step.tier) if step.tier else self.executor

    def plan_rules(self) -> dict[str, Any]:
        """What plan validation must know about the run's models."""
        return {
            "has_executor": bool(self.executor),
            "tiers": sorted(self.tiers),
            "approvers": self.approvers,
            "groups": self.approver_groups,
        }

    @property
    def repairs(self) -> bool:
        """Whether a failure no replan can answer waits for a person instead of ending the run."""
        if self.on_failure is None:
            return not self.auto_approve
        return self.on_failure is FailureAction.repair

    auto_approve: bool = Field(default=False, description="Approve every plan and gated step without a person.")
    workspace: str | None = Field(
        default=None,
        description="The folder this run's file tools work in (absolute); None: the worker's STRATAGEM_WORKSPACE. "
        "A worker accepts it only under its STRATAGEM_WORKSPACE_ROOTS.",
    )
    approvers: list[str] | None = Field(
        default=None,
        description="Who may approve, reject, revise or change the budget. None: anyone.",
    )
    approver_groups: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Named groups of people (e.g. finance: [dana, lee]) a step's `approvers` may name.",
    )
    on_failure: FailureAction | None = Field(
        default=None,
        description="When a step fails for good and no replan can follow (no planner, the replan limit, the "
        "planner failed): repair waits for a person, fail ends the run. None: repair, or fail when auto_approve.",
    )
    whole_plan_approval: bool = Field(
        default=False,
        description="Every revision is reviewed as a whole. Off: steps identical to the approved revision keep "
        "their approval, and a review asks about the added, changed and removed steps only.",
    )
    replan_requires_approval: bool = Field(default=True, description="Revisions from replanning wait for approval.")
    max_parallel: int = Field(default=4, ge=1, le=256, description="Tool and llm steps running at once.")
    max_replans: int = Field(default=3, ge=0)
    max_plan_repairs: int = Field(default=2, ge=0, le=10)
    review_timeout_seconds: float | None = Field(default=None, gt=0, le=MAX_SECONDS, allow_inf_nan=False)
    on_review_timeout: ReviewTimeoutAction = ReviewTimeoutAction.fail
    step_timeout_seconds: float = Field(
        default=300, gt=0, le=MAX_SECONDS, allow_inf_nan=False, description="Default per-attempt limit of a step."
    )
    step_max_attempts: int = Field(default=3, ge=1, le=20)
    continue_as_new_after_events: int | None = Field(
        default=None,
        ge=10,
        description="Continue as new past this many history events. None: when Temporal suggests it.",
    )
    status_search_attribute: bool = Field(
        default=False,
        description=f"Keep the run's status in the {STATUS_SEARCH_ATTRIBUTE} search attribute. Set at start when the "
        "namespace has it; a workflow that upserts an unregistered attribute fails its tasks.",
    )


# The workflow code's version, which `start_run` stamps on every run it starts. A run at level 1 or
# more takes every behaviour that earlier versions introduced behind a patch without asking
# Temporal (each `workflow.patched` of a new run writes a marker and a search attribute upsert:
# two visibility writes per patch per run). A run without a level (0: started by an older
# client, or by hand) asks each patch as before, so it can only gain behaviour, never lose it.
# A worker never runs a run above its own level: the run's tasks fail until a newer worker
# takes them. Raise it when a change needs a new level, and keep the old paths for lower ones.
# Level 2: the approving workflow task leaves the memo's phase to the next task.
# Level 3: the tool catalogue comes from a local activity when the worker serves the tools role.
# Level 4: repair instead of failure, partial re-approval, tool-call approvals, changes while running.
# Level 5: a notification per pending decision, when the worker has channels (stratagem.notify).
# Level 6: checked results (output schemas, success criteria judged by the record and a verifier,
# criteria_unmet replans), negotiated endpoints, failover tiers, escalation and the final check.
# Their fields in activity inputs would be ignored by an older worker, which would then run a step
# without checking it: a level-6 run waits for a level-6 worker.
# Level 7 (stratagem.signing.SIGNED_LEVEL): unsigned decisions are refused unless the worker sets
# STRATAGEM_ALLOW_UNSIGNED=1, and auto_approve needs a signed start; answers follow the run's
# approver list; a fork's carried outputs are read from the source run's own ledger.
RUN_LEVEL = 7


class Fork(BaseModel):
    """Where a forked run comes from, and the outputs it carries over instead of running again."""

    run_id: str = Field(min_length=1, max_length=200, description="The run it was forked from.")
    revision: int = Field(ge=1, description="The revision of that run the fork starts from.")
    outputs: dict[str, Any] = Field(
        default_factory=dict,
        description="Runs below level 7 only: the outputs the starter carried over. From level 7 a fork reads "
        "them from the source run's own ledger, and a start that brings any is refused.",
    )


class RunInput(BaseModel):
    run_id: str | None = Field(default=None, description="Filled by the workflow from its id when empty.")
    auto_approval: AutoApproval | None = Field(
        default=None,
        description="With options.auto_approve: a trusted person's signature over this input, letting the run "
        "approve itself (stratagem.signing). Unsigned, only a worker with STRATAGEM_ALLOW_UNSIGNED=1 runs it.",
    )
    level: int = Field(default=0, ge=0, description="The workflow version that started the run (RUN_LEVEL).")
    goal: str | None = None
    plan: PlanDraft | None = Field(default=None, description="A plan written by a person; skips planning.")
    author: Author | None = Field(default=None, description="Who wrote `plan`.")
    fork: Fork | None = Field(default=None, description="Set when the run is a fork of another run (`plan` is set).")
    options: RunOptions = Field(default_factory=RunOptions)
    state: RunState | None = Field(default=None, description="Carried by continue-as-new; never set by callers.")

    @model_validator(mode="after")
    def _goal_or_plan(self) -> RunInput:
        if self.state is not None:
            return self
        if self.options.mode is Mode.joint:
            if self.plan is not None or not self.goal:
                raise ValueError("a joint run takes a goal, not a plan")
            if not self.options.executor:
                raise ValueError("a joint run needs a model (options.executor)")
            return self
        if self.fork is not None and self.plan is None:
            raise ValueError("a fork takes the plan it starts from")
        if self.plan is None and not self.goal:
            raise ValueError("a run needs a goal (to plan) or a plan")
        if self.plan is None and not self.options.planner:
            raise ValueError("a run with only a goal needs a planner model (options.planner)")
        return self


class Phase(str, Enum):
    planning = "planning"
    awaiting_approval = "awaiting_approval"
    running = "running"
    replanning = "replanning"
    awaiting_repair = "awaiting_repair"
    succeeded = "succeeded"
    failed = "failed"
    rejected = "rejected"
    cancelled = "cancelled"

    @property
    def finished(self) -> bool:
        return self in (Phase.succeeded, Phase.failed, Phase.rejected, Phase.cancelled)


class DecisionKind(str, Enum):
    plan_approval = "plan_approval"
    step_approval = "step_approval"
    human_answer = "human_answer"
    budget = "budget"
    repair = "repair"
    tool_call_approval = "tool_call_approval"


class PendingDecision(CompactModel):
    kind: DecisionKind
    revision: int
    since: datetime
    step_id: str | None = None
    prompt: str = ""
    escalated: bool = False
    call: AwaitedCall | None = Field(default=None, description="A tool_call_approval's call: tool and exact arguments.")
    changes: dict[str, list[str]] | None = Field(
        default=None,
        description="A plan approval's diff against the approved revision: added, changed and removed step ids. "
        "None: the whole plan is under review.",
    )
    carried: dict[str, Any] | None = Field(
        default=None,
        description="A fork's plan approval: the outputs carried over from the source run (not run here), by step id, "
        "as that run's ledger recorded them.",
    )
    ask_again: list[str] = Field(
        default_factory=list,
        description="A repair's: the human steps whose question may be asked again (RepairAction.ask_again).",
    )


class PausedCall(CompactModel):
    """An llm step paused on a tool call: the call, the executor's progress (in the store) to go on
    from, and the decision once a person made it."""

    call: AwaitedCall
    resume: dict[str, Any]
    decisions: dict[str, CallDecision] = Field(default_factory=dict, description="Every decided call, by call id.")
    decided: bool = False


class RunState(BaseModel):
    """Everything the run knows. Continue-as-new carries exactly this."""

    run_id: str
    execution_id: str = Field(description="Unique to this run, even if its run id is reused later.")
    goal: str
    options: RunOptions
    phase: Phase = Phase.planning
    approved_revision: int | None = None
    ledger: Ledger
    catalog: ToolCatalog = Field(default_factory=ToolCatalog)
    pending: list[PendingDecision] = Field(default_factory=list)
    step_approvals: dict[str, bool] = Field(
        default_factory=dict, description="Gated steps decided for the current revision: True approved, False rejected."
    )
    answers: dict[str, Any] = Field(default_factory=dict, description="Human answers not yet consumed by their step.")
    planner_calls: int = 0
    failure: str | None = Field(default=None, description="Why the last step failed, for the next replan.")
    reason: str | None = Field(default=None, description="Why the run ended, when it did not succeed.")
    continued: int = Field(default=0, description="How many times this run continued as new.")
    started_at: datetime | None = Field(default=None, description="When the run started (for the wall-clock budget).")
    budget_warned: list[str] = Field(default_factory=list, description="Budgets already warned about (80% used).")
    level: int = Field(default=0, description="The run's RunInput.level, kept across continue-as-new.")
    paused_calls: dict[str, PausedCall] = Field(
        default_factory=dict, description="llm steps paused on a tool call that waits for a person, by step id."
    )
    forked_from: Fork | None = Field(default=None, description="The run and revision this run was forked from.")
    notified: list[str] = Field(
        default_factory=list, description="Pending decisions people were notified of (their keys), while pending."
    )
    escalated: dict[str, str] = Field(
        default_factory=dict, description="llm steps escalated to a stronger model after a failure, and the model."
    )
    decided: list[str] = Field(
        default_factory=list,
        description="The signatures of the signed decisions taken (their start): each counts once (level 7).",
    )

    @property
    def plan(self) -> Plan | None:
        """The current revision (the ledger keeps every revision; the state keeps no second copy)."""
        return self.ledger.revisions[-1] if self.ledger.revisions else None

    @property
    def approved_plan(self) -> Plan | None:
        """The revision a person (or the options) last approved, if any."""
        for plan in reversed(self.ledger.revisions):
            if plan.revision == self.approved_revision:
                return plan
        return None


NAME_LIMIT = 200
TEXT_LIMIT = 4000


class DecisionInput(BaseModel):
    """What every decision carries: who decided, and (where the deployment signs) the proof.

    Names and texts are bounded: they are stored in the ledger, refused ones too.
    """

    by: str = Field(min_length=1, max_length=NAME_LIMIT)
    signer: str | None = Field(default=None, max_length=64, description="The key that signed it (stratagem.signing).")
    signature: str | None = Field(default=None, max_length=200, description="Ed25519 over the decision, base64.")
    nonce: str | None = Field(
        default=None, max_length=32, description="Random, set when it is signed: a signed decision counts once."
    )
    # Set by the worker's VerifyDecisions interceptor, never from the payload.
    _verdict: Verdict | None = PrivateAttr(default=None)

    @property
    def verdict(self) -> Verdict | None:
        return self._verdict


class AutoApproval(DecisionInput):
    """A person's signed consent that a run approves its own plans and gated steps (auto_approve):
    for one input (`digest`, see `start_digest`), at one time (`signed_at`), on one run id."""

    digest: str = Field(min_length=64, max_length=64, description="SHA-256 of the run's input, as start_digest.")
    signed_at: datetime


def start_digest(run: RunInput) -> str:
    """What a signed auto_approve covers: the whole input a run starts with, but the signature."""
    return input_digest(run.model_dump(mode="json", exclude={"auto_approval", "state"}, exclude_defaults=True))


class ApproveInput(DecisionInput):
    revision: int | None = Field(default=None, description="Refuse if the pending revision is not this one.")
    step_id: str | None = Field(default=None, description="Approve one gated step instead of the plan.")
    call_id: str | None = Field(default=None, max_length=20, description="Approve one tool call of the step.")
    digest: str | None = Field(
        default=None,
        max_length=64,
        description="A tool call's approval: the digest of the arguments shown (PendingDecision.call.digest); "
        "refused as stale if the call waiting differs.",
    )
    comment: str = Field(default="", max_length=TEXT_LIMIT)


class RejectInput(DecisionInput):
    reason: str = Field(min_length=1, max_length=TEXT_LIMIT)
    revision: int | None = None
    step_id: str | None = None
    call_id: str | None = Field(default=None, max_length=20)


class RepairAction(str, Enum):
    retry = "retry"
    """Run the failed step again, with edited arguments if given (a new revision)."""
    skip = "skip"
    """Count the step as done, with an output supplied by hand."""
    stop = "stop"
    """End the run as failed."""
    ask_again = "ask_again"
    """Ask a human step's question again: its answer is dropped, and the failed steps that used it
    run again with the new one."""


class RepairInput(DecisionInput):
    """A person's answer to a run waiting for repair (a human replan is a `ReviseInput`)."""

    action: RepairAction
    step_id: str | None = Field(
        default=None, description="The failed step (retry, skip), or the human step to ask again (ask_again)."
    )
    args: dict[str, Any] | None = Field(default=None, description="retry: the tool step's new arguments.")
    output: Any = Field(default=None, description="skip: the step's output.")
    reason: str = Field(default="", max_length=TEXT_LIMIT)


class ReviseInput(DecisionInput):
    plan: PlanDraft
    reason: str = Field(default="", max_length=TEXT_LIMIT)
    revision: int | None = Field(
        default=None, description="The revision this edit is based on; refused if it is no longer current."
    )


class EventsQuery(BaseModel):
    after: int = Field(default=0, ge=0, description="Return events whose seq is above this.")
    limit: int = Field(default=500, ge=1, le=5000)


class EventPage(BaseModel):
    """A page of the run's progress stream: ledger events in order, each with its seq (offset)."""

    events: list[LedgerEvent]
    last_seq: int = Field(description="The highest seq the run has recorded so far.")
    phase: Phase
    archives: list[EventArchive] = Field(
        default_factory=list,
        description="Archived routine events after the offset, to be read from the store and merged by seq "
        "(stratagem.client.RunHandle.events does it).",
    )


class BudgetInput(DecisionInput):
    """Raise (or set) budget limits, or stop a run that has used its budget up."""

    tokens: int | None = Field(default=None, ge=1)
    cost_usd: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    model_calls: int | None = Field(default=None, ge=1)
    wall_clock_seconds: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    stop: bool = Field(default=False, description="End the run instead (only while it waits on its budget).")
    reason: str = Field(default="", max_length=TEXT_LIMIT)

    @property
    def limits(self) -> dict[str, float]:
        names = ("tokens", "cost_usd", "model_calls", "wall_clock_seconds")
        return {name: getattr(self, name) for name in names if getattr(self, name) is not None}


class AnswerInput(DecisionInput):
    step_id: str
    answer: Any


class DecisionOutcome(BaseModel):
    accepted: bool = True
    revision: int
    phase: Phase
    message: str = ""


class StepCounts(BaseModel):
    pending: int = 0
    running: int = 0
    succeeded: int = 0
    failed: int = 0
    skipped: int = 0
    cancelled: int = 0


class RunStatus(BaseModel):
    run_id: str
    goal: str
    phase: Phase
    revision: int | None
    approved_revision: int | None
    steps: StepCounts
    pending: list[PendingDecision]
    replans: int
    max_replans: int
    reason: str | None = None
    continued: int = 0
    usage: UsageTotals = Field(default_factory=UsageTotals)
    budget: Budget = Field(default_factory=Budget)
    mode: Mode = Mode.plan
    workspace: str | None = Field(default=None, description="The run's own workspace; None: the worker's.")


class RunResult(BaseModel):
    run_id: str
    status: Phase
    revision: int | None
    outputs: dict[str, Any] = Field(default_factory=dict, description="Outputs of the plan's sink steps.")
    synthesis: str | None = None
    reason: str | None = None
    replans: int = 0


def run_status(state: RunState) -> str:
    """The run's status for visibility: `awaiting_approval` while any person is needed (a plan or
    step approval, a budget decision, a human step's answer), else its phase."""
    return AWAITING_APPROVAL if state.pending and not state.phase.finished else state.phase.value


def progress_markdown(state: RunState, max_rows: int = 40) -> str:
    """The run at a glance, as Markdown, for the Temporal UI's 'current details'."""
    plan = state.plan
    lines = [
        f"**{state.phase.value}** · revision {plan.revision if plan else '-'} · replans {state.ledger.replans}/{state.options.max_replans}"
    ]
    if state.ledger.usage.calls:
        lines.append(f"\nmodel usage: {state.ledger.usage.describe()}")
    if state.reason:
        lines.append(f"\n{state.reason}")
    for pending in state.pending:
        flag = " (escalated)" if pending.escalated else ""
        lines.append(f"\nwaiting on a person{flag}: {pending.prompt}")
    if plan is not None:
        lines += ["", "| step | kind | status | attempts |", "|---|---|---|---|"]
        for step in plan.steps[:max_rows]:
            record = state.ledger.steps[step.id]
            lines.append(f"| {step.id} | {step.tool or step.kind.value} | {record.status.value} | {record.attempts} |")
        if len(plan.steps) > max_rows:
            lines.append(f"| … {len(plan.steps) - max_rows} more | | | |")
    return "\n".join(lines)


# RunInput names models defined after it (RunState, AutoApproval).
RunInput.model_rebuild()
