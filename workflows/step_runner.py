"""One step, from its gates to what its outcome records. A tool step or an llm step is an
activity (a local one for a tool that declares itself quick); its outcome is a success, a pause
on a tool call a person must decide, a stop at its share of the budget, an escalation to a
stronger model, or a failure. Waits on people are `Waits`'; what a step's record and the ledger
say, `Steps`'. Workflow code: deterministic, no I/O.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from temporalio import workflow
from temporalio.exceptions import ActivityError
from temporalio.exceptions import CancelledError as TemporalCancelledError

with workflow.unsafe.imports_passed_through():
    from stratagem.common.errors import BudgetReachedError, CriteriaUnmetError, ReferenceResolutionError, StratagemError
    from stratagem.domain import activity_io, decisions
    from stratagem.domain.ledger import EventKind, StepRecord, StepStatus, ToolCallRecord
    from stratagem.domain.ledger_events import StepEscalated, StepSucceeded
    from stratagem.domain.plan import Step, StepKind
    from stratagem.domain.references import references_in, resolve_step
    from stratagem.domain.roles import Role
    from stratagem.domain.run_types import ApproveInput, PausedCall, RunState
    from stratagem.domain.stored import is_stored
    from stratagem.domain.usage import CallUsage, may_cross, price_for

from .activity_options import max_attempts, step_activity_options
from .attempts import AttemptsFailed, InDoubt, counted_here, run_attempts
from .budgets import Budgets
from .control import RunControl
from .core import queue
from .doubts import Doubts
from .failures import cause_attempts, cause_detail, cause_error, cause_message
from .observe import Observer, mark
from .steps import Steps
from .waits import Waits

# What a failed step's replan answers, by the error its activity failed with.
TRIGGERS: dict[type[StratagemError], str] = {CriteriaUnmetError: "criteria_unmet"}


class _Inputs(NamedTuple):
    """What a step's activity is sent: its arguments and instructions (references resolved, unless
    some referenced output is in the store, where only an activity may read), the outputs so far,
    and the referenced outputs the activity resolves itself (None when resolved here)."""

    args: Any
    instructions: str
    outputs: Mapping[str, Any]
    deferred: dict[str, Any] | None


class StepRunner:
    def __init__(
        self, state: RunState, control: RunControl, steps: Steps, budgets: Budgets, waits: Waits, observe: Observer
    ) -> None:
        self._state = state
        self._control = control
        self._steps = steps
        self._budgets = budgets
        self._waits = waits
        self._observe = observe
        self._doubts = Doubts(state, control, waits)
        self._busy_slots = 0
        # Per revision, the steps each step refers to (a step's references never change).
        self._references: dict[str, frozenset[str]] = {}

    def forget_references(self) -> None:
        """A new revision runs (or the state is handed on): references are worked out afresh."""
        self._references = {}

    async def run(self, step: Step) -> None:
        """One step, within a `step <id>` span: its attempts (activity side) are the children."""
        assert self._state.plan is not None
        record = self._state.ledger.steps[step.id]
        attributes: dict[str, Any] = {}
        if self._observe.tracing:
            attributes = {
                "stratagem.step.id": step.id,
                "stratagem.step.kind": step.kind.value,
                "stratagem.step.title": step.title[:200],
                "stratagem.revision": self._state.plan.revision,
            }
            if step.tool:
                attributes["stratagem.tool"] = step.tool
        with self._observe.span(f"step {step.id}", attributes) as span:
            while await self._once(step):
                pass  # stopped at its budget or paused on a call: it runs again
            span.set_attribute("stratagem.step.status", record.status.value)
            span.set_attribute("stratagem.step.attempts", record.attempts)
            if record.status is StepStatus.failed:
                mark(span, record.error)

    async def _once(self, step: Step) -> bool:
        """One dispatch of the step. True when it must run again (stopped at the budget, escalated,
        or paused on a call that a person decides)."""
        state = self._state
        assert state.plan is not None
        revision = state.plan.revision  # the revision the step runs under, whatever is revised meanwhile
        record = state.ledger.steps[step.id]
        if record.status is StepStatus.in_doubt and not await self._doubts.settle(step):
            return False  # it happened (the step succeeded), or the state carries the question on
        paused = state.paused_calls.get(step.id)
        if not await self._waits.cleared(step, paused):
            return False
        if step.kind is StepKind.human:
            await self._waits.human(step)
            return False
        uses_model = step.kind is StepKind.llm
        if not await self._wait_for_dispatch(step, uses_model):
            if paused is not None and self._control.stopping:
                self._waits.hold_pause(step.id)
            return False  # stays pending; it runs after the replan, the continue-as-new or a raised budget
        self._busy_slots += 1
        self._budgets.step_out(uses_model)
        try:
            return await self._run_activity(step, record, revision, paused)
        except (asyncio.CancelledError, TemporalCancelledError):
            self._steps.close(record, StepStatus.cancelled, "cancelled")
            raise
        finally:
            self._busy_slots -= 1
            self._budgets.step_back(step.id, uses_model)
            self._control.step_returned()

    # ------------------------------------------------------------------ a slot and the budget

    async def _wait_for_dispatch(self, step: Step, uses_model: bool) -> bool:
        """Wait for a free slot and for the budget to allow the step. False if the run stops,
        winds down or is told to stop meanwhile; the step then stays pending.

        Every waiter's condition is checked in one pass before any of them resumes, so several
        may wake for one free slot; re-checking here, with no await before taking it, is exact.
        """
        control = self._control

        def held_back() -> bool:
            return control.stopping or control.winding_down

        self._budgets.waiting(uses_model)
        try:
            return await self._wait_for_slot(step, uses_model, held_back)
        finally:
            self._budgets.done_waiting(uses_model)

    async def _wait_for_slot(self, step: Step, uses_model: bool, held_back: Callable[[], bool]) -> bool:
        state, budgets = self._state, self._budgets
        while not held_back():
            used_up = budgets.used_up() or (uses_model and budgets.short())
            if used_up:
                # Parked: a person decides, and a continue-as-new need not wait for them.
                budgets.request(used_up)
                epoch = budgets.epoch
                await self._waits.park(step.id, lambda: budgets.epoch != epoch or held_back())
                continue
            # At most one model-using step may be out while the next could cross a limit.
            in_flight = budgets.model_steps_in_flight
            hold = (
                uses_model
                and in_flight > 0
                and (
                    budgets.is_rerun(step.id)
                    or may_cross(state.options.budget, state.ledger.usage, state.ledger.largest_step, in_flight)
                )
            )
            if not hold and self._busy_slots < state.options.max_parallel:
                return True
            epoch = budgets.epoch
            await workflow.wait_condition(
                lambda: (
                    held_back()
                    or budgets.epoch != epoch
                    or (not hold and self._busy_slots < state.options.max_parallel)
                )
            )
        return False

    # ------------------------------------------------------------------ the activity

    async def _run_activity(self, step: Step, record: StepRecord, revision: int, paused: PausedCall | None) -> bool:
        if paused is None and not self._waits.approved_as_shown(step):
            return True  # asked again, with what it would run now
        inputs = self._inputs(step, record, revision)
        if inputs is None:
            return False
        if record.status is not StepStatus.running:  # a paused step held back by a stop starts again
            self._steps.started(record, revision)
        try:
            result = await self._dispatch(step, revision, inputs, paused)
        except ActivityError as exc:
            return self._failed(step, record, revision, exc)
        except AttemptsFailed as failed:
            return self._failed(step, record, revision, failed.error, attempts=failed.attempts)
        except InDoubt as doubt:
            await self._doubts.begin(step, record, inputs.args, doubt)
            return True  # it waits for a person's word (_once)
        return self._succeeded(step, record, revision, result, paused)

    def _inputs(self, step: Step, record: StepRecord, revision: int) -> _Inputs | None:
        """What the activity is sent; None if a reference cannot be resolved (the step failed)."""
        outputs = self._state.ledger.outputs()
        deferred = _stored_references(self._referenced(step), outputs)
        if deferred is not None:
            return _Inputs(step.args, step.instructions, outputs, deferred)
        try:
            args, instructions = resolve_step(step.args, step.instructions, outputs)
        except ReferenceResolutionError as exc:
            self._steps.started(record, revision)
            self._steps.failed(record, str(exc), attempts=0)
            return None
        return _Inputs(args, instructions, outputs, None)

    def _referenced(self, step: Step) -> frozenset[str]:
        """The steps `step` refers to, worked out once per revision."""
        found = self._references.get(step.id)
        if found is None:
            found = self._references[step.id] = frozenset(
                ref.step_id for ref in references_in(step.instructions, step.args)
            )
        return found

    async def _dispatch(
        self, step: Step, revision: int, inputs: _Inputs, paused: PausedCall | None
    ) -> activity_io.StepOutput:
        state, options = self._state, self._state.options
        if step.kind is StepKind.tool:
            assert step.tool is not None
            request: Any = activity_io.ToolStepInput(
                run_id=state.run_id,
                execution_id=state.execution_id,
                step_id=step.id,
                revision=revision,
                tool=step.tool,
                args=inputs.args,
                references=inputs.deferred,
                workspace=options.workspace,
            )
            spec = state.catalog.get(step.tool)
            if counted_here(state, spec):
                # Never a local activity: a lost worker's local attempt is re-run on replay, unseen.
                assert spec is not None
                return await run_attempts(state, step, spec, request, state.ledger.steps[step.id].attempts)
            if spec is not None and spec.local:
                # The fast path: no task-queue round trip, and no heartbeats (the tool is quick).
                local = step_activity_options(step, options, local=True)
                return await workflow.execute_local_activity(activity_io.RUN_TOOL, request, **local)
            tools, remote = queue(Role.tools), step_activity_options(step, options)
            return await workflow.execute_activity(activity_io.RUN_TOOL, request, task_queue=tools, **remote)
        model = state.escalated.get(step.id) or options.model_for(step)
        assert model, "validation refuses llm steps that no configured model can run"
        request = activity_io.LlmStepInput(
            run_id=state.run_id,
            execution_id=state.execution_id,
            revision=revision,
            step=step,
            instructions=inputs.instructions,
            inputs={dep: inputs.outputs.get(dep) for dep in step.depends_on},
            model=model,
            max_rounds=options.max_tool_rounds,
            max_parallel=options.max_parallel,
            references=inputs.deferred,
            price=price_for(model, options.prices),
            allowance=self._budgets.allowance(step),
            workspace=options.workspace,
            resume=paused.resume if paused is not None else None,
            call_decisions=paused.decisions if paused is not None else {},
            verifier=options.verifier if step.success_criteria else None,
            verifier_price=price_for(options.verifier, options.prices) if options.verifier else None,
            capabilities=options.capabilities_of(model, options.verifier, *options.fallbacks.get(model, [])),
            fallbacks={m: options.fallbacks[m] for m in (model, options.verifier) if m and m in options.fallbacks},
        )
        return await workflow.execute_activity(
            activity_io.RUN_LLM, request, task_queue=queue(Role.executor), **step_activity_options(step, options)
        )

    # ------------------------------------------------------------------ outcomes

    def _failed(
        self, step: Step, record: StepRecord, revision: int, exc: ActivityError, attempts: int | None = None
    ) -> bool:
        """The activity failed. True when the step runs again (at the budget, or escalated)."""
        self._state.paused_calls.pop(step.id, None)
        if isinstance(exc.cause, TemporalCancelledError):
            # The run was cancelled while the activity ran: that is not the step's failure.
            raise asyncio.CancelledError() from exc
        calls, tool_calls = cause_detail(exc, "calls", CallUsage), cause_detail(exc, "tool_calls", ToolCallRecord)
        self._budgets.record_step_work(step, calls, tool_calls)
        error = cause_error(exc)
        if error is BudgetReachedError:
            return self._stopped_at_budget(step, record, revision, cause_message(exc))
        if self._escalated(step, cause_message(exc)):
            return True  # it runs again, on the stronger model
        if attempts is None:
            attempts = cause_attempts(exc, max_attempts(step, self._state.options))
        trigger = TRIGGERS.get(error, "step_failed") if error is not None else "step_failed"
        self._steps.failed(record, cause_message(exc), attempts=attempts, trigger=trigger)
        return False

    def _stopped_at_budget(self, step: Step, record: StepRecord, revision: int, message: str) -> bool:
        """Not the step's failure: it runs again with what is left once the steps beside it are
        done, or waits, pending, for a person to raise the budget."""
        self._budgets.rerun(step.id)
        record.status = StepStatus.pending
        self._state.ledger.record(
            EventKind.budget_exhausted, workflow.now(), revision=revision, step_id=step.id, message=message
        )
        return True

    def _escalated(self, step: Step, error: str) -> bool:
        """An llm step that failed on a model with a stronger one configured (`escalate:`) runs once
        more on that one, before the run replans. True when it does."""
        state = self._state
        if step.kind is not StepKind.llm or step.id in state.escalated or not state.options.escalate:
            return False
        model = state.options.model_for(step)
        stronger = state.options.escalate.get(model or "")
        if not stronger or self._control.stopping:
            return False
        state.escalated[step.id] = stronger
        record = state.ledger.steps[step.id]
        record.status = StepStatus.pending
        state.ledger.record(
            EventKind.step_escalated,
            workflow.now(),
            revision=state.plan.revision if state.plan else None,
            step_id=step.id,
            message=f"failed on {model} ({error[:300]}); running again on {stronger}",
            data=StepEscalated(model=stronger),
        )
        return True

    def _succeeded(
        self, step: Step, record: StepRecord, revision: int, result: activity_io.StepOutput, paused: PausedCall | None
    ) -> bool:
        """The activity finished: the step succeeded, or (True) it paused on a call a person decides."""
        state = self._state
        self._budgets.record_step_work(step, result.calls, result.tool_calls)
        self._steps.negotiated(result.negotiated)
        self._steps.failovers(result.failovers, step.id)
        record.attempts += result.attempt
        if result.awaiting is not None:
            return self._paused(step, result, paused)
        state.paused_calls.pop(step.id, None)
        record.output = result.output
        record.transcript = result.transcript
        if result.reconciled:
            message = (
                f"its reconcile check found the effect of an attempt of unknown outcome; {step.tool} did not run again"
            )
            state.ledger.record(
                EventKind.step_reconciled, workflow.now(), revision=revision, step_id=step.id, message=message
            )
        self._steps.close(record, StepStatus.succeeded, None)
        state.ledger.record(
            EventKind.step_succeeded,
            workflow.now(),
            revision=revision,
            step_id=step.id,
            data=StepSucceeded(attempt=result.attempt, model=result.model),
        )
        return False

    def _paused(self, step: Step, result: activity_io.StepOutput, paused: PausedCall | None) -> bool:
        """The executor paused on a tool call that needs a person; nothing ran. The step goes on
        once the call is decided (run again: it waits outside a parallel slot)."""
        state = self._state
        assert result.awaiting is not None and result.resume is not None, "a paused executor hands over its progress"
        earlier = paused.decisions if paused is not None else {}
        state.paused_calls[step.id] = PausedCall(call=result.awaiting, resume=result.resume, decisions=earlier)
        decisions.request_call_approval(state, step.id, result.awaiting, workflow.now())
        if state.options.auto_approve:
            call = result.awaiting.call_id
            auto = ApproveInput(by="auto_approve", step_id=step.id, call_id=call, comment="auto_approve")
            decisions.decide_call(state, auto, via="auto", now=workflow.now())
        return True


def _stored_references(referenced: frozenset[str], outputs: Mapping[str, Any]) -> dict[str, Any] | None:
    """The outputs a step refers to, if any of them is in the store; else None."""
    if not any(is_stored(outputs.get(sid)) for sid in referenced):
        return None
    return {sid: outputs[sid] for sid in referenced if sid in outputs}
