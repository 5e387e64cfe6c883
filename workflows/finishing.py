"""Finishing: the final check, in which a verifier model judges whether the goal was reached
(options.final_check), and the synthesis of the final steps' outputs into one answer
(options.synthesizer). Workflow code: deterministic, no I/O.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, is_cancelled_exception

with workflow.unsafe.imports_passed_through():
    from stratagem.domain import activity_io
    from stratagem.domain.ledger import EventKind
    from stratagem.domain.ledger_events import GoalChecked
    from stratagem.domain.roles import Role
    from stratagem.domain.run_types import RunState
    from stratagem.domain.scheduling import sink_steps
    from stratagem.domain.usage import CallUsage, price_for

from .activity_options import PLANNING_RETRY, PLANNING_TIMEOUT
from .budgets import Budgets
from .core import queue
from .failures import cause_detail, cause_message
from .observe import Observer
from .steps import Steps


class Finishing:
    def __init__(self, state: RunState, steps: Steps, budgets: Budgets, observe: Observer) -> None:
        self._state = state
        self._steps = steps
        self._budgets = budgets
        self._observe = observe

    async def goal_reached(self) -> bool:
        """The final check (options.final_check): a verifier model judges the final steps' outputs
        against the goal. False when it found the goal not reached: `state.failure` says why, and
        the run replans. A check that cannot be made (its model fails) leaves the run a success,
        with the reason in the ledger: the steps did succeed."""
        state = self._state
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
                    task_queue=queue(Role.planner),
                    result_type=activity_io.GoalCheckOutput,
                    start_to_close_timeout=PLANNING_TIMEOUT,
                    retry_policy=PLANNING_RETRY,
                    summary="final check",
                )
        except ActivityError as exc:
            if is_cancelled_exception(exc):
                raise
            self._budgets.record_calls(cause_detail(exc, "calls", CallUsage), "verify")
            state.ledger.record(
                EventKind.goal_checked,
                workflow.now(),
                revision=state.plan.revision,
                message=f"the final check could not be made: {cause_message(exc)}",
                data=GoalChecked(met=None),
            )
            return True
        self._budgets.record_calls(out.calls, "verify")
        self._steps.negotiated(out.negotiated)
        self._steps.failovers(out.failovers)
        state.ledger.record(
            EventKind.goal_checked,
            workflow.now(),
            revision=state.plan.revision,
            message=out.reason,
            data=GoalChecked(met=out.met),
        )
        if out.met:
            return True
        state.failure = f"the final check found the goal not reached: {out.reason}"
        return False

    async def synthesis(self, outputs: dict[str, Any]) -> str | None:
        """The final answer from the final steps' outputs, when a synthesizer is configured and the
        budget allows. A synthesis that fails fails the run: `state.phase` then says so."""
        state = self._state
        if not (state.options.synthesizer and await self._budgets.gate()):
            return None
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
                    task_queue=queue(Role.planner),
                    result_type=activity_io.SynthesisOutput,
                    start_to_close_timeout=PLANNING_TIMEOUT,
                    retry_policy=PLANNING_RETRY,
                    summary="synthesis",
                )
        except ActivityError as exc:
            if is_cancelled_exception(exc):
                raise
            self._steps.fail_run(f"every step succeeded, but the final synthesis failed: {cause_message(exc)}")
            return None
        self._budgets.record_calls(out.calls, "synthesize")
        self._steps.failovers(out.failovers)
        return out.text
