"""Steps: what a step's record and the ledger say as the step starts, fails and closes, which steps
may start next (the `Frontier`), and the run's end, which closes the steps left open. The rules
are `stratagem.domain.transitions`'; this is the workflow's side of them. Workflow code: deterministic,
no I/O.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from opentelemetry import trace

    from stratagem.domain import compensation, transitions
    from stratagem.domain.ledger import EventKind, StepRecord, StepStatus
    from stratagem.domain.plan import Plan
    from stratagem.domain.run_types import Phase, RunState
    from stratagem.domain.scheduling import Frontier

from .control import RunControl
from .observe import Observer
from .progress import Progress


class Steps:
    def __init__(self, state: RunState, control: RunControl, progress: Progress, observe: Observer) -> None:
        self._state = state
        self._control = control
        self._progress = progress
        self._observe = observe
        # Which steps may start; rebuilt whenever execution (re)starts on a plan.
        self._frontier: Frontier | None = None
        # The span of the step whose failure the next replan answers, which that replan links to.
        self._failure_span: trace.Span | None = None

    @property
    def frontier(self) -> Frontier | None:
        return self._frontier

    def begin(self, plan: Plan) -> None:
        """Execution (re)starts on `plan`: the steps it may start are worked out afresh."""
        self._frontier = Frontier(plan, self._state.ledger)

    def release(self) -> None:
        self._frontier = None

    def take_failure_span(self) -> trace.Span | None:
        """The failed step's span, for the replan that answers it to link to (once)."""
        span, self._failure_span = self._failure_span, None
        return span

    def started(self, record: StepRecord, revision: int) -> None:
        transitions.start_step(self._state, record, revision, workflow.now())

    def negotiated(self, notes: list[str]) -> None:
        transitions.record_negotiated(self._state, notes, workflow.now())

    def failovers(self, notes: list[str], step_id: str | None = None) -> None:
        transitions.record_failovers(self._state, notes, workflow.now(), step_id)

    def failed(self, record: StepRecord, error: str, *, attempts: int, trigger: str = "step_failed") -> None:
        """A step failed: it closes, and the run stops starting steps (a replan or repair answers)."""
        now = workflow.now()
        if transitions.fail_step(self._state, record, error, attempts=attempts, now=now, trigger=trigger):
            self._failure_span = trace.get_current_span()  # the step's span: the replan links to it
        self._closed(record)
        self._control.stop()

    def sent_back(self, record: StepRecord, error: str) -> None:
        """A person rejected a gated step before it ran (level 9): it is recorded failed, for the
        replan or repair that answers it, but unlike a failure the run does not stop, so the steps
        that do not depend on it go on (and other gates stay open) until nothing else can run."""
        now = workflow.now()
        if transitions.fail_step(self._state, record, error, attempts=0, now=now, trigger="step_rejected"):
            self._failure_span = trace.get_current_span()
        self._closed(record)

    def close(self, record: StepRecord, status: StepStatus, error: str | None) -> None:
        transitions.close_step(self._state, record, status, error, workflow.now())
        self._closed(record)

    def _closed(self, record: StepRecord) -> None:
        if record.status is StepStatus.succeeded and self._frontier is not None:
            self._frontier.succeeded(record.step_id)
        self._observe.step_finished(record.status.value)

    def close_open(self, status: StepStatus, why: str) -> None:
        for record in self._state.ledger.steps.values():
            if record.status in (StepStatus.pending, StepStatus.running):
                self.close(record, status, why)

    def fail_run(self, reason: str) -> None:
        self.close_open(StepStatus.skipped, "run failed")
        self.end(Phase.failed, reason, EventKind.run_failed)

    def reject_run(self, reason: str, skipped: str = "run rejected") -> None:
        """End the run rejected; the steps not yet finished are skipped, saying `skipped`."""
        self.close_open(StepStatus.skipped, skipped)
        self.end(Phase.rejected, reason, EventKind.run_rejected)

    def end(self, phase: Phase, reason: str | None, kind: EventKind) -> None:
        state = self._state
        if state.compensation is not None and phase in (Phase.failed, Phase.rejected):
            # Whatever ends a compensation before its last undo (a stop, a rejection, a deadline)
            # leaves effects standing: the run says which (level 10; never set below it).
            reason = compensation.failed_reason(state, reason or phase.value)
            phase, kind = Phase.compensation_failed, EventKind.run_compensation_failed
        state.phase = phase
        state.reason = reason
        state.pending = []
        revision = state.plan.revision if state.plan else None
        state.ledger.record(kind, workflow.now(), revision=revision, message=reason or "")
        self._progress.show()
