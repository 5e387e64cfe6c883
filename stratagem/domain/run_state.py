"""What a run knows while it runs: its phase, the decisions it waits for, and its durable state,
which continue-as-new carries whole.
"""

from __future__ import annotations

from datetime import datetime
from enum import Enum
from typing import Any

from pydantic import BaseModel, Field

from stratagem.domain.activity_io import AwaitedCall, CallDecision
from stratagem.domain.catalog import ToolCatalog
from stratagem.domain.compact import CompactModel
from stratagem.domain.ledger import Ledger
from stratagem.domain.plan import Plan
from stratagem.domain.process import ProcessRecord
from stratagem.domain.run_options import RunOptions
from stratagem.domain.step_preview import StepPreview


class Compensating(CompactModel):
    """A run that gave up on its goal and undoes its effects (level 10): why it gave up, the
    revision that holds the undos, and the steps whose effects stay because nothing undoes them.
    Set when the compensation plan is derived (stratagem.domain.compensation); the run then ends
    compensated or compensation_failed, whatever the revision's steps do."""

    reason: str = Field(description="Why the run gave up on its goal (the failure, the stop, the rejection).")
    revision: int = Field(ge=1, description="The revision of undo steps.")
    cannot_undo: list[str] = Field(
        default_factory=list, description="Steps that ran with effects and have no compensation."
    )


class Fork(BaseModel):
    """Where a forked run comes from, and the outputs it carries over instead of running again."""

    run_id: str = Field(min_length=1, max_length=200, description="The run it was forked from.")
    revision: int = Field(ge=1, description="The revision of that run the fork starts from.")
    outputs: dict[str, Any] = Field(
        default_factory=dict,
        description="Runs below level 7 only: the outputs the starter carried over. From level 7 a fork reads "
        "them from the source run's own ledger, and a start that brings any is refused.",
    )


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
    compensated = "compensated"
    """The run ended without its goal, and every effect that could be undone was (level 10)."""
    compensation_failed = "compensation_failed"
    """The run ended without its goal, and its compensation did not finish: effects remain (level 10)."""

    @property
    def finished(self) -> bool:
        return self in (
            Phase.succeeded,
            Phase.failed,
            Phase.rejected,
            Phase.cancelled,
            Phase.compensated,
            Phase.compensation_failed,
        )


class DecisionKind(str, Enum):
    plan_approval = "plan_approval"
    step_approval = "step_approval"
    human_answer = "human_answer"
    budget = "budget"
    repair = "repair"
    tool_call_approval = "tool_call_approval"
    in_doubt = "in_doubt"
    """A step's attempt ended without telling whether its effect happened; a person says (level 10)."""


class StandingUse(CompactModel):
    """The standing approval a run's plan was approved by: which grant, whose, for which revision,
    and the gated steps it approves too (while that revision runs)."""

    grant: str
    by: str
    revision: int
    steps: list[str] = Field(default_factory=list)
    signed_by: str | None = None


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
    standing: str | None = Field(
        default=None,
        description="A standing approval exists but did not apply: why, and what differs from the approved version.",
    )
    preview: StepPreview | None = Field(
        default=None,
        description="A step approval's (level 8): what the step will run, credentials masked, and the digest an "
        "approval is bound to.",
    )
    quorum: int | None = Field(
        default=None,
        description="A plan or step approval's (level 9), when it needs more than one person: how many.",
    )
    approved_by: list[str] = Field(
        default_factory=list,
        description="Level 9: who approved it so far, short of its quorum (the verified names, in order).",
    )
    may_approve: list[str] | None = Field(
        default=None,
        description="Level 9, with a quorum or four eyes: who may still approve it (approved and barred people "
        "left out). None: anyone on the run's approver list who has not.",
    )
    barred: dict[str, str] = Field(
        default_factory=dict,
        description="Level 9, four eyes: the people who may not approve it, and why (started the run, wrote it).",
    )
    escalated_to: str | None = Field(
        default=None,
        description="Level 9: the approver group (RunOptions.escalate_to) this decision went to after "
        "escalate_after_seconds; its members may decide it too.",
    )
    escalated_at: datetime | None = Field(default=None, description="When it went to `escalated_to`.")


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
    approved_digests: dict[str, str] = Field(
        default_factory=dict,
        description="Level 8: the digest of what each approved gated step was shown with (StepPreview.digest); "
        "a step whose digest differs when it is dispatched is asked again.",
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
    process: ProcessRecord | None = Field(default=None, description="The process this run renders, and its inputs.")
    standing: StandingUse | None = Field(
        default=None, description="The standing approval that approved this run's plan (stratagem.domain.standing)."
    )
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
    started_by: str | None = Field(
        default=None, description="Who started the run (RunInput.started_by), whom four eyes keeps from approving."
    )
    compensation: Compensating | None = Field(
        default=None, description="Level 10: the run gave up on its goal and undoes its effects."
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
