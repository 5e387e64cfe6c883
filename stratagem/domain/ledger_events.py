"""What each kind of ledger event carries: one model per kind, so a writer cannot misspell a key
and a reader gets attributes with types instead of `data.get("trigger")`.

The event's JSON is unchanged by them: a model is turned into the event's `data` dict once, when
the event is recorded (`Ledger.record(..., data=StepFailed(...))`), in field order. A field that
writers used to leave out in some cases says so with `exclude_if`, so those events keep leaving
it out (`trigger` only when it is not `step_failed`, `covers` only for a partial approval...).
Keeping `data` a dict, not the model, is what keeps the payloads carried through continue-as-new,
the archived events and the query results byte for byte what they were; it also costs nothing on
the many events nobody reads back.

Reading is lenient, because events outlive the code that wrote them (golden histories, archives
in the output store): `details` ignores nothing it does not know (extra keys stay, as extras),
and an event whose data no longer fits its model is read unchecked rather than failing a query
or a replay.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from stratagem.domain.usage import UsageTotals


class EventKind(str, Enum):
    run_started = "run_started"
    planning_attempt_invalid = "planning_attempt_invalid"
    plan_proposed = "plan_proposed"
    plan_approved = "plan_approved"
    plan_rejected = "plan_rejected"
    review_escalated = "review_escalated"
    review_timed_out = "review_timed_out"
    step_awaiting_approval = "step_awaiting_approval"
    step_approved = "step_approved"
    step_rejected = "step_rejected"
    step_awaiting_answer = "step_awaiting_answer"
    answer_received = "answer_received"
    step_started = "step_started"
    step_succeeded = "step_succeeded"
    step_failed = "step_failed"
    step_skipped = "step_skipped"
    step_cancelled = "step_cancelled"
    replan_requested = "replan_requested"
    replan_cap_reached = "replan_cap_reached"
    tool_called = "tool_called"
    tool_call_refused = "tool_call_refused"
    budget_warning = "budget_warning"
    budget_exhausted = "budget_exhausted"
    budget_changed = "budget_changed"
    signal_ignored = "signal_ignored"
    continued_as_new = "continued_as_new"
    run_succeeded = "run_succeeded"
    run_failed = "run_failed"
    run_rejected = "run_rejected"
    run_cancelled = "run_cancelled"
    approval_carried = "approval_carried"
    repair_requested = "repair_requested"
    step_repaired = "step_repaired"
    call_awaiting_approval = "call_awaiting_approval"
    call_approved = "call_approved"
    call_rejected = "call_rejected"
    step_carried = "step_carried"
    model_negotiated = "model_negotiated"
    """How a model's endpoint is called, learned from a refusal (stratagem.models.negotiation)."""
    model_failover = "model_failover"
    """A call went to the next model of a failover tier; the message says which and why."""
    goal_checked = "goal_checked"
    """The final check's verdict on the run's outputs (data: met)."""
    step_escalated = "step_escalated"
    """An llm step that failed runs once more on a stronger model, before any replan."""
    approval_counted = "approval_counted"
    """An approval short of its quorum: recorded, and the plan or step waits for more (level 9)."""
    decision_escalated = "decision_escalated"
    """A decision waited past escalate_after: the escalate_to group (data: group, people) may now decide."""
    escalation_expired = "escalation_expired"
    """An escalated decision waited past escalation_timeout: the run rejected it or stopped (data: then)."""
    process_rendered = "process_rendered"
    """A run of a process rendered its plan (or goal) from its inputs (data: the process, version, digest, inputs)."""
    compensation_planned = "compensation_planned"
    """The run ends without its goal: the undos of its effects became a revision (level 10)."""
    run_compensated = "run_compensated"
    """Every undo of the compensation succeeded: the run ended compensated."""
    run_compensation_failed = "run_compensation_failed"
    """The compensation did not finish (rejected, stopped, an undo failed for good): effects remain."""
    step_in_doubt = "step_in_doubt"
    """A step's attempt ended without telling whether its effect happened; a person decides (level 10)."""
    step_reconciled = "step_reconciled"
    """Before a retry, the tool's reconcile check found the effect had happened: its answer is the output."""
    in_doubt_resolved = "in_doubt_resolved"
    """A person said whether an in-doubt step's effect happened (data: happened)."""


def _none(value: Any) -> bool:
    return value is None


def _empty(value: Any) -> bool:
    return not value


class EventData(BaseModel):
    """What an event carries besides its message; as such, the data of the kinds that carry none.

    Keys a model does not name are kept (events written before it, or by a newer worker)."""

    model_config = ConfigDict(extra="allow")

    def as_data(self) -> dict[str, Any]:
        """The event's `data`, as it is stored and sent."""
        return self.model_dump()


class RunStarted(EventData):
    auto_approve: bool
    mode: str = Field(description="The run's Mode, by value.")
    auto_approve_by: str | None = Field(
        default=None, exclude_if=_none, description="Who let the run approve itself, when they signed for it."
    )
    started_by: str | None = Field(
        default=None, exclude_if=_none, description="Who started the run, as its client said (four eyes)."
    )


class ProcessRendered(EventData):
    process: str
    version: str
    digest: str
    inputs: dict[str, Any] = Field(default_factory=dict)
    schedule: str | None = Field(default=None, exclude_if=_none, description="The schedule that started the run.")
    nominal: str | None = Field(default=None, exclude_if=_none, description="The time the run is for, ISO 8601.")


class PlanningAttemptInvalid(EventData):
    problems: list[str]


class PlanProposed(EventData):
    steps: int = Field(description="How many steps the revision has.")
    carried: list[str]
    dropped: list[str]
    retried: list[str]


class Decided(EventData):
    """A person's (or the run's own) decision on a revision or a step: how it came."""

    via: str = Field(description="update, signal, auto, policy or carried.")


class PlanApproved(Decided):
    covers: list[str] | None = Field(
        default=None, exclude_if=_none, description="The steps a partial approval covers; absent: the whole plan."
    )


class ArgumentEdit(BaseModel):
    """One argument an approver changed in approving a step: as shown, and as approved (credentials masked)."""

    before: Any = Field(description="As the approver was shown it; None: the step did not give it.")
    after: Any


class StepApproved(Decided):
    edited: dict[str, ArgumentEdit] | None = Field(
        default=None, exclude_if=_none, description="The arguments its approver changed (level 9); absent: none."
    )


class ApprovalCounted(Decided):
    """An approval of a plan (no step) or a step that needs more people than have approved."""

    approved_by: list[str] = Field(description="Everyone who approved it so far, this one included.")
    quorum: int = Field(description="How many different people it needs.")
    may_approve: list[str] | None = Field(
        default=None, description="Who may still approve it; None: anyone allowed who has not."
    )


class CallDecided(Decided):
    call: str = Field(description="The call's id within its step.")


class AnswerReceived(EventData):
    signed_by: str | None = Field(default=None, exclude_if=_empty, description="The key that signed the answer.")


class StepSucceeded(EventData):
    """Empty when the step ran no activity (a human step's answer)."""

    attempt: int | None = Field(default=None, exclude_if=_none, description="The activity attempt that succeeded.")
    model: str | None = None


class StepFailed(EventData):
    attempts: int
    trigger: str = Field(
        default="step_failed",
        exclude_if=lambda trigger: trigger == "step_failed",
        description="What the replan answers: step_failed, criteria_unmet, or step_rejected (a person sent it back).",
    )


class ReplanRequested(EventData):
    replan: int = Field(description="The run's replans so far, this one included.")
    trigger: str = Field(description="step_failed, criteria_unmet, step_rejected or goal_unmet.")


class ToolCalled(EventData):
    """Of tool_called and tool_call_refused."""

    tool: str
    call: int
    status: str = Field(description="The ToolCallStatus, by value.")


class BudgetWarning(EventData):
    dimension: str


class BudgetExhausted(EventData):
    usage: UsageTotals | None = Field(
        default=None, exclude_if=_none, description="The run's totals, when the run (not one step) reached the budget."
    )


class BudgetChanged(Decided):
    budget: dict[str, Any] = Field(description="The new budget, its unset limits left out.")


class ContinuedAsNew(EventData):
    history_events: int


class RepairRequested(EventData):
    steps: list[str] = Field(description="The failed steps a repair is asked for.")


class StepRepaired(EventData):
    # Not a Decided: its events have always had `action` before `via`.
    action: str = Field(description="The RepairAction, by value.")
    via: str


class CallAwaitingApproval(EventData):
    call: str
    digest: str | None = Field(default=None, exclude_if=_empty, description="What an approval must name.")


class StepCarried(EventData):
    """Of the fork (every field) and of each step it carried (`source` only)."""

    source: str = Field(description="The run carried from.")
    source_revision: int | None = Field(default=None, exclude_if=_none)
    steps: list[str] | None = Field(default=None, exclude_if=_none)


class GoalChecked(EventData):
    met: bool | None = Field(description="None: the check could not be made.")


class StepEscalated(EventData):
    model: str = Field(description="The stronger model the step runs on next.")


class DecisionEscalated(EventData):
    kind: str = Field(description="What waited: the DecisionKind, by value.")
    group: str = Field(description="The approver group it went to.")
    people: list[str] = Field(description="Its members, who may now decide.")


class EscalationExpired(EventData):
    kind: str = Field(description="What waited: the DecisionKind, by value.")
    group: str
    then: str = Field(description="What the run did: reject or stop.")


class CompensationPlanned(EventData):
    """The undos a run that gave up on its goal runs (stratagem.domain.compensation), level 10."""

    reason: str = Field(description="Why the run gave up on its goal.")
    undos: dict[str, str] = Field(description="Each undo step's id, and the step whose effect it undoes.")
    cannot_undo: list[str] = Field(
        default_factory=list, exclude_if=_empty, description="Steps that ran with effects nothing undoes."
    )


EVENT_DATA: dict[EventKind, type[EventData]] = {
    EventKind.run_started: RunStarted,
    EventKind.planning_attempt_invalid: PlanningAttemptInvalid,
    EventKind.plan_proposed: PlanProposed,
    EventKind.plan_approved: PlanApproved,
    EventKind.plan_rejected: Decided,
    EventKind.approval_carried: Decided,
    EventKind.step_approved: StepApproved,
    EventKind.step_rejected: Decided,
    EventKind.call_approved: CallDecided,
    EventKind.call_rejected: CallDecided,
    EventKind.answer_received: AnswerReceived,
    EventKind.step_succeeded: StepSucceeded,
    EventKind.step_failed: StepFailed,
    EventKind.replan_requested: ReplanRequested,
    EventKind.tool_called: ToolCalled,
    EventKind.tool_call_refused: ToolCalled,
    EventKind.budget_warning: BudgetWarning,
    EventKind.budget_exhausted: BudgetExhausted,
    EventKind.budget_changed: BudgetChanged,
    EventKind.continued_as_new: ContinuedAsNew,
    EventKind.repair_requested: RepairRequested,
    EventKind.step_repaired: StepRepaired,
    EventKind.call_awaiting_approval: CallAwaitingApproval,
    EventKind.step_carried: StepCarried,
    EventKind.goal_checked: GoalChecked,
    EventKind.step_escalated: StepEscalated,
    EventKind.approval_counted: ApprovalCounted,
    EventKind.decision_escalated: DecisionEscalated,
    EventKind.escalation_expired: EscalationExpired,
    EventKind.process_rendered: ProcessRendered,
    EventKind.compensation_planned: CompensationPlanned,
}
"""Each kind that carries data, and its model; the other kinds carry none (`EventData`)."""


def data_model(kind: EventKind) -> type[EventData]:
    return EVENT_DATA.get(kind, EventData)


def read_data(kind: EventKind, data: dict[str, Any]) -> EventData:
    """An event's data as its kind's model. Data that no longer fits it is read unchecked (a missing
    required field None): an old event must not fail a query or a replay."""
    model = data_model(kind)
    try:
        return model.model_validate(data)
    except ValidationError:
        missing = {name: None for name, field in model.model_fields.items() if field.is_required()}
        return model.model_construct(**(missing | data))
