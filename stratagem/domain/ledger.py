"""The progress ledger: what was done, what failed, who decided what, and every event in order.

The ledger is part of the workflow's durable state, so it is written only by workflow code
(deterministically, with workflow time) and read by queries and the audit export.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from enum import Enum
from typing import Any, TypeVar

from pydantic import BaseModel, Field

from stratagem.domain.compact import CompactModel
from stratagem.domain.ledger_events import ArgumentEdit, EventData, EventKind, data_model, read_data
from stratagem.domain.plan import Plan
from stratagem.domain.usage import CallRecord, CallUsage, Price, UsageTotals, price_for

D = TypeVar("D", bound=EventData)


class StepStatus(str, Enum):
    pending = "pending"
    running = "running"
    succeeded = "succeeded"
    failed = "failed"
    skipped = "skipped"
    cancelled = "cancelled"
    in_doubt = "in_doubt"
    """An attempt ended without telling whether its effect happened (a lost worker, a timeout): the
    step waits for a person to say (`resolve`), and is never retried blindly (level 10)."""

    @property
    def finished(self) -> bool:
        return self in (StepStatus.succeeded, StepStatus.failed, StepStatus.skipped, StepStatus.cancelled)


class StepRecord(CompactModel):
    step_id: str
    status: StepStatus = StepStatus.pending
    attempts: int = Field(default=0, description="Attempts made, over every revision the step ran under.")
    output: Any = None
    error: str | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    revision: int | None = Field(default=None, description="The plan revision the step last ran under.")
    usage: UsageTotals | None = Field(default=None, description="Model calls made for the step (llm steps).")
    tool_calls: list[ToolCallRecord] = Field(default_factory=list, description="Tools its executor called or tried to.")
    transcript: dict[str, Any] | None = Field(
        default=None, description="A reference to the executor's conversation in the output store (llm steps)."
    )


class ToolCallStatus(str, Enum):
    ok = "ok"
    error = "error"
    """The tool ran and failed, or its arguments were wrong; the executor was told."""
    refused = "refused"
    """The step does not allow the tool: it never ran, and the executor was told."""


class ToolCallRecord(CompactModel):
    """A tool call an llm step's executor made."""

    call: int = Field(description="Position in the step's conversation; part of the idempotency key.")
    tool: str
    status: ToolCallStatus
    arguments: str = Field(default="", description="The arguments as JSON, cut to 1,000 characters.")
    message: str = Field(
        default="",
        description="Why it was refused or what went wrong; who approved it; or that a check found the effect of "
        "the call an earlier attempt had in flight (`reconciled: ...`), and the tool was not called again.",
    )
    attempt: int = 1


class DecisionAction(str, Enum):
    approve = "approve"
    reject = "reject"
    revise = "revise"
    budget = "budget"
    retry = "retry"
    skip = "skip"
    stop = "stop"
    ask_again = "ask_again"
    compensate = "compensate"


class Decision(CompactModel):
    action: DecisionAction
    by: str
    at: datetime
    revision: int
    comment: str = ""
    step_id: str | None = Field(default=None, description="Set when the decision is about one gated step.")
    via: str = Field(default="update", description="update, signal, or auto (auto_approve).")
    signed_by: str | None = Field(
        default=None,
        description="The key whose signature the worker verified (stratagem.common.signing); None: unsigned.",
    )
    call_id: str | None = Field(default=None, description="Set when the decision is about one tool call of a step.")
    covers: list[str] | None = Field(
        default=None,
        description="A plan approval's steps: those added, changed or removed since the approved revision. "
        "None: the whole plan.",
    )
    edited: dict[str, ArgumentEdit] | None = Field(
        default=None,
        description="A step approval's changed arguments, each as shown and as approved (credentials masked).",
    )


class LedgerEvent(CompactModel):
    seq: int
    at: datetime
    kind: EventKind
    revision: int | None = None
    step_id: str | None = None
    actor: str | None = None
    message: str = ""
    data: dict[str, Any] = Field(
        default_factory=dict, description="As written (the wire); `details` reads it as its kind's model."
    )

    @property
    def details(self) -> EventData:
        """The data as its kind's model (stratagem.domain.ledger_events), read by attribute."""
        return read_data(self.kind, self.data)

    def details_as(self, model: type[D]) -> D:
        """The data as `model`, which must be the event's kind's: for a reader that checked the kind."""
        details = self.details
        assert isinstance(details, model), f"{self.kind.value} carries {type(details).__name__}, not {model.__name__}"
        return details


# The events every step writes. A long run archives them at each continue-as-new (below); the
# rest (decisions, failures, replans, budget...) stay in the state, where the replanner reads them.
ROUTINE_EVENTS = frozenset({EventKind.step_started, EventKind.step_succeeded, EventKind.tool_called})


class EventArchive(CompactModel):
    """Routine events moved out of the run's state into the output store, by seq range.

    Events of other kinds with a seq in the range are still in `Ledger.events`: read both and
    order by seq (`Ledger.with_events`)."""

    first_seq: int
    last_seq: int
    count: int
    stored: dict[str, Any] = Field(description="The stored value (stratagem.io.store): a list of events.")


class SucceededOutputs(Mapping[str, Any]):
    """step id -> output, for the steps that succeeded (a live, read-only view)."""

    def __init__(self, steps: Mapping[str, StepRecord]):
        self._steps = steps

    def __getitem__(self, step_id: str) -> Any:
        record = self._steps.get(step_id)
        if record is None or record.status is not StepStatus.succeeded:
            raise KeyError(step_id)
        return record.output

    def __iter__(self) -> Iterator[str]:
        return (sid for sid, record in self._steps.items() if record.status is StepStatus.succeeded)

    def __len__(self) -> int:
        return sum(1 for _ in self)


class Ledger(BaseModel):
    run_id: str
    revisions: list[Plan] = Field(default_factory=list, description="Every plan revision, oldest first.")
    decisions: list[Decision] = Field(default_factory=list)
    steps: dict[str, StepRecord] = Field(default_factory=dict)
    replans: int = 0
    auto_approved: bool = Field(default=False, description="True if any decision was taken by auto_approve.")
    events: list[LedgerEvent] = Field(
        default_factory=list,
        description="Append-only, in seq order; routine events archived earlier are in `archives`.",
    )
    archives: list[EventArchive] = Field(default_factory=list, description="Routine events moved to the output store.")
    event_count: int = Field(default=0, description="Events recorded so far, archived or not: the last seq.")
    calls: list[CallRecord] = Field(default_factory=list, description="Every model call, in order.")
    usage: UsageTotals = Field(default_factory=UsageTotals, description="Totals over every model call.")
    largest_step: UsageTotals | None = Field(
        default=None, description="Per dimension, the most one step has used; estimates what the next may use."
    )

    def record(
        self,
        kind: EventKind,
        at: datetime,
        *,
        revision: int | None = None,
        step_id: str | None = None,
        actor: str | None = None,
        message: str = "",
        data: EventData | None = None,
        **fields: Any,
    ) -> LedgerEvent:
        """Append an event. Its data is its kind's model (`data_model(kind)`); loose `fields` are
        stored as given, unchecked, as events were written before the models."""
        assert data is None or type(data) is data_model(kind), f"{kind.value} carries {data_model(kind).__name__}"
        self.event_count = self.last_seq + 1  # (states from before the count start from the list)
        # Built without validation: the workflow writes a few events per step, its own typed values.
        event = LedgerEvent.model_construct(
            seq=self.event_count,
            at=at,
            kind=kind,
            revision=revision,
            step_id=step_id,
            actor=actor,
            message=message,
            data=data.as_data() if data is not None else fields,
        )
        self.events.append(event)
        return event

    @property
    def last_seq(self) -> int:
        return max(self.event_count, len(self.events))

    def routine_events(self) -> list[LedgerEvent]:
        """The events a continue-as-new may archive."""
        return [e for e in self.events if e.kind in ROUTINE_EVENTS]

    def archived(self, events: list[LedgerEvent], archive: EventArchive) -> None:
        """`events` are now in the store: keep only their archive."""
        gone = {e.seq for e in events}
        self.events = [e for e in self.events if e.seq not in gone]
        self.archives.append(archive)

    def with_events(self, archived: Iterable[LedgerEvent]) -> Ledger:
        """This ledger with archived events read back in, every event in seq order."""
        events = sorted([*archived, *self.events], key=lambda e: e.seq)
        return self.model_copy(update={"events": events, "archives": []})

    def events_after(self, after: int, limit: int) -> list[LedgerEvent]:
        """Up to `limit` events of the state (not archived) with seq above `after`."""
        events = self.events
        # Events are in seq order; without archives seq is the position plus one.
        start = after if not self.archives else bisect.bisect_right(events, after, key=lambda e: e.seq)
        return events[start : start + limit]

    def record_calls(
        self,
        calls: Iterable[CallUsage],
        at: datetime,
        *,
        purpose: str,
        prices: Mapping[str, Price],
        step_id: str | None = None,
        revision: int | None = None,
    ) -> UsageTotals:
        """Price and keep model calls; returns their totals (also added to the step's, if any)."""
        totals = UsageTotals()
        for call in calls:
            price = price_for(call.model, prices)
            record = CallRecord(
                **call.model_dump(),
                seq=len(self.calls) + 1,
                at=at,
                purpose=purpose,
                step_id=step_id,
                revision=revision,
                cost_usd=price.cost(call.input_tokens, call.output_tokens) if price else None,
            )
            self.calls.append(record)
            self.usage.add(record)
            totals.add(record)
        if step_id is not None and step_id in self.steps and totals.calls:
            step = self.steps[step_id]
            if step.usage is None:
                step.usage = UsageTotals()
            for record in self.calls[-totals.calls :]:
                step.usage.add(record)
        return totals

    def note_step_usage(self, usage: UsageTotals) -> None:
        """Remember what one finished step used, for the next estimate."""
        if self.largest_step is None:
            self.largest_step = usage.model_copy()
        else:
            self.largest_step.widen(usage)

    def add_revision(self, plan: Plan) -> None:
        self.revisions.append(plan)
        for step in plan.steps:
            self.steps.setdefault(step.id, StepRecord(step_id=step.id))

    def step(self, step_id: str) -> StepRecord:
        return self.steps[step_id]

    def outputs(self) -> Mapping[str, Any]:
        """Outputs of every succeeded step, for reference resolution: a view, so looking up the
        few a step refers to costs nothing however long the run is."""
        return SucceededOutputs(self.steps)

    def revision(self, number: int) -> Plan:
        for plan in self.revisions:
            if plan.revision == number:
                return plan
        raise KeyError(number)

    def audit_records(self) -> Iterator[dict[str, Any]]:
        """One JSON-ready record per plan revision, decision and event, in time order."""
        rows: list[tuple[datetime, int, dict[str, Any]]] = []
        for plan in self.revisions:
            created = next(
                (e.at for e in self.events if e.kind is EventKind.plan_proposed and e.revision == plan.revision),
                None,
            )
            rows.append((created or datetime.min, 0, {"type": "plan_revision", **plan.model_dump(mode="json")}))
        for decision in self.decisions:
            rows.append((decision.at, 1, {"type": "decision", **decision.model_dump(mode="json")}))
        for event in self.events:
            rows.append((event.at, 2, {"type": "event", **event.model_dump(mode="json")}))
        for call in self.calls:
            rows.append((call.at, 3, {"type": "model_call", **call.model_dump(mode="json")}))
        rows.sort(key=lambda r: (r[0].replace(tzinfo=None), r[1]))
        for _, _, row in rows:
            yield row
