"""Which steps may run now, and how a new plan revision is reconciled with what already ran."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from stratagem.domain.graph import sinks
from stratagem.domain.ledger import Ledger, StepRecord, StepStatus
from stratagem.domain.plan import PlanDraft, Step


def ready_steps(plan: PlanDraft, ledger: Ledger) -> list[Step]:
    """Pending steps whose dependencies all succeeded, in plan order."""
    ready = []
    for step in plan.steps:
        record = ledger.steps.get(step.id)
        if record is None or record.status is not StepStatus.pending:
            continue
        if all(dep in ledger.steps and ledger.steps[dep].status is StepStatus.succeeded for dep in step.depends_on):
            ready.append(step)
    return ready


class Frontier:
    """The pending steps whose dependencies all succeeded, kept up to date as steps succeed.

    `ready_steps` rescans the plan; a run of thousands of steps asks after every step, so the
    workflow keeps this instead: each success touches only the steps that depend on it."""

    def __init__(self, plan: PlanDraft, ledger: Ledger):
        self._ledger = ledger
        self._steps = {s.id: s for s in plan.steps}
        self._position = {s.id: n for n, s in enumerate(plan.steps)}
        self._dependents: dict[str, list[str]] = {}
        self._waiting_on: dict[str, int] = {}
        self._ready: set[str] = set()
        for step in plan.steps:
            for dep in step.depends_on:
                self._dependents.setdefault(dep, []).append(step.id)
            self._waiting_on[step.id] = sum(1 for dep in step.depends_on if not self._succeeded(dep))
            if self._waiting_on[step.id] == 0:
                self._ready.add(step.id)

    def _succeeded(self, step_id: str) -> bool:
        record = self._ledger.steps.get(step_id)
        return record is not None and record.status is StepStatus.succeeded

    def succeeded(self, step_id: str) -> None:
        for dependent in self._dependents.get(step_id, ()):
            self._waiting_on[dependent] -= 1
            if self._waiting_on[dependent] == 0:
                self._ready.add(dependent)

    def ready(self) -> list[Step]:
        """The same steps as `ready_steps`, in plan order."""
        finished = {sid for sid in self._ready if self._ledger.steps[sid].status.finished}
        self._ready -= finished  # a finished step never becomes pending again within a revision
        pending = [sid for sid in self._ready if self._ledger.steps[sid].status is StepStatus.pending]
        return [self._steps[sid] for sid in sorted(pending, key=self._position.__getitem__)]


def all_succeeded(plan: PlanDraft, ledger: Ledger) -> bool:
    return all(ledger.steps[s.id].status is StepStatus.succeeded for s in plan.steps)


def sink_steps(plan: PlanDraft) -> list[str]:
    return sinks({s.id: s.depends_on for s in plan.steps})


# Fields that define what a step does. A succeeded step whose definition changes would need
# to run again, which a revision may not do silently.
_DEFINING_FIELDS = ("kind", "tool", "args", "instructions", "output_format")


def _definition(step: Step) -> dict:
    return step.model_dump(include=set(_DEFINING_FIELDS), mode="json")


def same_definition(a: Step, b: Step) -> bool:
    """Whether two steps do the same work (what they are called and how they are gated aside)."""
    return _definition(a) == _definition(b)


@dataclass
class Reconciliation:
    """The outcome of laying a revised draft over the ledger."""

    draft: PlanDraft
    carried: list[str] = field(default_factory=list)
    """Succeeded steps the draft omitted; they are kept as they were."""
    dropped: list[str] = field(default_factory=list)
    """Unfinished steps the draft removed; they will be marked skipped."""
    retried: list[str] = field(default_factory=list)
    """Failed, cancelled or skipped steps the draft keeps (or brings back); they will run again
    under the new revision."""
    problems: list[str] = field(default_factory=list)


def reconcile(current: PlanDraft | None, draft: PlanDraft, records: Mapping[str, StepRecord]) -> Reconciliation:
    """Lay a revised draft over what already ran.

    - A succeeded step keeps its output and never runs again. If the draft leaves it out, it
      is carried into the new revision unchanged. If the draft changes what it does, that is
      a problem: the planner must give the new work a new id instead.
    - Pending, failed and cancelled steps may be kept, changed or dropped. Failed and cancelled
      steps that are kept, and skipped (earlier dropped) steps the draft brings back, run again
      under the new revision.
    """
    succeeded = {sid for sid, rec in records.items() if rec.status is StepStatus.succeeded}
    in_draft = {s.id: s for s in draft.steps}
    result = Reconciliation(draft=draft)

    previous = {s.id: s for s in current.steps} if current is not None else {}
    for sid in sorted(succeeded):
        old = previous.get(sid)
        if old is None:
            continue
        if sid not in in_draft:
            result.carried.append(sid)
        elif _definition(in_draft[sid]) != _definition(old):
            result.problems.append(
                f"step '{sid}' already succeeded (revision {records[sid].revision}) and cannot be changed; "
                f"keep it as it was, or add a step with a new id to do the work again"
            )

    carried_steps = [previous[sid] for sid in result.carried]
    if carried_steps:
        result.draft = PlanDraft(goal=draft.goal, steps=[*carried_steps, *draft.steps], reason=draft.reason)

    for sid in previous:
        record = records.get(sid)
        if sid in in_draft or record is None:
            continue
        if record.status in (StepStatus.pending, StepStatus.failed, StepStatus.cancelled):
            result.dropped.append(sid)
    for sid in in_draft:
        record = records.get(sid)
        if record is not None and record.status in (StepStatus.failed, StepStatus.cancelled, StepStatus.skipped):
            result.retried.append(sid)
    return result
