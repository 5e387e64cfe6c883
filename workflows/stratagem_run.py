"""The Stratagem run: plan -> review gate -> execute ready steps in parallel -> record -> replan -> finish.

This is workflow code: deterministic, no I/O. Everything that touches the world happens in
activities. The plan, the ledger and every pending decision live in one `RunState`, which
continue-as-new carries. This module is the phase loop; the class is assembled from parts that
each do one job (the map is in workflows/core.py), and the rules they apply are plain functions
in `stratagem` (decisions, transitions, scheduling, validation, usage).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, is_cancelled_exception

with workflow.unsafe.imports_passed_through():
    from opentelemetry import trace

    from stratagem import activity_io, decisions
    from stratagem.ledger import EventKind, Ledger, StepStatus
    from stratagem.plan import Author, AuthorKind
    from stratagem.roles import Role
    from stratagem.run_types import (
        RUN_LEVEL,
        WORKFLOW_NAME,
        ApproveInput,
        DecisionKind,
        Mode,
        Phase,
        ReviewTimeoutAction,
        RunInput,
        RunResult,
        RunState,
    )
    from stratagem.scheduling import Reconciliation, sink_steps
    from stratagem.signing import SIGNED_LEVEL, SIGNED_PATCH
    from stratagem.usage import price_for

from .activity_options import PLANNING_RETRY, PLANNING_TIMEOUT
from .failures import cause_message
from .messages import Messages

# A replan that loosens what was approved (lower risk, more tools, a gated step's new arguments)
# waits for a person even when replan_requires_approval is off; older runs were approved by policy.
LOOSENED_PATCH = "replan-loosened-needs-a-person"


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
                goal=input.goal or (input.plan.goal if input.plan else ""),
                options=input.options,
                ledger=Ledger(run_id=run_id),
                level=input.level,
            )
        # Worked out here, before any handler runs. Runs from before level 7 (their histories hold
        # no SIGNED_PATCH marker) keep the rules they ran under. A new run without a level, or one
        # below it (a start by hand, an older client), takes the patch and level 7's rules with it,
        # so leaving the level out cannot switch one off: signed decisions (VerifyDecisions reads
        # `signed_decisions`), forks read from their source, bound call approvals, answers held to
        # the approver list. (A fixed level, not RUN_LEVEL: a replay must bump it alike.)
        if carried.level < SIGNED_LEVEL and workflow.patched(SIGNED_PATCH):
            carried.level = SIGNED_LEVEL
        super().__init__(carried)
        self.signed_decisions = carried.level >= SIGNED_LEVEL
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
                span.set_attributes(self._outcome or self._outcome_attributes())

    async def _phase_loop(self, input: RunInput) -> RunResult:
        if self.state.level > RUN_LEVEL:
            # Not a failure of the run: its task fails and Temporal retries it until a worker
            # that knows this level takes it (workers are upgraded before clients).
            raise RuntimeError(
                f"run {self.state.run_id} was started at level {self.state.level}; this worker runs up to {RUN_LEVEL}"
            )
        try:
            if self._rerun:
                self._fail("a Stratagem run is started once: not on a Temporal cron schedule or with a retry policy")
                return await self._finish()
            if self._forged:
                self._fail("the run's input carries a state, which only a continue-as-new of the same run may pass on")
                return await self._finish()
            if not self._continued:
                await self._start(input)
            while not self.state.phase.finished:
                self._show()
                if self._continue_as_new_due():
                    await self._continue_as_new()
                if self.state.phase is Phase.awaiting_approval:
                    await self._review()
                elif self.state.phase is Phase.running:
                    if await self._execute():
                        break  # every step succeeded
                elif self.state.phase is Phase.replanning:
                    await self._replan()
                elif self.state.phase is Phase.awaiting_repair:
                    await self._await_repair()
                else:  # planning only happens in _start; reaching it here is a bug
                    raise ApplicationError(f"run is in unexpected phase {self.state.phase.value}", non_retryable=True)
            return await self._finish()
        except BaseException as exc:
            if not is_cancelled_exception(exc):
                raise
            await self._on_cancel()
            raise asyncio.CancelledError() from exc

    async def _start(self, input: RunInput) -> None:
        ledger = self.state.ledger
        self.state.started_at = self._now()
        consent: dict[str, Any] = {}
        if input.auto_approval is not None and input.auto_approval.verdict is not None:
            if input.auto_approval.verdict.signer:  # who let the run approve itself, as signed
                consent["auto_approve_by"] = input.auto_approval.by
        ledger.record(
            EventKind.run_started,
            self._now(),
            message=self.state.goal,
            auto_approve=self.state.options.auto_approve,
            mode=self.state.options.mode.value,
            **consent,
        )
        try:
            self.state.catalog = await self._catalog()
        except ActivityError as exc:
            if is_cancelled_exception(exc):
                raise
            return self._fail(f"cannot read the worker's tools: {cause_message(exc)}")
        if input.plan is not None:
            author = input.author or Author(kind=AuthorKind.human, name="unknown")
            problems = self._problems(input.plan)
            if problems:
                return self._fail("the supplied plan is invalid: " + "; ".join(problems))
            self._adopt(Reconciliation(draft=input.plan), author, input.plan.reason or "supplied plan")
            if input.fork is not None and not await self._fork(input.fork, input.plan):
                return
            # The ledger holds the steps now. The input lives as long as this execution (run()'s
            # argument): left here, it would keep every step alive past the continue-as-new that
            # hands the state on (_release), while the next execution reads its copy in.
            input.plan = None
            self.state.phase = Phase.awaiting_approval
            return
        if self.state.options.mode is Mode.joint:
            return self._adopt_joint_plan()
        planned = await self._call_planner(current=None)
        if planned is not None:
            self.state.phase = Phase.awaiting_approval

    # ------------------------------------------------------------------ review gate

    async def _review(self) -> None:
        state = self.state
        assert state.plan is not None
        is_replan = state.ledger.replans > 0 and state.plan.revision > 1
        if state.options.auto_approve:
            decision = ApproveInput(by="auto_approve", revision=state.plan.revision, comment="auto_approve")
            decisions.approve_plan(state, decision, via="auto", now=self._now())
            return
        changes = decisions.review_changes(state, self._partial())
        if changes is not None and not decisions.covered(changes):
            # Nothing differs from the approved revision (a replan that retries the failed steps as
            # they were): its approval stands.
            return decisions.carry_approval(state, self._now())
        why: list[str] = []
        if is_replan and not state.options.replan_requires_approval and not state.pending:
            why = decisions.loosened(state.approved_plan, state.plan)
            if not why or not self._patched(LOOSENED_PATCH):
                decision = ApproveInput(
                    by="policy", revision=state.plan.revision, comment="replan_requires_approval is off"
                )
                decisions.approve_plan(state, decision, via="policy", now=self._now())
                return
            state.ledger.record(
                EventKind.review_escalated,
                self._now(),
                revision=state.plan.revision,
                message="needs a person although replan_requires_approval is off: " + "; ".join(why),
            )
        if state.level < 4:  # as runs before level 4 decided it (their memo writes replay unchanged)
            if not state.pending:
                state.pending = [decisions.plan_approval_request(state, self._now(), why, changes)]
        elif decisions.pending_for(state, DecisionKind.plan_approval, None) is None:  # else carried here
            state.pending.insert(0, decisions.plan_approval_request(state, self._now(), why, changes))
        self._show()
        attributes = {"stratagem.revision": state.plan.revision}
        with self._observe.span(f"review revision {state.plan.revision}", attributes) as span:
            await self._await_review()
            span.set_attribute("stratagem.outcome", state.phase.value)
            span.set_attribute("stratagem.revision.decided", state.plan.revision)
            if state.ledger.decisions:
                span.set_attribute("stratagem.decided_by", state.ledger.decisions[-1].by)

    async def _await_review(self) -> None:
        state = self.state
        assert state.plan is not None
        timeout = state.options.review_timeout_seconds
        while state.phase is Phase.awaiting_approval:
            revision = state.plan.revision
            try:
                # A revise starts a new review (and a new timeout): the reviewer sees a new plan.
                await workflow.wait_condition(
                    lambda: (
                        state.phase is not Phase.awaiting_approval
                        or (state.plan is not None and state.plan.revision != revision)
                    ),
                    timeout=timedelta(seconds=timeout) if timeout else None,
                    timeout_summary="review timeout",
                )
            except TimeoutError:
                if state.options.on_review_timeout is ReviewTimeoutAction.fail:
                    state.ledger.record(
                        EventKind.review_timed_out,
                        self._now(),
                        revision=revision,
                        message=f"no decision within {timeout:g} s",
                    )
                    self._fail(f"no decision on revision {revision} within {timeout:g} seconds")
                    return
                for pending in state.pending:
                    pending.escalated = True
                state.ledger.record(
                    EventKind.review_escalated,
                    self._now(),
                    revision=revision,
                    message=f"no decision within {timeout:g} s; escalated, still waiting",
                )
                timeout = None

    # ------------------------------------------------------------------ replanning

    async def _replan(self) -> None:
        state = self.state
        assert state.plan is not None
        failure = state.failure or "a step failed"
        if state.ledger.replans >= state.options.max_replans:
            state.ledger.record(
                EventKind.replan_cap_reached,
                self._now(),
                revision=state.plan.revision,
                message=f"{state.ledger.replans} of {state.options.max_replans} replans used",
            )
            return self._cannot_replan(f"{failure}; the replan limit ({state.options.max_replans}) is reached")
        if state.options.mode is Mode.joint:
            return self._cannot_replan(f"{failure}; a joint run does not replan")
        if not state.options.planner:
            return self._cannot_replan(f"{failure}; no planner model is configured to revise the plan")
        state.ledger.replans += 1
        state.ledger.record(
            EventKind.replan_requested,
            self._now(),
            revision=state.plan.revision,
            message=failure,
            replan=state.ledger.replans,
            trigger=self._trigger(),
        )
        self._observe.replanned()
        failed = self._failure_span
        self._failure_span = None
        links = [trace.Link(failed.get_span_context(), {"stratagem.failure": failure[:200]})] if failed else []
        attributes = {"stratagem.replan": state.ledger.replans, "stratagem.failure": failure[:500]}
        with self._observe.span(f"replan {state.ledger.replans}", attributes, links=links):
            if await self._call_planner(current=state.plan) is not None:
                state.phase = Phase.awaiting_approval

    def _trigger(self) -> str:
        """What the replan answers: the last failure's kind (step_failed, criteria_unmet, or
        goal_unmet when the final check found the goal not reached)."""
        for event in reversed(self.state.ledger.events):
            if event.kind is EventKind.step_failed:
                return str(event.data.get("trigger", "step_failed"))
            if event.kind is EventKind.goal_checked and event.data.get("met") is False:
                return "goal_unmet"
        return "step_failed"

    async def _await_repair(self) -> None:
        """Wait until a person retries or skips every failed step (the run goes on), revises the
        plan (a review follows) or stops the run."""
        state = self.state
        self._show()
        revision = state.plan.revision if state.plan else 0
        with self._observe.span("repair", {"stratagem.revision": revision}) as span:
            await workflow.wait_condition(lambda: state.phase is not Phase.awaiting_repair)
            span.set_attribute("stratagem.outcome", state.phase.value)

    # ------------------------------------------------------------------ finishing

    async def _finish(self) -> RunResult:
        state = self.state
        if state.phase is Phase.running and state.plan is not None:
            outputs = {sid: state.ledger.steps[sid].output for sid in sink_steps(state.plan)}
            synthesis = None
            if state.options.synthesizer and await self._budget_gate():
                model = state.options.synthesizer
                try:
                    with self._observe.span("synthesis", {"stratagem.model": model}):
                        out = await workflow.execute_activity(
                            activity_io.SYNTHESIZE,
                            activity_io.SynthesisInput(
                                goal=state.goal,
                                model=model,
                                outputs=outputs,
                                price=price_for(model, state.options.prices),
                                capabilities=state.options.capabilities_of(model).get(model),
                                fallbacks=state.options.fallbacks.get(model, []),
                            ),
                            task_queue=self._queue(Role.planner),
                            result_type=activity_io.SynthesisOutput,
                            start_to_close_timeout=PLANNING_TIMEOUT,
                            retry_policy=PLANNING_RETRY,
                            summary="synthesis",
                        )
                    self._record_calls(out.calls, "synthesize")
                    self._record_failovers(out.failovers)
                    synthesis = out.text
                except ActivityError as exc:
                    if is_cancelled_exception(exc):
                        raise
                    self._fail(f"every step succeeded, but the final synthesis failed: {cause_message(exc)}")
            if state.phase is Phase.running:
                self._end(Phase.succeeded, None, EventKind.run_succeeded)
                await workflow.wait_condition(workflow.all_handlers_finished)
                self._write_memo(final=True)
                return RunResult(
                    run_id=state.run_id,
                    status=Phase.succeeded,
                    revision=state.plan.revision,
                    outputs=outputs,
                    synthesis=synthesis,
                    replans=state.ledger.replans,
                )
        await workflow.wait_condition(workflow.all_handlers_finished)
        self._write_memo(final=True)
        if state.phase is Phase.rejected:
            return RunResult(
                run_id=state.run_id,
                status=Phase.rejected,
                revision=state.plan.revision if state.plan else None,
                reason=state.reason,
                replans=state.ledger.replans,
            )
        # A failed business process is a failed workflow, so the Temporal UI tells the truth.
        raise ApplicationError(state.reason or "the run failed", type="RunFailed", non_retryable=True)

    async def _on_cancel(self) -> None:
        for task in self._tasks.values():
            task.cancel()
        # Each step task marks its own record cancelled as the cancellation reaches it.
        await workflow.wait_condition(lambda: all(t.done() for t in self._tasks.values()))
        self._tasks.clear()
        self._close_open_steps(StepStatus.cancelled, "run cancelled")
        self._end(Phase.cancelled, "cancelled", EventKind.run_cancelled)
        self._write_memo(final=True)
