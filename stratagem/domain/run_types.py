"""The run: what starts it, and (re-exported from the modules that hold them) its options, its
durable state, the decisions people send it, and what it reports.

Every workflow entry point takes one of these models and returns one, so fields can be added
later without breaking runs already in flight. The models live by what they are about:
`run_options` (how a run is set up), `run_state` (what it knows, and what it waits for),
`decision_inputs` (what people send it) and `run_reports` (what it answers and returns); callers
import them from here or from there alike.
"""

from __future__ import annotations

from pydantic import BaseModel, Field, model_validator

from stratagem.common.signing import input_digest
from stratagem.domain.decision_inputs import (
    NAME_LIMIT,
    TEXT_LIMIT,
    AnswerInput,
    ApproveInput,
    AutoApproval,
    BudgetInput,
    DecisionInput,
    DecisionOutcome,
    RejectInput,
    RepairAction,
    RepairInput,
    ResolveInput,
    ReviseInput,
)
from stratagem.domain.plan import Author, PlanDraft
from stratagem.domain.process import ProcessRun
from stratagem.domain.quorum import options_problem
from stratagem.domain.run_levels import RUN_LEVEL  # the table of what each level changes is there
from stratagem.domain.run_options import (
    JOINT_STEP_ID,
    STATUS_SEARCH_ATTRIBUTE,
    EscalationTimeoutAction,
    FailureAction,
    Mode,
    ReviewTimeoutAction,
    RunOptions,
)
from stratagem.domain.run_reports import (
    AWAITING_APPROVAL,
    EventPage,
    EventsQuery,
    RunResult,
    RunStatus,
    StepCounts,
    progress_markdown,
    run_status,
)
from stratagem.domain.run_state import Compensating, DecisionKind, Fork, PausedCall, PendingDecision, Phase, RunState
from stratagem.domain.usage import Budget  # callers import it from here, where RunOptions lived

__all__ = [
    "AWAITING_APPROVAL",
    "JOINT_STEP_ID",
    "NAME_LIMIT",
    "RUN_LEVEL",
    "STATUS_SEARCH_ATTRIBUTE",
    "TEXT_LIMIT",
    "WORKFLOW_NAME",
    "AnswerInput",
    "ApproveInput",
    "AutoApproval",
    "Budget",
    "BudgetInput",
    "DecisionInput",
    "Compensating",
    "DecisionKind",
    "DecisionOutcome",
    "EventPage",
    "EscalationTimeoutAction",
    "EventsQuery",
    "FailureAction",
    "Fork",
    "Mode",
    "PausedCall",
    "PendingDecision",
    "Phase",
    "RejectInput",
    "RepairAction",
    "RepairInput",
    "ReviewTimeoutAction",
    "ResolveInput",
    "ReviseInput",
    "RunInput",
    "RunOptions",
    "RunResult",
    "RunState",
    "RunStatus",
    "StepCounts",
    "progress_markdown",
    "run_status",
    "start_digest",
]

WORKFLOW_NAME = "StratagemRun"


class RunInput(BaseModel):
    run_id: str | None = Field(default=None, description="Filled by the workflow from its id when empty.")
    auto_approval: AutoApproval | None = Field(
        default=None,
        description="With options.auto_approve: a trusted person's signature over this input, letting the run "
        "approve itself (stratagem.common.signing). Unsigned, only a worker with STRATAGEM_ALLOW_UNSIGNED=1 runs it.",
    )
    level: int = Field(default=0, ge=0, description="The workflow version that started the run (RUN_LEVEL).")
    goal: str | None = None
    plan: PlanDraft | None = Field(default=None, description="A plan written by a person; skips planning.")
    author: Author | None = Field(default=None, description="Who wrote `plan`.")
    started_by: str | None = Field(
        default=None,
        max_length=NAME_LIMIT,
        description="Who started the run, as the starting client knows them: four eyes (RunOptions.four_eyes, "
        "Step.four_eyes) keeps them from approving it.",
    )
    fork: Fork | None = Field(default=None, description="Set when the run is a fork of another run (`plan` is set).")
    process: ProcessRun | None = Field(
        default=None,
        description="A run of a process (stratagem.domain.process): the run renders its plan, or its goal, from the "
        "process and these inputs at its start. Takes the place of `goal` and `plan`.",
    )
    options: RunOptions = Field(default_factory=RunOptions)
    state: RunState | None = Field(default=None, description="Carried by continue-as-new; never set by callers.")

    @model_validator(mode="after")
    def _goal_or_plan(self) -> RunInput:
        o = self.options
        if self.state is not None:
            return self
        if (
            problem := options_problem(
                o.quorum, o.four_eyes, o.auto_approve, o.approvers, o.replan_requires_approval, self.started_by
            )
        ) is not None:
            raise ValueError(problem)
        if self.process is not None:
            if self.plan is not None or self.goal or self.fork is not None:
                raise ValueError("a run of a process takes its plan and goal from the process, not `plan` or `goal`")
            if not self.process.spec.steps and not self.options.planner and self.options.mode is not Mode.joint:
                raise ValueError(
                    f"process {self.process.spec.name} plans from its goal, so it needs a planner model (options.planner)"
                )
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


def start_digest(run: RunInput) -> str:
    """What a signed auto_approve covers: the whole input a run starts with, but the signature."""
    return input_digest(run.model_dump(mode="json", exclude={"auto_approval", "state"}, exclude_defaults=True))
