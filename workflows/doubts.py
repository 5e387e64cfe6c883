"""Doubts: a step whose effect is unknown and that no check can tell about waits, `in_doubt`, for a
person to say whether it happened (level 10; the rules are stratagem.domain.in_doubt, the
attempts that end so workflows/attempts.py). The wait holds no work, so a continue-as-new carries
it; a run that stops or replans meanwhile waits for the word first, since what the step did
decides what may run next. Workflow code: deterministic, no I/O.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from stratagem.domain import in_doubt
    from stratagem.domain.ledger import StepRecord, StepStatus
    from stratagem.domain.plan import Step
    from stratagem.domain.run_types import RunState

from .attempts import InDoubt
from .control import RunControl
from .waits import Waits

ASK_AFTER = timedelta(seconds=1)


class Doubts:
    def __init__(self, state: RunState, control: RunControl, waits: Waits) -> None:
        self._state = state
        self._control = control
        self._waits = waits

    async def begin(self, step: Step, record: StepRecord, args: dict[str, Any], doubt: InDoubt) -> None:
        """The step's attempt ended of unknown outcome: it is in doubt, and a person is asked.

        Asked in a workflow task of its own, after a timer: an attempt of unknown outcome is most
        often a lost worker, whose workflow task waits on its dead sticky queue for a while. A
        query meanwhile is answered by another worker from the whole history, the attempt's end
        included; had that state shown the question, a word sent at once would reach the run in
        the same workflow task as the attempt's end, and a replay (which applies a decision
        before an activity's result in one task) would find the run's commands in another order."""
        await workflow.sleep(ASK_AFTER)
        in_doubt.doubt(self._state, record, step, args, doubt.why, doubt.attempts, workflow.now())

    async def settle(self, step: Step) -> bool:
        """Wait for the word on a step in doubt. True when it runs again (its effect did not
        happen); False when it succeeded with the output given (the decider closed it) or the run
        winds down (the state carries the question to the next execution)."""
        record = self._state.ledger.steps[step.id]
        control = self._control
        await self._waits.park(step.id, lambda: record.status is not StepStatus.in_doubt or control.winding_down)
        return record.status is StepStatus.pending
