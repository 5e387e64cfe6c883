"""A run's options: which models it calls, how it is reviewed and repaired, its limits.

Set when the run starts (`RunInput.options`) and carried in its state; a budget decision is the
one thing that changes them while it runs.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from pydantic import Field, model_validator

from stratagem.domain.compact import CompactModel
from stratagem.domain.model_settings import Capabilities, capabilities_for
from stratagem.domain.plan import MAX_QUORUM, MAX_SECONDS, Step
from stratagem.domain.usage import Budget, Price

# A Keyword search attribute holding a run's status (`run_status`), for visibility queries such as
# the approval inbox. The embedded server registers it; `stratagem.status_attribute.ensure_status_attribute`
# registers it on other servers where the caller may.
STATUS_SEARCH_ATTRIBUTE = "StratagemStatus"


class ReviewTimeoutAction(str, Enum):
    fail = "fail"
    """End the run as failed."""
    compensate = "compensate"
    """Undo the effects that ran (the compensation plan, reviewed like a revision), then end the run
    compensated (level 10)."""
    escalate = "escalate"
    """Record an escalation, flag the pending decision, and keep waiting."""


class EscalationTimeoutAction(str, Enum):
    reject = "reject"
    """Reject what waited: a plan approval rejects the run, a gated step or a question is rejected."""
    stop = "stop"
    """Stop the run (it ends failed)."""


class FailureAction(str, Enum):
    repair = "repair"
    """Wait for a person to retry the step, skip it with an output, revise the plan, or stop."""
    fail = "fail"
    """End the run as failed."""
    compensate = "compensate"
    """Undo the effects that ran (the compensation plan, reviewed like a revision), then end the run
    compensated (level 10)."""


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
    max_tool_rounds: int = Field(
        default=12, ge=1, le=1000, description="Model calls one llm step may make (1 to 1,000)."
    )
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
            "auto_approve": self.auto_approve,
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
    quorum: int = Field(
        default=1,
        ge=1,
        le=MAX_QUORUM,
        description="How many different people must approve each revision of the plan; a rejection by any one "
        "rejects it. A step's own `quorum` is set on the step.",
    )
    four_eyes: bool = Field(
        default=False,
        description="Neither the person who started the run nor the author of the revision under review may "
        "approve the plan or a gated step.",
    )
    on_failure: FailureAction | None = Field(
        default=None,
        description="When a step fails for good and no replan can follow (no planner, the replan limit, the "
        "planner failed): repair waits for a person, fail ends the run, compensate undoes the effects that ran "
        "(level 10). None: repair, or fail when auto_approve.",
    )
    whole_plan_approval: bool = Field(
        default=False,
        description="Every revision is reviewed as a whole. Off: steps identical to the approved revision keep "
        "their approval, and a review asks about the added, changed and removed steps only.",
    )
    replan_requires_approval: bool = Field(default=True, description="Revisions from replanning wait for approval.")
    max_parallel: int = Field(
        default=4,
        ge=1,
        le=256,
        description="Tool and llm steps running at once; also the tool calls of one model answer that an llm "
        "step runs at once.",
    )
    max_replans: int = Field(default=3, ge=0)
    max_plan_repairs: int = Field(default=2, ge=0, le=10)
    review_timeout_seconds: float | None = Field(default=None, gt=0, le=MAX_SECONDS, allow_inf_nan=False)
    on_review_timeout: ReviewTimeoutAction = ReviewTimeoutAction.fail
    escalate_after_seconds: float | None = Field(
        default=None,
        gt=0,
        le=MAX_SECONDS,
        allow_inf_nan=False,
        description="A plan approval, a gated step's approval or a human step's answer that waits this long is "
        "escalated: the group `escalate_to` names is notified, and its members may decide it too.",
    )
    escalate_to: str | None = Field(
        default=None, min_length=1, description="The group of `approver_groups` an escalation goes to."
    )
    escalation_timeout_seconds: float | None = Field(
        default=None,
        gt=0,
        le=MAX_SECONDS,
        allow_inf_nan=False,
        description="How long an escalated decision may wait before `on_escalation_timeout`. None: it waits on.",
    )
    on_escalation_timeout: EscalationTimeoutAction = Field(
        default=EscalationTimeoutAction.reject,
        description="reject what waited, or stop the run, when `escalation_timeout_seconds` passed undecided.",
    )
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

    @model_validator(mode="after")
    def _escalation(self) -> RunOptions:
        if problem := escalation_problem(self):
            raise ValueError(problem)
        return self


def escalation_problem(options: RunOptions) -> str | None:
    """What is wrong with the options' escalation, in one line (None: nothing)."""
    group, after = options.escalate_to, options.escalate_after_seconds
    if group is not None and group not in options.approver_groups:
        known = ", ".join(options.approver_groups) or "none are configured"
        return f"escalate_to names '{group}', which is not an approver group (groups: {known})"
    if group is not None and not options.approver_groups[group]:
        return f"escalate_to names '{group}', a group with nobody in it"
    if (group is None) != (after is None):
        return "escalation needs both escalate_after (seconds) and escalate_to (an approver group)"
    if options.escalation_timeout_seconds is not None and after is None:
        return "escalation_timeout needs escalate_after and escalate_to: it counts from the escalation"
    return None
