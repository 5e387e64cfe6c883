"""What every part of the run workflow shares: its bookkeeping, its clock, where its activities
go, how it shows progress, and how steps and the run itself end.

The run workflow (`workflows.stratagem_run.StratagemRun`) is one class, as Temporal requires, assembled
from parts that each do one job, every part built on this one:

    RunCore       bookkeeping, progress shown to the outside, step and run endings (here)
    Budgets       model usage, budgets and the waits on them (budgets.py)
    Planning      the tool catalogue, planner calls, adopting a revision (planning.py)
    Continuation  continue-as-new and the archive of routine events (continuation.py)
    Execution     scheduling ready steps, their activities, step gates, human steps (execution.py)
    Messages      every update, signal and query the run answers (messages.py)
    StratagemRun  the phase loop: plan -> review -> execute -> replan -> finish (run.py)

Each part builds on the ones above it (`Execution` on `Planning` and `Continuation`, and so on),
so a method calls only what is defined at or below its own part.

Workflow code: deterministic, no I/O.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from opentelemetry import trace

    from stratagem import activity_io, decisions, transitions
    from stratagem.ledger import EventKind, StepRecord, StepStatus
    from stratagem.plan import Step
    from stratagem.roles import Role, role_queue
    from stratagem.run_types import Phase, RunState, progress_markdown
    from stratagem.scheduling import Frontier
    from stratagem.usage import Allowance

from .activity_options import NOTIFY_RETRY, NOTIFY_TIMEOUT
from .observe import Observer

# How stale the step table in the Temporal UI may be while steps finish.
DETAILS_EVERY = timedelta(seconds=1)
# Runs started before the phase was kept in the memo replay without it.
PHASE_MEMO_PATCH = "phase-in-memo"
# Level 4 (each behind its patch for runs started before it): steps identical to the approved
# revision keep their approval; a failure no replan can answer waits for a repair.
PARTIAL_PATCH = "partial-re-approval"
REPAIR_PATCH = "repair-instead-of-failure"


class RunCore:
    def __init__(self, state: RunState) -> None:
        self.state = state
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._ended = 0  # step tasks that ended: what the execution loop wakes on
        self._resumed: list[Step] = []
        # Per revision, the steps each step refers to (a step's references never change).
        self._references: dict[str, frozenset[str]] = {}
        self._busy_slots = 0
        # Stopping: a step failed or was rejected. Waiting steps give up, running ones finish.
        self._stopping = False
        # Winding down: a continue-as-new is due. Nothing new starts, running steps finish, and
        # steps parked on a person (an answer, a step approval) stay parked: the state carries them.
        self._winding_down = False
        self._parked: set[str] = set()
        self._finished_here = 0
        self._rejection: str | None = None
        self._memo_phase: str | None = None
        self._memo_due = False
        self._memo_hold: int | None = None
        self._details_key: Any = None
        self._details_at: datetime | None = None
        # Bumped whenever usage, a budget or the steps in flight change: what budget waits wake on.
        self._budget_epoch = 0
        self._model_steps_in_flight = 0
        self._model_steps_waiting = 0
        # Model budget reserved by llm steps in flight (their allowances), and steps that used
        # their share and run again once the others are done.
        self._reserved: dict[str, Allowance] = {}
        self._budget_reruns: set[str] = set()
        # Which steps may start; rebuilt whenever execution (re)starts on a plan.
        self._frontier: Frontier | None = None
        # Spans, metrics and the status search attribute (workflows/observe.py).
        self._observe = Observer(state.run_id)
        self._plan_span: trace.Span | None = None
        # The span of the step whose failure the next replan answers, which that replan links to.
        self._failure_span: trace.Span | None = None
        # What the run span reports when this execution handed its state on (_release).
        self._outcome: dict[str, Any] | None = None

    def _outcome_attributes(self) -> dict[str, Any]:
        state = self.state
        return {
            "stratagem.phase": state.phase.value,
            "stratagem.replans": state.ledger.replans,
            "stratagem.model_calls": state.ledger.usage.calls,
            "stratagem.cost_usd": state.ledger.usage.cost_usd,
        }

    def _now(self) -> datetime:
        return workflow.now()

    def _patched(self, patch: str) -> bool:
        """A behaviour introduced behind `patch`: always on for runs at level 1 or more (stratagem.run_types.RUN_LEVEL)."""
        return self.state.level >= 1 or workflow.patched(patch)

    def _since(self, level: int, patch: str) -> bool:
        """A behaviour introduced at `level`: on for runs at that level or above, and behind `patch`
        for runs started before it (their histories replay without it)."""
        return self.state.level >= level or workflow.patched(patch)

    def _partial(self) -> bool:
        """Whether a review asks only about what changed since the approved revision."""
        return self._since(4, PARTIAL_PATCH)

    def _queue(self, role: Role) -> str:
        """Where a role's activities go: a queue per role, beside the workflow's own (stratagem/roles.py)."""
        return role_queue(workflow.info().task_queue, role)

    # ------------------------------------------------------------------ steps and the run ending

    def _step_started(self, record: StepRecord, revision: int) -> None:
        transitions.start_step(self.state, record, revision, self._now())

    def _record_negotiated(self, notes: list[str]) -> None:
        transitions.record_negotiated(self.state, notes, self._now())

    def _record_failovers(self, notes: list[str], step_id: str | None = None) -> None:
        transitions.record_failovers(self.state, notes, self._now(), step_id)

    def _step_failed(self, record: StepRecord, error: str, *, attempts: int, trigger: str = "step_failed") -> None:
        if transitions.fail_step(self.state, record, error, attempts=attempts, now=self._now(), trigger=trigger):
            self._failure_span = trace.get_current_span()  # the step's span: the replan links to it
        self._step_closed(record)
        self._stopping = True

    def _close_step(self, record: StepRecord, status: StepStatus, error: str | None) -> None:
        transitions.close_step(self.state, record, status, error, self._now())
        self._step_closed(record)

    def _step_closed(self, record: StepRecord) -> None:
        if record.status is StepStatus.succeeded and self._frontier is not None:
            self._frontier.succeeded(record.step_id)
        self._observe.step_finished(record.status.value)

    def _close_open_steps(self, status: StepStatus, why: str) -> None:
        for record in self.state.ledger.steps.values():
            if record.status in (StepStatus.pending, StepStatus.running):
                self._close_step(record, status, why)

    def _fail(self, reason: str) -> None:
        self._close_open_steps(StepStatus.skipped, "run failed")
        self._end(Phase.failed, reason, EventKind.run_failed)

    def _end(self, phase: Phase, reason: str | None, kind: EventKind) -> None:
        self.state.phase = phase
        self.state.reason = reason
        self.state.pending = []
        revision = self.state.plan.revision if self.state.plan else None
        self.state.ledger.record(kind, self._now(), revision=revision, message=reason or "")
        self._show()

    # ------------------------------------------------------------------ progress shown outside

    def _show(self) -> None:
        """Publish the run's progress as its current details in the Temporal UI, and its phase in
        the memo when it changed, so listings tell a succeeded run from a rejected one (both are
        completed workflows)."""
        state, now = self.state, workflow.now()
        # The step table is rebuilt when the phase or the waits change, and otherwise at most once
        # a second: rebuilding it after every step of a busy run cost a tenth of its workflow CPU.
        # (Details are kept in memory for the UI's query, not in history, so this is replay-safe.)
        key = (state.phase, state.plan.revision if state.plan else None, [(p.kind, p.step_id) for p in state.pending])
        if key != self._details_key or self._details_at is None or now - self._details_at >= DETAILS_EVERY:
            self._details_key, self._details_at = key, now
            workflow.set_current_details(progress_markdown(state))
        if not self._memo_held():
            self._observe.publish(state)  # the status search attribute and the waits, likewise held
        if state.level >= 5 and state.catalog.notify:
            self._notify_people()
        if self.state.phase.value == self._memo_phase:
            return
        if self.state.level < 1:
            self._memo_phase = self.state.phase.value
            if workflow.patched(PHASE_MEMO_PATCH):
                workflow.upsert_memo({"phase": self._memo_phase})
        elif not self._memo_due:
            # Written once this workflow task's code has run, so phases passed through in one
            # task (planned, approved by policy, running) cost one memo write, not one each.
            self._memo_due = True
            asyncio.get_running_loop().call_soon(self._write_memo)

    def _notify_people(self) -> None:
        """One notification per pending decision, sent once (state.notified carries the keys across
        continue-as-new); an activity on the workflow's own queue, not awaited: the run never waits
        on a chat service. Level 5 only, so no earlier history replays differently."""
        state = self.state
        keys = {decisions.pending_key(p): p for p in state.pending}
        for key, pending in keys.items():
            if key in state.notified:
                continue
            state.notified.append(key)
            waiting = decisions.waiting_for(pending)
            workflow.start_activity(
                activity_io.NOTIFY,
                activity_io.NotifyInput(
                    run_id=state.run_id,
                    goal=state.goal,
                    key=f"{state.run_id}/{state.execution_id}/{key}",
                    waiting=waiting,
                    kind=pending.kind.value,
                    step_id=pending.step_id,
                    revision=pending.revision,
                    prompt=pending.prompt,
                ),
                start_to_close_timeout=NOTIFY_TIMEOUT,
                retry_policy=NOTIFY_RETRY,
                summary=f"notify: {waiting}"[:200],
            )
        state.notified = [k for k in state.notified if k in keys]

    def _write_memo(self, final: bool = False) -> None:
        """The phase into the memo, if it changed (level 1 runs; `final` right before the run
        completes or continues as new, after which no command may follow)."""
        self._memo_due = False
        phase = self.state.phase.value
        if not final and self._memo_held():
            return  # written by the next workflow task's _show
        if self.state.level >= 1 and phase != self._memo_phase:
            self._memo_phase = phase
            workflow.upsert_memo({"phase": phase})

    def _memo_held(self) -> bool:
        """Level 2: in the workflow task that approved a plan, "running" is not written yet (the
        memo's phase and waits, the status search attribute). The steps it starts are activities,
        whose ends bring the next task and the write; a step that waits on a person instead adds
        to `pending`, which writes at once. Until then visibility still says the run awaits
        approval; `stratagem list` and the inbox correct that from the run's pending activities."""
        return (
            self._memo_hold is not None
            and self._memo_hold == workflow.info().get_current_history_length()
            and self.state.phase is Phase.running
            and not self.state.pending
        )
