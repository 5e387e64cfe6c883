"""Escalation: a wait on a person that, from level 9, escalates what waits at its deadlines (the
rules are `stratagem.domain.decisions.escalation`'s). The review and a step's waits wait through
it. Timers are `workflow.wait_condition` timeouts on deadlines the state carries, so a replay and
a continue-as-new reach them alike. Workflow code: deterministic, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from stratagem.domain.decisions import escalation, pending_for
    from stratagem.domain.run_types import DecisionKind, EscalationTimeoutAction, RunState

from .progress import Progress

SOONEST = timedelta(milliseconds=1)


class Escalation:
    def __init__(self, state: RunState, progress: Progress) -> None:
        self._state = state
        self._progress = progress

    async def wait(
        self,
        kind: DecisionKind | None,
        step_id: str | None,
        until: Callable[[], bool],
        timeout: timedelta | None,
        summary: str,
    ) -> tuple[EscalationTimeoutAction, str] | None:
        """Wait until `until` holds, as `workflow.wait_condition` does (TimeoutError at `timeout`,
        the caller's own deadline), escalating the decision of `kind` on `step_id` at its deadline.
        Returns what to do and why when the escalation's own deadline passed undecided (recorded),
        else None. Without a deadline this is the one wait_condition runs before level 9 made."""
        state = self._state
        end = workflow.now() + timeout if timeout is not None else None
        while True:
            pending = pending_for(state, kind, step_id) if kind is not None else None
            due = escalation.deadline(state, pending)
            if due is None:
                left = None if end is None else max(end - workflow.now(), SOONEST)
                await workflow.wait_condition(until, timeout=left, timeout_summary=summary)
                return None
            limit = due.at if end is None else min(end, due.at)
            try:
                await workflow.wait_condition(
                    until, timeout=max(limit - workflow.now(), SOONEST), timeout_summary=f"{summary} (escalation)"
                )
                return None
            except TimeoutError:
                if end is not None and end <= due.at:
                    raise
            assert pending is not None
            if due.then is None:
                escalation.escalate(state, pending, workflow.now())
                self._progress.show()  # shown, and its group notified
                continue
            return due.then, escalation.expire(state, pending, workflow.now())
