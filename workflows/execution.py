"""Execution: start every step as soon as it is ready, up to the run's parallelism, and run it.

A tool step or an llm step is an activity (a local one for a tool that declares itself quick);
a gated step first waits for a person's approval; a human step asks its question and waits for
the answer. Which steps are ready is `stratagem.scheduling.Frontier`'s job; what a step's record
and the ledger say as it moves is `stratagem.transitions`'. Workflow code: deterministic, no I/O.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, is_cancelled_exception
from temporalio.exceptions import CancelledError as TemporalCancelledError

with workflow.unsafe.imports_passed_through():
    from stratagem import activity_io, decisions, risk
    from stratagem.errors import ReferenceResolutionError
    from stratagem.ledger import EventKind, StepStatus, ToolCallRecord
    from stratagem.plan import Step, StepKind
    from stratagem.references import references_in, resolve_step
    from stratagem.roles import Role
    from stratagem.run_types import ApproveInput, DecisionKind, PausedCall, Phase, RejectInput
    from stratagem.scheduling import Frontier, all_succeeded, sink_steps
    from stratagem.stored import describe, is_stored
    from stratagem.usage import CallUsage, may_cross, price_for

from .activity_options import PLANNING_RETRY, PLANNING_TIMEOUT, max_attempts, step_activity_options
from .continuation import Continuation
from .failures import cause_attempts, cause_detail, cause_message, cause_type
from .observe import mark
from .planning import Planning

# A used-up budget holds human steps too, not only steps that call models.
HUMAN_BUDGET_PATCH = "budget-holds-human-steps"
# A tool's declared risk gates its steps whatever the plan says (level 4).
TOOL_RISK_PATCH = "tool-risk-floor"


class Execution(Planning, Continuation):
    async def _execute(self) -> bool:
        """Run steps as soon as they are ready. True when every step succeeded; otherwise the
        phase says what comes next (replanning, rejected, failed), or a continue-as-new is due."""
        state = self.state
        assert state.plan is not None
        self._stopping = False
        self._winding_down = False
        self._rejection = None
        self._frontier = Frontier(state.plan, state.ledger)
        self._references = {}
        revision = state.plan.revision
        # Steps already out waiting on a person when a continue-as-new (or a repair) carried them
        # here: a human step's question, an llm step's paused tool call. The waiting resumes.
        self._resumed = [
            s
            for s in state.plan.steps
            if state.ledger.steps[s.id].status is StepStatus.running
            and (s.kind is StepKind.human or s.id in state.paused_calls)
        ]
        while True:
            if not self._winding_down and self._finished_here > 0 and self._continue_as_new_due():
                self._winding_down = True
            if not (self._stopping or self._winding_down):
                for step in self._startable():
                    task = asyncio.create_task(self._run_step(step))
                    # Counting ends, rather than asking every task whether it is done, keeps the
                    # wake-up check below constant-time however many steps are in flight.
                    task.add_done_callback(self._step_ended)
                    self._tasks[step.id] = task
            if self._winding_down and set(self._tasks) <= self._parked:
                return False  # only steps waiting on people remain; the state carries them
            if not self._tasks:
                break
            ended = self._ended
            await workflow.wait_condition(
                lambda: self._ended != ended or (self._winding_down and set(self._tasks) <= self._parked)
            )
            self._show()
            for sid, task in list(self._tasks.items()):
                if task.done():
                    del self._tasks[sid]
                    task.result()  # a bug in step handling must fail the task loudly, not vanish

        if self._rejection is not None:
            self._close_open_steps(StepStatus.skipped, "run rejected")
            self._end(Phase.rejected, self._rejection, EventKind.run_rejected)
        elif state.failure is not None:
            # A failure answers a revision made meanwhile too: the replan (or repair) starts from it.
            state.pending = [p for p in state.pending if p.kind is not DecisionKind.plan_approval]
            state.phase = Phase.replanning
        elif state.plan.revision != revision:
            return False  # revised while running: its review (or the carried approval) says what next
        elif all_succeeded(state.plan, state.ledger):
            if state.options.final_check and not await self._goal_reached():
                state.phase = Phase.replanning
                return False
            return True
        elif not self._winding_down:
            blocked = [s.id for s in state.plan.steps if state.ledger.steps[s.id].status is StepStatus.pending]
            self._fail(f"no step can run: {', '.join(blocked)} wait on steps that did not succeed")
        return False

    def _startable(self) -> list[Step]:
        """Ready steps, plus the human steps a continue-as-new carried here mid-question."""
        assert self._frontier is not None
        steps = [s for s in self._frontier.ready() if s.id not in self._tasks]
        if self._resumed:
            steps += [s for s in self._resumed if s.id not in self._tasks]
            self._resumed = []
        return steps

    def _step_ended(self, _task: asyncio.Task[None]) -> None:
        self._ended += 1

    async def _run_step(self, step: Step) -> None:
        """One step, within a `step <id>` span: its attempts (activity side) are the children."""
        assert self.state.plan is not None
        record = self.state.ledger.steps[step.id]
        attributes: dict[str, Any] = {}
        if self._observe.tracing:
            attributes = {
                "stratagem.step.id": step.id,
                "stratagem.step.kind": step.kind.value,
                "stratagem.step.title": step.title[:200],
                "stratagem.revision": self.state.plan.revision,
            }
            if step.tool:
                attributes["stratagem.tool"] = step.tool
        with self._observe.span(f"step {step.id}", attributes) as span:
            await self._run_step_body(step)
            span.set_attribute("stratagem.step.status", record.status.value)
            span.set_attribute("stratagem.step.attempts", record.attempts)
            if record.status is StepStatus.failed:
                mark(span, record.error)

    async def _run_step_body(self, step: Step) -> None:
        while await self._run_step_once(step):
            pass  # stopped at its budget: once a person raises it, the step runs again

    async def _run_step_once(self, step: Step) -> bool:
        """One dispatch of the step. True when it stopped at the budget and must run again."""
        state = self.state
        plan = state.plan
        assert plan is not None
        record = state.ledger.steps[step.id]
        paused = state.paused_calls.get(step.id)
        if paused is not None:
            if not await self._await_call_decision(step, paused):
                return False
        elif self._gated(step) and not await self._step_gate(step):
            return False
        if step.kind is StepKind.human:
            # A used-up budget pauses questions to people too (runs from before asked anyway).
            while (used_up := self._budget_used_up()) and not self._stopping and self._patched(HUMAN_BUDGET_PATCH):
                self._request_budget(used_up)
                epoch = self._budget_epoch
                await self._park(step.id, lambda: self._budget_epoch != epoch or self._stopping or self._winding_down)
                if self._winding_down:
                    return False
            if self._stopping:
                return False
            await self._ask_human(step)
            return False
        uses_model = step.kind is StepKind.llm
        if not await self._wait_for_dispatch(step, uses_model):
            if paused is not None and self._stopping:
                self._hold_pause(step.id)
            return False  # stays pending; it runs after the replan, the continue-as-new or a raised budget
        self._busy_slots += 1
        self._model_steps_in_flight += uses_model
        try:
            outputs = state.ledger.outputs()
            deferred = _stored_references(self._referenced(step), outputs)
            if deferred is None:
                try:
                    args, instructions = resolve_step(step.args, step.instructions, outputs)
                except ReferenceResolutionError as exc:
                    self._step_started(record, plan.revision)
                    self._step_failed(record, str(exc), attempts=0)
                    return False
            else:
                # Some referenced outputs are in the store, where only an activity may read:
                # the activity resolves the references.
                args, instructions = step.args, step.instructions
            if record.status is not StepStatus.running:  # a paused step held back by a stop starts again
                self._step_started(record, plan.revision)
            try:
                result = await self._dispatch(step, plan.revision, args, instructions, outputs, deferred, paused)
            except ActivityError as exc:
                state.paused_calls.pop(step.id, None)
                if isinstance(exc.cause, TemporalCancelledError):
                    # The run was cancelled while the activity ran: that is not the step's failure.
                    raise asyncio.CancelledError() from exc
                self._record_step_work(
                    step, cause_detail(exc, "calls", CallUsage), cause_detail(exc, "tool_calls", ToolCallRecord)
                )
                if cause_type(exc) == "BudgetReachedError":
                    # Not the step's failure: it runs again with what is left once the steps
                    # beside it are done, or waits, pending, for a person to raise the budget.
                    self._budget_reruns.add(step.id)
                    record.status = StepStatus.pending
                    state.ledger.record(
                        EventKind.budget_exhausted,
                        self._now(),
                        revision=plan.revision,
                        step_id=step.id,
                        message=cause_message(exc),
                    )
                    return True
                if self._escalated(step, cause_message(exc)):
                    return True  # it runs again, on the stronger model
                trigger = "criteria_unmet" if cause_type(exc) == "CriteriaUnmetError" else "step_failed"
                self._step_failed(
                    record,
                    cause_message(exc),
                    attempts=cause_attempts(exc, max_attempts(step, state.options)),
                    trigger=trigger,
                )
                return False
            self._record_step_work(step, result.calls, result.tool_calls)
            self._record_negotiated(result.negotiated)
            self._record_failovers(result.failovers, step.id)
            record.attempts += result.attempt
            if result.awaiting is not None:
                # The executor paused on a tool call that needs a person; nothing ran. The step
                # goes on once the call is decided (run again: it waits outside a parallel slot).
                assert result.resume is not None, "a paused executor hands over its progress"
                earlier = paused.decisions if paused is not None else {}
                state.paused_calls[step.id] = PausedCall(call=result.awaiting, resume=result.resume, decisions=earlier)
                decisions.request_call_approval(state, step.id, result.awaiting, self._now())
                if state.options.auto_approve:
                    call = result.awaiting.call_id
                    auto = ApproveInput(by="auto_approve", step_id=step.id, call_id=call, comment="auto_approve")
                    decisions.decide_call(state, auto, via="auto", now=self._now())
                return True
            state.paused_calls.pop(step.id, None)
            record.output = result.output
            record.transcript = result.transcript
            self._close_step(record, StepStatus.succeeded, None)
            state.ledger.record(
                EventKind.step_succeeded,
                self._now(),
                revision=plan.revision,
                step_id=step.id,
                attempt=result.attempt,
                model=result.model,
            )
        except (asyncio.CancelledError, TemporalCancelledError):
            self._close_step(record, StepStatus.cancelled, "cancelled")
            raise
        finally:
            self._busy_slots -= 1
            self._model_steps_in_flight -= uses_model
            self._reserved.pop(step.id, None)
            self._finished_here += 1
            self._budget_epoch += 1
        return False

    async def _goal_reached(self) -> bool:
        """The final check (options.final_check): a verifier model judges the final steps' outputs
        against the goal. False when it found the goal not reached: `state.failure` says why, and
        the run replans. A check that cannot be made (its model fails) leaves the run a success,
        with the reason in the ledger: the steps did succeed."""
        state = self.state
        assert state.plan is not None
        options = state.options
        model = options.verifier or options.executor or options.planner
        if not model:
            return True
        outputs = {sid: state.ledger.steps[sid].output for sid in sink_steps(state.plan)}
        request = activity_io.GoalCheckInput(
            goal=state.goal,
            model=model,
            outputs=outputs,
            call_index=sum(1 for e in state.ledger.events if e.kind is EventKind.goal_checked),
            price=price_for(model, options.prices),
            capabilities=options.capabilities_of(model).get(model),
            fallbacks=options.fallbacks.get(model, []),
        )
        try:
            with self._observe.span("final check", {"stratagem.model": model}):
                out = await workflow.execute_activity(
                    activity_io.CHECK_GOAL,
                    request,
                    task_queue=self._queue(Role.planner),
                    result_type=activity_io.GoalCheckOutput,
                    start_to_close_timeout=PLANNING_TIMEOUT,
                    retry_policy=PLANNING_RETRY,
                    summary="final check",
                )
        except ActivityError as exc:
            if is_cancelled_exception(exc):
                raise
            self._record_calls(cause_detail(exc, "calls", CallUsage), "verify")
            state.ledger.record(
                EventKind.goal_checked,
                self._now(),
                revision=state.plan.revision,
                message=f"the final check could not be made: {cause_message(exc)}",
                met=None,
            )
            return True
        self._record_calls(out.calls, "verify")
        self._record_negotiated(out.negotiated)
        self._record_failovers(out.failovers)
        state.ledger.record(
            EventKind.goal_checked, self._now(), revision=state.plan.revision, message=out.reason, met=out.met
        )
        if out.met:
            return True
        state.failure = f"the final check found the goal not reached: {out.reason}"
        return False

    def _escalated(self, step: Step, error: str) -> bool:
        """An llm step that failed on a model with a stronger one configured (`escalate:`) runs once
        more on that one, before the run replans. True when it does."""
        state = self.state
        if step.kind is not StepKind.llm or step.id in state.escalated or not state.options.escalate:
            return False
        model = state.options.model_for(step)
        stronger = state.options.escalate.get(model or "")
        if not stronger or self._stopping:
            return False
        state.escalated[step.id] = stronger
        record = state.ledger.steps[step.id]
        record.status = StepStatus.pending
        state.ledger.record(
            EventKind.step_escalated,
            self._now(),
            revision=state.plan.revision if state.plan else None,
            step_id=step.id,
            message=f"failed on {model} ({error[:300]}); running again on {stronger}",
            model=stronger,
        )
        return True

    async def _wait_for_dispatch(self, step: Step, uses_model: bool) -> bool:
        """Wait for a free slot and for the budget to allow the step. False if the run stops,
        winds down or is told to stop meanwhile; the step then stays pending.

        Every waiter's condition is checked in one pass before any of them resumes, so several
        may wake for one free slot; re-checking here, with no await before taking it, is exact.
        """

        def held_back() -> bool:
            return self._stopping or self._winding_down

        self._model_steps_waiting += uses_model
        try:
            return await self._wait_for_slot(step, uses_model, held_back)
        finally:
            self._model_steps_waiting -= uses_model

    async def _wait_for_slot(self, step: Step, uses_model: bool, held_back: Callable[[], bool]) -> bool:
        state = self.state
        while not held_back():
            used_up = self._budget_used_up() or (uses_model and self._budget_short())
            if used_up:
                # Parked: a person decides, and a continue-as-new need not wait for them.
                self._request_budget(used_up)
                epoch = self._budget_epoch
                await self._park(step.id, lambda: self._budget_epoch != epoch or held_back())
                continue
            # At most one model-using step may be out while the next could cross a limit.
            hold = (
                uses_model
                and self._model_steps_in_flight > 0
                and (
                    step.id in self._budget_reruns
                    or may_cross(
                        state.options.budget, state.ledger.usage, state.ledger.largest_step, self._model_steps_in_flight
                    )
                )
            )
            if not hold and self._busy_slots < state.options.max_parallel:
                return True
            epoch = self._budget_epoch
            await workflow.wait_condition(
                lambda: (
                    held_back()
                    or self._budget_epoch != epoch
                    or (not hold and self._busy_slots < state.options.max_parallel)
                )
            )
        return False

    def _gated(self, step: Step) -> bool:
        """Whether a step waits for its own approval: what the plan says, raised by its tool's own
        declaration (runs from before level 4 only behind a patch: a catalogue that a newer tools
        worker described with a floor must not gate a step their history shows dispatched)."""
        if step.needs_step_approval:
            return True
        return risk.needs_approval(step, self.state.catalog) and self._since(4, TOOL_RISK_PATCH)

    async def _await_call_decision(self, step: Step, paused: PausedCall) -> bool:
        """An llm step paused on a tool call: wait for a person's decision on it. False if the run
        winds down first or stops meanwhile; the state keeps the pause either way (and the request,
        which a person may still decide), so the step goes on where it paused, with the same call
        positions and keys, unless a revision changes or drops it (Planning._adopt)."""
        state = self.state
        if paused.decided:
            return True
        decisions.request_call_approval(state, step.id, paused.call, self._now())
        await self._park(step.id, lambda: paused.decided or self._stopping or self._winding_down)
        if paused.decided:
            return True
        if self._stopping and not self._winding_down:
            self._hold_pause(step.id)
        return False

    def _hold_pause(self, step_id: str) -> None:
        """A paused step the run stopped for: pending again, so a revision may keep, change or drop
        it like any step that has not finished; its pause waits in the state."""
        record = self.state.ledger.steps[step_id]
        record.status, record.started_at = StepStatus.pending, None

    async def _dispatch(
        self,
        step: Step,
        revision: int,
        args: Any,
        instructions: str,
        outputs: Mapping[str, Any],
        references: dict[str, Any] | None,
        paused: PausedCall | None = None,
    ) -> activity_io.StepOutput:
        options = self.state.options
        if step.kind is StepKind.tool:
            assert step.tool is not None
            request: Any = activity_io.ToolStepInput(
                run_id=self.state.run_id,
                execution_id=self.state.execution_id,
                step_id=step.id,
                revision=revision,
                tool=step.tool,
                args=args,
                references=references,
                workspace=self.state.options.workspace,
            )
            spec = self.state.catalog.get(step.tool)
            if spec is not None and spec.local:
                # The fast path: no task-queue round trip, and no heartbeats (the tool is quick).
                local = step_activity_options(step, options, local=True)
                return await workflow.execute_local_activity(activity_io.RUN_TOOL, request, **local)
            queue, remote = self._queue(Role.tools), step_activity_options(step, options)
            return await workflow.execute_activity(activity_io.RUN_TOOL, request, task_queue=queue, **remote)
        model = self.state.escalated.get(step.id) or options.model_for(step)
        assert model, "validation refuses llm steps that no configured model can run"
        request = activity_io.LlmStepInput(
            run_id=self.state.run_id,
            execution_id=self.state.execution_id,
            revision=revision,
            step=step,
            instructions=instructions,
            inputs={dep: outputs.get(dep) for dep in step.depends_on},
            model=model,
            max_rounds=options.max_tool_rounds,
            references=references,
            price=price_for(model, options.prices),
            allowance=self._allowance(step),
            workspace=options.workspace,
            resume=paused.resume if paused is not None else None,
            call_decisions=paused.decisions if paused is not None else {},
            verifier=options.verifier if step.success_criteria else None,
            verifier_price=price_for(options.verifier, options.prices) if options.verifier else None,
            capabilities=options.capabilities_of(model, options.verifier, *options.fallbacks.get(model, [])),
            fallbacks={m: options.fallbacks[m] for m in (model, options.verifier) if m and m in options.fallbacks},
        )
        return await workflow.execute_activity(
            activity_io.RUN_LLM, request, task_queue=self._queue(Role.executor), **step_activity_options(step, options)
        )

    def _referenced(self, step: Step) -> frozenset[str]:
        """The steps `step` refers to, worked out once per revision."""
        found = self._references.get(step.id)
        if found is None:
            found = self._references[step.id] = frozenset(
                ref.step_id for ref in references_in(step.instructions, step.args)
            )
        return found

    async def _step_gate(self, step: Step) -> bool:
        """Wait for a person to approve a gated step. False if it was rejected or the run is stopping."""
        state = self.state
        assert state.plan is not None
        if step.id not in state.step_approvals:
            if state.options.auto_approve:
                self._decide_step(ApproveInput(by="auto_approve", step_id=step.id, comment="auto_approve"), via="auto")
            else:
                decisions.request_step_approval(state, step, self._now())
                await self._park(step.id, lambda: step.id in state.step_approvals or self._stopping)
                decisions.remove_pending(state, step.id)
        return state.step_approvals.get(step.id, False) and not self._stopping

    def _decide_step(self, decision: ApproveInput | RejectInput, *, via: str) -> None:
        """A person's (or auto_approve's) decision on a gated step; a rejection stops the run."""
        rejection = decisions.decide_step(self.state, decision, via=via, now=self._now())
        if rejection is not None:
            self._rejection = rejection
            self._stopping = True

    async def _ask_human(self, step: Step) -> None:
        state = self.state
        assert state.plan is not None
        record = state.ledger.steps[step.id]
        revision = state.plan.revision
        pending = decisions.pending_for(state, DecisionKind.human_answer, step.id)
        if pending is None:
            try:
                # A stored output appears in a question as a short description of itself.
                shown = {sid: describe(v) if is_stored(v) else v for sid, v in state.ledger.outputs().items()}
                _, question = resolve_step({}, step.instructions, shown)
            except ReferenceResolutionError as exc:
                self._step_started(record, revision)
                self._step_failed(record, str(exc), attempts=0)
                return
            self._step_started(record, revision)
            pending = decisions.request_answer(state, step.id, question, self._now())
        if step.id not in state.answers:
            # The deadline counts from when the question was asked, across continue-as-new.
            remaining = None
            if step.timeout_seconds:
                deadline = pending.since + timedelta(seconds=step.timeout_seconds)
                remaining = max(deadline - self._now(), timedelta(milliseconds=1))
            try:
                await self._park(step.id, lambda: step.id in state.answers or self._stopping, remaining)
            except TimeoutError:
                decisions.remove_pending(state, step.id)
                self._step_failed(record, f"no answer within {step.timeout_seconds:g} seconds", attempts=1)
                return
            except (asyncio.CancelledError, TemporalCancelledError):
                decisions.remove_pending(state, step.id)
                self._close_step(record, StepStatus.cancelled, "cancelled")
                raise
            finally:
                self._finished_here += 1
            if step.id not in state.answers:  # stopping: ask again if a revision keeps the step
                decisions.remove_pending(state, step.id)
                record.status, record.started_at = StepStatus.pending, None
                return
        decisions.remove_pending(state, step.id)
        answer = state.answers.pop(step.id)
        record.attempts += 1
        record.output = answer
        self._close_step(record, StepStatus.succeeded, None)
        state.ledger.record(EventKind.step_succeeded, self._now(), revision=revision, step_id=step.id)

    async def _park(self, step_id: str, until: Any, timeout: timedelta | None = None) -> None:
        """Wait on a person. A parked step holds no work, so a continue-as-new need not wait for it."""
        self._parked.add(step_id)
        self._show()
        try:
            await workflow.wait_condition(until, timeout=timeout, timeout_summary=f"waiting on a person for {step_id}")
        finally:
            self._parked.discard(step_id)


def _stored_references(referenced: frozenset[str], outputs: Mapping[str, Any]) -> dict[str, Any] | None:
    """The outputs a step refers to, if any of them is in the store; else None."""
    if not any(is_stored(outputs.get(sid)) for sid in referenced):
        return None
    return {sid: outputs[sid] for sid in referenced if sid in outputs}
