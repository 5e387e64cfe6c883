"""Progress shown outside the run: the step table in the Temporal UI, the phase in the memo, the
status search attribute and waits (through `Observer`), and notifications of pending decisions.
Workflow code: deterministic, no I/O.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from stratagem.domain import activity_io, decisions
    from stratagem.domain.decisions import escalation
    from stratagem.domain.run_levels import Change
    from stratagem.domain.run_types import Phase, RunState, progress_markdown

from .activity_options import NOTIFY_RETRY, NOTIFY_TIMEOUT
from .core import has
from .observe import Observer

# How stale the step table in the Temporal UI may be while steps finish.
DETAILS_EVERY = timedelta(seconds=1)


class Progress:
    def __init__(self, state: RunState, observe: Observer) -> None:
        self._state = state
        self._observe = observe
        self._memo_phase: str | None = None
        self._memo_due = False
        self._memo_hold: int | None = None
        self._details_key: Any = None
        self._details_at: datetime | None = None
        self._task: tuple[datetime, int] | None = None  # the time and history length of the task last shown
        self._unrecorded = False
        self._refusing: datetime | None = None

    def show(self) -> None:
        """Publish the run's progress as its current details in the Temporal UI, and its phase in
        the memo when it changed, so listings tell a succeeded run from a rejected one (both are
        completed workflows)."""
        state, now = self._state, workflow.now()
        self._note(now)
        # The step table is rebuilt when the phase or the waits change, and otherwise at most once
        # a second: rebuilding it after every step of a busy run cost a tenth of its workflow CPU.
        # (Details are kept in memory for the UI's query, not in history, so this is replay-safe.)
        key = (state.phase, state.plan.revision if state.plan else None, [(p.kind, p.step_id) for p in state.pending])
        if key != self._details_key or self._details_at is None or now - self._details_at >= DETAILS_EVERY:
            self._details_key, self._details_at = key, now
            workflow.set_current_details(progress_markdown(state))
        if not self._memo_held():
            self._observe.publish(state)  # the status search attribute and the waits, likewise held
        if has(state, Change.NOTIFICATIONS) and state.catalog.notify:
            self._notify_people()
        if state.phase.value == self._memo_phase:
            return
        if not has(state, Change.MEMO_ONCE_PER_TASK):
            self._memo_phase = state.phase.value
            if has(state, Change.PHASE_MEMO):
                workflow.upsert_memo({"phase": self._memo_phase})
        elif not self._memo_due:
            # Written once this workflow task's code has run, so phases passed through in one
            # task (planned, approved by policy, running) cost one memo write, not one each.
            self._memo_due = True
            asyncio.get_running_loop().call_soon(self.write_memo)

    def hold_memo(self) -> None:
        """A plan was approved in this workflow task: its phase's memo write waits for the next
        task (_memo_held): in this one it delayed the first step's start by the server's
        visibility update."""
        self._memo_hold = workflow.info().get_current_history_length()

    def write_memo(self, final: bool = False) -> None:
        """The phase into the memo, if it changed (level 1 runs; `final` right before the run
        completes or continues as new, after which no command may follow)."""
        self._memo_due = False
        phase = self._state.phase.value
        if not final and self._memo_held():
            return  # written by the next workflow task's show
        if has(self._state, Change.MEMO_ONCE_PER_TASK) and phase != self._memo_phase:
            self._memo_phase = phase
            workflow.upsert_memo({"phase": phase})

    def _note(self, now: datetime) -> None:
        """Notice a change the run made outside a workflow task of its own. A worker new to a run
        (its own was lost, and the run's next task waits on the dead worker's sticky queue) answers
        a query by replaying the history, and applies the events that task has not processed yet
        (an activity's result) to the run it then keeps: the run moves on at the time of its last
        task (workflow.now() stands still) with a longer history, and its commands wait for the
        next task. A query meanwhile shows what it did: a question, say."""
        length = workflow.info().get_current_history_length()
        if self._task is None or self._task[0] != now:
            self._task, self._unrecorded, self._refusing = (now, length), False, None
        elif length > self._task[1]:
            self._unrecorded = True

    def too_soon(self) -> bool:
        """Whether an update validated now would reach history after work the run did outside a task
        (`_note`): in the task that records that work, which a replay runs in one activation, the
        update first. True for every update of that task; the next one takes them. (Validators run
        only when a task is processed, never on replay: this decides no command.)"""
        if not self._unrecorded:
            return False
        now = workflow.now()
        if self._refusing is None:
            self._refusing = now
        if now == self._refusing:
            return True
        self._unrecorded, self._refusing = False, None
        return False

    def _memo_held(self) -> bool:
        """Level 2: in the workflow task that approved a plan, "running" is not written yet (the
        memo's phase and waits, the status search attribute). The steps it starts are activities,
        whose ends bring the next task and the write; a step that waits on a person instead adds
        to `pending`, which writes at once. Until then visibility still says the run awaits
        approval; `stratagem list` and the inbox correct that from the run's pending activities."""
        return (
            self._memo_hold is not None
            and self._memo_hold == workflow.info().get_current_history_length()
            and self._state.phase is Phase.running
            and not self._state.pending
        )

    def _notify_people(self) -> None:
        """One notification per pending decision, sent once (state.notified carries the keys across
        continue-as-new); an activity on the workflow's own queue, not awaited: the run never waits
        on a chat service. Level 5 only, so no earlier history replays differently."""
        state = self._state
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
                    shows=pending.preview.lines() if pending.preview is not None else [],
                    escalated_to=pending.escalated_to,
                    people=escalation.people(state, pending),
                ),
                start_to_close_timeout=NOTIFY_TIMEOUT,
                retry_policy=NOTIFY_RETRY,
                summary=f"notify: {waiting}"[:200],
            )
        state.notified = [k for k in state.notified if k in keys]
