"""The Stratagem run: plan -> review gate -> execute ready steps in parallel -> record -> replan -> finish.

This is workflow code: deterministic, no I/O. Everything that touches the world happens in
activities. The plan, the ledger and every pending decision live in one `RunState`, which
continue-as-new carries. This module is the phase loop; the run holds parts that each do one job
(the map is in workflows/core.py), and the rules they apply are plain functions in `stratagem`
(decisions, transitions, scheduling, validation, usage).
"""

from __future__ import annotations

import asyncio

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, is_cancelled_exception

with workflow.unsafe.imports_passed_through():
    from stratagem.common.workflow_errors import RunFailed
    from stratagem.domain import compensation
    from stratagem.domain.ledger import EventKind, Ledger, StepStatus
    from stratagem.domain.ledger_events import RunStarted
    from stratagem.domain.plan import Author, AuthorKind
    from stratagem.domain.run_levels import RUN_LEVEL, Change, reached
    from stratagem.domain.run_types import (
        WORKFLOW_NAME,
        Mode,
        Phase,
        RunInput,
        RunResult,
        RunState,
    )
    from stratagem.domain.scheduling import Reconciliation, sink_steps

from . import processes
from .budgets import Budgets
from .compensation import Compensation
from .continuation import Continuation
from .control import RunControl
from .core import has, outcome_attributes
from .decider import Decider
from .escalation import Escalation
from .execution import Execution
from .failures import cause_message
from .finishing import Finishing
from .messages import Messages
from .observe import Observer
from .planning import Planning
from .progress import Progress
from .review import Review
from .step_runner import StepRunner
from .steps import Steps
from .waits import Waits


@workflow.defn(name=WORKFLOW_NAME)
class StratagemRun(Messages):
    @workflow.init
    def __init__(self, input: RunInput) -> None:
        # Built in __init__ so queries and updates that arrive before run() starts see a state.
        # A state is trusted only from this run's own continue-as-new. Anyone who can start a
        # workflow could otherwise hand it a state with the plan approved and every gate passed.
        # The workflow holds the only reference to a carried state, so it can let go of it (_release).
        carried, input.state = input.state, None
        info = workflow.info()
        # Temporal starts a workflow again with its first input on a cron schedule or a retry
        # policy, and then says "continued" too: Stratagem sets neither, so such a run is refused,
        # and its input's state is never taken for this run's own (a cron start once ran a forged,
        # approved state, and approved itself, from the second run of its schedule on).
        self._rerun = bool(info.cron_schedule) or info.attempt > 1
        self._forged = carried is not None and (info.continued_run_id is None or self._rerun)
        self._continued = carried is not None and not self._forged
        if carried is None or self._forged:
            run_id = input.run_id or workflow.info().workflow_id
            carried = RunState(
                run_id=run_id,
                execution_id=workflow.info().first_execution_run_id,
                goal=input.goal
                or (input.plan.goal if input.plan else "")
                or (input.process.spec.goal if input.process else ""),
                options=input.options,
                ledger=Ledger(run_id=run_id),
                level=input.level,
                started_by=input.started_by,
            )
        # Worked out here, before any handler runs. Runs from before level 7 (their histories hold
        # no marker of its patch) keep the rules they ran under. A new run without a level, or one
        # below it (a start by hand, an older client), takes the patch and is raised to its level,
        # so leaving the level out cannot switch one of level 7's rules off: signed decisions
        # (VerifyDecisions reads `signed_decisions`) and every other row of that level. (The row's
        # level, not RUN_LEVEL: a replay must raise it alike.)
        signed = Change.SIGNED_DECISIONS
        if not reached(carried, signed) and has(carried, signed):
            carried.level = signed.level
        self.state = state = carried
        self._control = control = RunControl(state)
        # Spans, metrics and the status search attribute (workflows/observe.py).
        self._observe = observe = Observer(state.run_id)
        self._progress = progress = Progress(state, observe)
        self._steps = steps = Steps(state, control, progress, observe)
        self._budgets = budgets = Budgets(state, control, progress, steps, observe)
        # Planning's adopt and problems make the compensation revision as every other; Planning,
        # built next, asks this part when no replan can follow (the lambdas read it at call time).
        compensation = Compensation(
            state,
            steps,
            lambda merged, author, reason: planning.adopt(merged, author, reason),
            lambda d: planning.problems(d),
        )
        self._planning = planning = Planning(state, steps, budgets, observe, compensation)
        self._continuation = continuation = Continuation(state, progress)
        self._finishing = finishing = Finishing(state, steps, budgets, observe)
        escalation = Escalation(state, progress)
        self._review = Review(state, progress, steps, observe, escalation, compensation)
        waits = Waits(state, control, progress, steps, budgets, escalation)
        self._runner = runner = StepRunner(state, control, steps, budgets, waits, observe)
        self._execution = execution = Execution(
            state, control, progress, steps, waits, runner, continuation, finishing, compensation
        )
        self._decider = Decider(state, control, progress, steps, budgets, planning, execution, compensation)
        self.signed_decisions = reached(carried, Change.SIGNED_DECISIONS)
        # Whether this execution took its state from its own continue-as-new (VerifyDecisions
        # checks a start's auto_approve otherwise).
        self.continued_as_new = self._continued

    # ------------------------------------------------------------------ the loop

    @workflow.run
    async def run(self, input: RunInput) -> RunResult:
        # One span per execution: a continued one is the child of the one before (continue-as-new
        # carries the trace context), so a run is one trace however often it continued.
        state = self.state
        name = f"run {state.run_id}" + (f" (continued {state.continued})" if self._continued else "")
        attributes = {
            "stratagem.run_id": state.run_id,
            "stratagem.goal": state.goal[:200],
            "stratagem.mode": state.options.mode.value,
            "stratagem.continued": state.continued,
        }
        with self._observe.span(name, attributes) as span:
            try:
                return await self._phase_loop(input)
            finally:
                # Harmless if the span does not end here (an evicted workflow): nothing is exported.
                span.set_attributes(self._continuation.outcome or outcome_attributes(state))

    async def _phase_loop(self, input: RunInput) -> RunResult:
        state, steps = self.state, self._steps
        if state.level > RUN_LEVEL:
            # Not a failure of the run: its task fails and Temporal retries it until a worker
            # that knows this level takes it (workers are upgraded before clients).
            raise RuntimeError(
                f"run {state.run_id} was started at level {state.level}; this worker runs up to {RUN_LEVEL}"
            )
        try:
            if self._rerun:
                steps.fail_run(
                    "a Stratagem run is started once: not on a Temporal cron schedule or with a retry policy"
                )
                return await self._finish()
            if self._forged:
                steps.fail_run(
                    "the run's input carries a state, which only a continue-as-new of the same run may pass on"
                )
                return await self._finish()
            if not self._continued:
                await self._start(input)
            while not state.phase.finished:
                self._progress.show()
                if self._continuation.due():
                    await self._continuation.continue_as_new(self._release)
                if state.phase is Phase.awaiting_approval:
                    await self._review.review()
                elif state.phase is Phase.running:
                    if await self._execution.execute():
                        break  # every step succeeded
                elif state.phase is Phase.replanning:
                    await self._planning.replan()
                elif state.phase is Phase.awaiting_repair:
                    await self._await_repair()
                else:  # planning only happens in _start; reaching it here is a bug
                    raise ApplicationError(f"run is in unexpected phase {state.phase.value}", non_retryable=True)
            return await self._finish()
        except BaseException as exc:
            if not is_cancelled_exception(exc):
                raise
            await self._on_cancel()
            raise asyncio.CancelledError() from exc

    def _release(self) -> None:
        """At a continue-as-new: the parts let go of what they hold of the state handed on."""
        self._steps.release()
        self._runner.forget_references()

    async def _start(self, input: RunInput) -> None:
        ledger = self.state.ledger
        self.state.started_at = workflow.now()
        prepared = await processes.render(input.process) if input.process is not None else None
        if prepared is not None:
            self.state.goal = prepared.goal
        consent: str | None = None
        if input.auto_approval is not None and input.auto_approval.verdict is not None:
            if input.auto_approval.verdict.signer:  # who let the run approve itself, as signed
                consent = input.auto_approval.by
        started = RunStarted(
            auto_approve=self.state.options.auto_approve,
            mode=self.state.options.mode.value,
            auto_approve_by=consent,
            started_by=self.state.started_by,
        )
        ledger.record(EventKind.run_started, workflow.now(), message=self.state.goal, data=started)
        if prepared is not None and input.process is not None:
            if prepared.problems:
                return self._steps.fail_run(
                    f"the inputs of {input.process.spec.label} do not fit: " + "; ".join(prepared.problems)
                )
            processes.record(self.state, prepared)
            if prepared.plan is not None:
                input.plan = prepared.plan
                self._review.rendered = prepared.plan  # what a standing approval may approve
                input.author = Author(kind=AuthorKind.human, name=f"process {input.process.spec.label}")
            input.process = None  # held by the ledger and the state now, as the supplied plan is
        try:
            self.state.catalog = await self._planning.catalog()
        except ActivityError as exc:
            if is_cancelled_exception(exc):
                raise
            return self._steps.fail_run(f"cannot read the worker's tools: {cause_message(exc)}")
        if input.plan is not None:
            author = input.author or Author(kind=AuthorKind.human, name="unknown")
            problems = self._planning.problems(input.plan)
            if problems:
                return self._steps.fail_run("the supplied plan is invalid: " + "; ".join(problems))
            self._planning.adopt(Reconciliation(draft=input.plan), author, input.plan.reason or "supplied plan")
            if input.fork is not None and not await self._planning.fork(input.fork, input.plan):
                return
            # The ledger holds the steps now. The input lives as long as this execution (run()'s
            # argument): left here, it would keep every step alive past the continue-as-new that
            # hands the state on (_release), while the next execution reads its copy in.
            input.plan = None
            self.state.phase = Phase.awaiting_approval
            return
        if self.state.options.mode is Mode.joint:
            return self._planning.adopt_joint_plan()
        planned = await self._planning.call_planner(current=None)
        if planned is not None:
            self.state.phase = Phase.awaiting_approval

    async def _await_repair(self) -> None:
        """Wait until a person retries or skips every failed step (the run goes on), revises the
        plan (a review follows) or stops the run."""
        state = self.state
        self._progress.show()
        revision = state.plan.revision if state.plan else 0
        with self._observe.span("repair", {"stratagem.revision": revision}) as span:
            await workflow.wait_condition(lambda: state.phase is not Phase.awaiting_repair)
            span.set_attribute("stratagem.outcome", state.phase.value)

    # ------------------------------------------------------------------ finishing

    async def _finish(self) -> RunResult:
        state = self.state
        if state.phase is Phase.running and state.compensation is not None:
            return await self._compensated()
        if state.phase is Phase.running and state.plan is not None:
            outputs = {sid: state.ledger.steps[sid].output for sid in sink_steps(state.plan)}
            synthesis = await self._finishing.synthesis(outputs)
            if state.phase is Phase.running:
                self._steps.end(Phase.succeeded, None, EventKind.run_succeeded)
                await workflow.wait_condition(workflow.all_handlers_finished)
                self._progress.write_memo(final=True)
                return RunResult(
                    run_id=state.run_id,
                    status=Phase.succeeded,
                    revision=state.plan.revision,
                    outputs=outputs,
                    synthesis=synthesis,
                    replans=state.ledger.replans,
                )
        await workflow.wait_condition(workflow.all_handlers_finished)
        self._progress.write_memo(final=True)
        if state.phase is Phase.rejected:
            return RunResult(
                run_id=state.run_id,
                status=Phase.rejected,
                revision=state.plan.revision if state.plan else None,
                reason=state.reason,
                replans=state.ledger.replans,
            )
        # A failed business process is a failed workflow, so the Temporal UI tells the truth.
        raise RunFailed(state.reason or "the run failed")

    async def _compensated(self) -> RunResult:
        """Every undo succeeded: the run ends compensated, a completed workflow (as a rejected
        one is), its result saying what was undone and what stays."""
        state = self.state
        reason = compensation.compensated_reason(state)
        self._steps.end(Phase.compensated, reason, EventKind.run_compensated)
        await workflow.wait_condition(workflow.all_handlers_finished)
        self._progress.write_memo(final=True)
        return RunResult(
            run_id=state.run_id,
            status=Phase.compensated,
            revision=state.plan.revision if state.plan else None,
            reason=reason,
            replans=state.ledger.replans,
        )

    async def _on_cancel(self) -> None:
        # Each step task marks its own record cancelled as the cancellation reaches it.
        await self._execution.cancel()
        self._steps.close_open(StepStatus.cancelled, "run cancelled")
        self._steps.end(Phase.cancelled, "cancelled", EventKind.run_cancelled)
        self._progress.write_memo(final=True)
