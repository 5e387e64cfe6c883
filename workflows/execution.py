"""Execution: start every step as soon as it is ready, up to the run's parallelism, and say what
comes next when no step is left to run. Which steps are ready is `stratagem.domain.scheduling.Frontier`'s
job (held by `Steps`); running one step is `StepRunner`'s. Workflow code: deterministic, no I/O.
"""

from __future__ import annotations

import asyncio

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from stratagem.domain.ledger import StepStatus
    from stratagem.domain.plan import Step, StepKind
    from stratagem.domain.run_types import DecisionKind, Phase, RunState
    from stratagem.domain.scheduling import all_succeeded

from .compensation import Compensation
from .continuation import Continuation
from .control import RunControl
from .finishing import Finishing
from .progress import Progress
from .step_runner import StepRunner
from .steps import Steps
from .waits import Waits


class Execution:
    def __init__(
        self,
        state: RunState,
        control: RunControl,
        progress: Progress,
        steps: Steps,
        waits: Waits,
        runner: StepRunner,
        continuation: Continuation,
        finishing: Finishing,
        compensation: Compensation,
    ) -> None:
        self._state = state
        self._compensation = compensation
        self._control = control
        self._progress = progress
        self._steps = steps
        self._waits = waits
        self._runner = runner
        self._continuation = continuation
        self._finishing = finishing
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._ended = 0  # step tasks that ended: what the execution loop wakes on
        self._resumed: list[Step] = []

    @property
    def busy(self) -> bool:
        """Whether any step is out (running, or waiting on a person)."""
        return bool(self._tasks)

    async def execute(self) -> bool:
        """Run steps as soon as they are ready. True when every step succeeded; otherwise the
        phase says what comes next (replanning, rejected, failed), or a continue-as-new is due."""
        state = self._state
        assert state.plan is not None
        self._control.restart()
        self._steps.begin(state.plan)
        self._runner.forget_references()
        revision = state.plan.revision
        # Steps already out waiting on a person when a continue-as-new (or a repair) carried them
        # here: a human step's question, an llm step's paused tool call, a step in doubt (level
        # 10: no older run has one). The waiting resumes.
        self._resumed = [
            s
            for s in state.plan.steps
            if (status := state.ledger.steps[s.id].status) is StepStatus.in_doubt
            or (status is StepStatus.running and (s.kind is StepKind.human or s.id in state.paused_calls))
        ]
        if await self._run_ready_steps():
            return False  # only steps waiting on people remain; the state carries them
        return await self._after_steps(revision)

    async def _run_ready_steps(self) -> bool:
        """Start steps until none is left to start. True when the run winds down with only steps
        waiting on people out."""
        control, waits = self._control, self._waits
        while True:
            if not control.winding_down and control.returned > 0 and self._continuation.due():
                control.wind_down()
            if not (control.stopping or control.winding_down):
                self._start(self._startable())
            if control.winding_down and waits.hold_only(self._tasks):
                return True
            if not self._tasks:
                return False
            ended = self._ended
            await workflow.wait_condition(
                lambda: self._ended != ended or (control.winding_down and waits.hold_only(self._tasks))
            )
            self._progress.show()
            for sid, task in list(self._tasks.items()):
                if task.done():
                    del self._tasks[sid]
                    task.result()  # a bug in step handling must fail the task loudly, not vanish

    def _start(self, steps: list[Step]) -> None:
        for step in steps:
            task = asyncio.create_task(self._runner.run(step))
            # Counting ends, rather than asking every task whether it is done, keeps the
            # wake-up check above constant-time however many steps are in flight.
            task.add_done_callback(self._step_ended)
            self._tasks[step.id] = task

    def _startable(self) -> list[Step]:
        """Ready steps, plus the human steps a continue-as-new carried here mid-question."""
        frontier = self._steps.frontier
        assert frontier is not None
        steps = [s for s in frontier.ready() if s.id not in self._tasks]
        if self._resumed:
            steps += [s for s in self._resumed if s.id not in self._tasks]
            self._resumed = []
        return steps

    def _step_ended(self, _task: asyncio.Task[None]) -> None:
        self._ended += 1

    async def _after_steps(self, revision: int) -> bool:
        """No step is out: what the execution ended in. True when every step succeeded."""
        state, control = self._state, self._control
        assert state.plan is not None
        if control.halt_reason is not None:
            self._steps.fail_run(control.halt_reason)
        elif control.gave_up is not None:
            self._compensation.begin(control.gave_up, self._steps.reject_run)
        elif control.rejection is not None:
            self._steps.reject_run(control.rejection)
        elif state.failure is not None:
            # A failure answers a revision made meanwhile too: the replan (or repair) starts from it.
            state.pending = [p for p in state.pending if p.kind is not DecisionKind.plan_approval]
            state.phase = Phase.replanning
        elif state.plan.revision != revision:
            return False  # revised while running: its review (or the carried approval) says what next
        elif all_succeeded(state.plan, state.ledger):
            # A compensation has no goal to check: every undo succeeded is its end.
            if state.options.final_check and not self._compensation.active and not await self._finishing.goal_reached():
                state.phase = Phase.replanning
                return False
            return True
        elif not control.winding_down:
            blocked = [s.id for s in state.plan.steps if state.ledger.steps[s.id].status is StepStatus.pending]
            self._steps.fail_run(f"no step can run: {', '.join(blocked)} wait on steps that did not succeed")
        return False

    async def cancel(self) -> None:
        """The run is cancelled: every step task is, and each marks its own record cancelled as the
        cancellation reaches it."""
        for task in self._tasks.values():
            task.cancel()
        await workflow.wait_condition(lambda: all(t.done() for t in self._tasks.values()))
        self._tasks.clear()
