"""What a run tells about itself: the answers to its status and events queries, its result, its
status for visibility queries, and the Markdown the Temporal UI shows.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from stratagem.domain.ledger import EventArchive, Ledger, LedgerEvent
from stratagem.domain.plan import Step
from stratagem.domain.process import ProcessRecord
from stratagem.domain.run_options import Mode
from stratagem.domain.run_state import Compensating, PendingDecision, Phase, RunState
from stratagem.domain.usage import Budget, UsageTotals

AWAITING_APPROVAL = "awaiting_approval"


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


class StepCounts(BaseModel):
    pending: int = 0
    running: int = 0
    succeeded: int = 0
    failed: int = 0
    skipped: int = 0
    cancelled: int = 0
    in_doubt: int = 0


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
    process: ProcessRecord | None = Field(default=None, description="The process the run renders, and its inputs.")
    compensation: Compensating | None = Field(
        default=None,
        description="Level 10: the run gave up on its goal and undoes its effects (RunState.compensation).",
    )


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
        flag = f" (escalated to {pending.escalated_to})" if pending.escalated_to else ""
        flag = flag or (" (escalated)" if pending.escalated else "")
        lines.append(f"\nwaiting on a person{flag}: {pending.prompt}")
    if plan is not None:
        lines += ["", "| step | kind | status | attempts |", "|---|---|---|---|"]
        for step in plan.steps[:max_rows]:
            record = state.ledger.steps[step.id]
            lines.append(f"| {step.id} | {step.tool or step.kind.value} | {record.status.value} | {record.attempts} |")
        if len(plan.steps) > max_rows:
            lines.append(f"| … {len(plan.steps) - max_rows} more | | | |")
    return "\n".join(lines)


def undo_steps(ledger: Ledger, compensation: Compensating) -> list[tuple[Step, list[str]]]:
    """The steps that undo a compensating run's effects, as people are shown them, each with the
    steps whose effects it undoes: those its compensation revision added (ordinary steps, with
    their statuses in the ledger), each after the step it undoes; the steps carried over from the
    revision before it are what ran, not what undoes it."""
    revisions = {plan.revision: plan for plan in ledger.revisions}
    undoing = revisions.get(compensation.revision)
    if undoing is None:
        return []
    before = revisions.get(compensation.revision - 1)
    ran = {step.id for step in before.steps} if before is not None else set()
    return [(step, [d for d in step.depends_on if d in ran]) for step in undoing.steps if step.id not in ran]
