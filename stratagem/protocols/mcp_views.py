"""What the MCP server's tools return: typed (pydantic) results, so a client gets structured
output with a schema, and the reading of a run they are made from.

A run reads as runs_view says (its task state, what waits with the exact arguments, the result),
plus its plan's steps with their arguments as a person would approve them (references to the
outputs recorded so far filled, credentials masked) and the tail of its ledger. Everything here is
bounded: a long run's ledger or a long message never makes an answer without end. Run text
(goals, plans, prompts, model output) appears only in these results, never in a tool's
description.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, Field

from stratagem.common.errors import StratagemError
from stratagem.domain.ledger import Decision, Ledger, LedgerEvent, StepStatus
from stratagem.domain.plan import Plan, Step, StepKind
from stratagem.domain.process import ProcessSpec, inputs_schema
from stratagem.domain.redaction import masked, redact
from stratagem.domain.references import resolve
from stratagem.domain.run_reports import RunResult, RunStatus
from stratagem.domain.stored import is_stored
from stratagem.protocols import runs_view

MAX_EVENTS = 200
MAX_DECISIONS = 50
MAX_MESSAGE_CHARS = 1000


class ProcessInfo(BaseModel):
    """A process of the library."""

    name: str
    version: str
    description: str
    inputs_schema: dict[str, Any] = Field(description="JSON Schema of the inputs a run of it takes.")
    plans_its_goal: bool = Field(description="True: it has no steps; a planner plans its goal.")


class Processes(BaseModel):
    """The process library: the latest version of each process, and files that could not be read."""

    processes: list[ProcessInfo]
    problems: list[str] = Field(default_factory=list)


class Started(BaseModel):
    """A run just started: read it with read_run."""

    run_id: str
    process: str
    version: str
    started_by: str


class PlanStep(BaseModel):
    """A step of the run's current plan, as a person approving it reads it."""

    id: str
    title: str
    kind: str
    tool: str | None = None
    args: dict[str, Any] | None = Field(
        default=None,
        description="A tool step's arguments: references to outputs recorded so far filled, those to steps "
        "not yet run left as written, credentials masked.",
    )
    instructions: str | None = Field(default=None, description="An llm or human step's instructions.")
    depends_on: list[str] = Field(default_factory=list)
    requires_approval: bool = False
    risk: str
    status: str = Field(description="The step's status in the ledger.")


class EventLine(BaseModel):
    """One ledger event."""

    seq: int
    at: str
    kind: str
    step_id: str | None = None
    actor: str | None = None
    message: str = ""


class DecisionLine(BaseModel):
    """One decision the ledger recorded: who took it, and whose key signed it."""

    action: str
    by: str
    at: str
    revision: int
    step_id: str | None = None
    call_id: str | None = None
    via: str
    signed_by: str | None = None
    comment: str = ""


class RunView(BaseModel):
    """A run: its state, what waits for a person (with the exact arguments), its plan, the tail of its
    ledger, and its result once it ended."""

    run_id: str
    goal: str
    phase: str
    state: str = Field(
        description="As a task: submitted, working, input-required, completed, failed, canceled, rejected."
    )
    revision: int | None = None
    steps: dict[str, int] = Field(default_factory=dict, description="How many steps are in each status.")
    reason: str | None = None
    waiting: list[dict[str, Any]] = Field(
        default_factory=list,
        description="What waits for a person: kind, revision, step, question, and what exactly would run.",
    )
    process: dict[str, Any] | None = None
    plan: list[PlanStep] | None = Field(default=None, description="The current plan's steps (None: not planned yet).")
    events: list[EventLine] = Field(default_factory=list, description="The last ledger events, oldest first.")
    decisions: list[DecisionLine] = Field(default_factory=list, description="The last decisions, oldest first.")
    result: dict[str, Any] | None = Field(default=None, description="Once the run ended: outputs, synthesis, reason.")


class InboxPage(BaseModel):
    """Runs waiting for a decision you may take, newest first; `next` goes on to the next page."""

    runs: list[dict[str, Any]]
    next: str | None = None
    total: int


class Decided(BaseModel):
    """The run took the decision."""

    run_id: str
    decision: str
    accepted: bool
    revision: int
    phase: str
    message: str = ""


def process_info(spec: ProcessSpec) -> ProcessInfo:
    return ProcessInfo(
        name=spec.name,
        version=spec.version,
        description=spec.description,
        inputs_schema=inputs_schema(spec),
        plans_its_goal=not spec.steps,
    )


def _short(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE_CHARS else text[: MAX_MESSAGE_CHARS - 1] + "…"


def plan_steps(plan: Plan, ledger: Ledger) -> list[PlanStep]:
    """The plan's steps with what they will run as far as it is known now."""
    records = ledger.steps
    outputs: dict[str, Any] = {
        sid: record.output
        for sid, record in records.items()
        if record.status is StepStatus.succeeded and not is_stored(record.output)
    }
    unread = [step.id for step in plan.steps if step.id not in outputs]
    return [
        _plan_step(step, outputs, unread, records[step.id].status.value if step.id in records else "pending")
        for step in plan.steps
    ]


def _plan_step(step: Step, outputs: Mapping[str, Any], unread: list[str], status: str) -> PlanStep:
    try:
        args = resolve(dict(step.args), outputs, unread)
        instructions = resolve(step.instructions, outputs, unread)
    except StratagemError:  # a reference the run itself will refuse: shown as written
        args, instructions = dict(step.args), step.instructions
    return PlanStep(
        id=step.id,
        title=step.title,
        kind=step.kind.value,
        tool=step.tool,
        args=masked(args) if step.kind is StepKind.tool else None,
        instructions=redact(str(instructions)) if step.instructions else None,
        depends_on=list(step.depends_on),
        requires_approval=step.requires_approval,
        risk=step.risk.value,
        status=status,
    )


def event_line(event: LedgerEvent) -> EventLine:
    return EventLine(
        seq=event.seq,
        at=event.at.isoformat(),
        kind=event.kind.value,
        step_id=event.step_id,
        actor=event.actor,
        message=_short(event.message),
    )


def decision_line(decision: Decision) -> DecisionLine:
    return DecisionLine(
        action=decision.action.value,
        by=decision.by,
        at=decision.at.isoformat(),
        revision=decision.revision,
        step_id=decision.step_id,
        call_id=decision.call_id,
        via=decision.via,
        signed_by=decision.signed_by,
        comment=_short(decision.comment),
    )


def run_view(
    status: RunStatus,
    plan: Plan | None,
    ledger: Ledger,
    result: RunResult | None,
    *,
    events: int,
) -> RunView:
    """The run as read_run returns it, with its last `events` ledger events (at most MAX_EVENTS)."""
    summary = runs_view.summary(status)
    tail = ledger.events[-max(0, min(events, MAX_EVENTS)) :] if events > 0 else []
    return RunView(
        **summary,
        plan=plan_steps(plan, ledger) if plan is not None else None,
        events=[event_line(event) for event in tail],
        decisions=[decision_line(decision) for decision in ledger.decisions[-MAX_DECISIONS:]],
        result=runs_view.outcome(result) if result is not None else None,
    )
