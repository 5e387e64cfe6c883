"""Model usage and the run's budgets: recording what model calls cost, noticing a budget used
up (or too small for one more call), asking a person to raise it, and sharing what is left
between llm steps that run at once. The rules are in `stratagem.domain.usage`; this is the workflow's
side of them. Workflow code: deterministic, no I/O.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from stratagem.domain import decisions, transitions
    from stratagem.domain.ledger import EventKind, ToolCallRecord
    from stratagem.domain.plan import Step, StepKind
    from stratagem.domain.run_levels import Change
    from stratagem.domain.run_types import Phase, RunState
    from stratagem.domain.usage import Allowance, CallUsage, UsageTotals, allowance, exhausted, share_of

from .control import RunControl
from .core import has
from .observe import Observer
from .progress import Progress
from .steps import Steps


class Budgets:
    def __init__(
        self, state: RunState, control: RunControl, progress: Progress, steps: Steps, observe: Observer
    ) -> None:
        self._state = state
        self._control = control
        self._progress = progress
        self._steps = steps
        self._observe = observe
        # Bumped whenever usage, a budget or the steps in flight change: what budget waits wake on.
        self._epoch = 0
        self._model_steps_in_flight = 0
        self._model_steps_waiting = 0
        # Model budget reserved by llm steps in flight (their allowances), and steps that used
        # their share and run again once the others are done.
        self._reserved: dict[str, Allowance] = {}
        self._reruns: set[str] = set()

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def model_steps_in_flight(self) -> int:
        return self._model_steps_in_flight

    def changed(self) -> None:
        """A budget changed (a person raised it): wake what waits on it."""
        self._epoch += 1

    def is_rerun(self, step_id: str) -> bool:
        return step_id in self._reruns

    def rerun(self, step_id: str) -> None:
        """The step stopped at its share of the budget: it runs again with what is left once the
        steps beside it are done."""
        self._reruns.add(step_id)

    def waiting(self, uses_model: int) -> None:
        self._model_steps_waiting += uses_model

    def done_waiting(self, uses_model: int) -> None:
        self._model_steps_waiting -= uses_model

    def step_out(self, uses_model: int) -> None:
        self._model_steps_in_flight += uses_model

    def step_back(self, step_id: str, uses_model: int) -> None:
        """A step's activity is over: its reservation is free again, and budget waits look again."""
        self._model_steps_in_flight -= uses_model
        self._reserved.pop(step_id, None)
        self._epoch += 1

    def record_calls(self, calls: list[CallUsage], purpose: str, step_id: str | None = None) -> UsageTotals:
        state = self._state
        totals = transitions.record_calls(state, calls, purpose, workflow.now(), step_id)
        self._epoch += 1
        self._observe.calls(state.ledger.calls[-totals.calls :] if totals.calls else [])
        return totals

    def record_step_work(self, step: Step, calls: list[CallUsage], tool_calls: list[ToolCallRecord]) -> None:
        """Keep what an llm step's executor did, whether the step succeeded or not."""
        if step.kind is not StepKind.llm:
            return
        totals = self.record_calls(calls, "execute", step.id)
        if totals.calls:
            self._state.ledger.note_step_usage(totals)
        transitions.record_tool_calls(self._state, step.id, tool_calls, workflow.now())

    def used_up(self) -> list[str]:
        state = self._state
        if not state.options.budget.is_set:
            return []
        now = workflow.now()
        started = state.started_at or now
        elapsed = (now - started).total_seconds()
        return exhausted(state.options.budget, state.ledger.usage, elapsed)

    def request(self, used_up: list[str]) -> None:
        """Ask a person to raise the budget or stop the run (once, however many steps wait)."""
        if not decisions.request_budget(self._state, used_up, workflow.now()):
            return
        self._progress.show()

    async def gate(self) -> bool:
        """Before a planner or synthesis call: wait while the budget is used up. False if a
        person stopped the run meanwhile (it has then ended)."""
        control = self._control
        while used_up := self.used_up():
            self.request(used_up)
            epoch = self._epoch
            await workflow.wait_condition(lambda: self._epoch != epoch or control.rejection is not None)
            if control.rejection is not None:
                self._steps.end(Phase.rejected, control.rejection, EventKind.run_rejected)
                return False
        return True

    def _left(self) -> Allowance | None:
        """What is left of the model budgets, with the largest call so far as the next call's estimate."""
        left = allowance(self._state.options.budget, self._state.ledger.usage)
        if left is not None:
            calls = self._state.ledger.calls
            left.call_tokens = max((c.input_tokens + c.output_tokens for c in calls), default=0)
            left.call_cost_usd = max((c.cost_usd or 0.0 for c in calls), default=0.0)
        return left

    def short(self) -> list[str]:
        """With no model step out: the budgets too small for one more call the size of the largest
        so far. A step started now would stop before its first call, so a person is asked."""
        left = None if self._model_steps_in_flight else self._left()
        if left is None:
            return []
        short = []
        if left.tokens is not None and 0 < left.tokens < left.call_tokens:
            short.append(
                f"the token budget has {left.tokens:,} left, less than one model call takes ({left.call_tokens:,})"
            )
        if left.cost_usd is not None and 0 < left.cost_usd < left.call_cost_usd:
            short.append(
                f"the cost budget has ${left.cost_usd:,.4f} left, less than one model call costs (${left.call_cost_usd:,.4f})"
            )
        if short and has(self._state, Change.BUDGET_SHORT_OF_A_CALL):
            return short
        return []

    def allowance(self, step: Step) -> Allowance | None:
        """What of the model budgets this llm step may use, reserved until it ends.

        Steps in flight keep their reservations, so steps started together cannot each count on
        the same remainder. A step alone takes all that is free; beside others it takes half,
        leaving room for the next. One that used its share waits for the others, then runs
        again with everything that is left (or the run asks a person for more).
        """
        left = self._left()
        if left is None:
            return None
        alone = self._model_steps_in_flight <= 1 and self._model_steps_waiting == 0
        fraction = 1.0 if alone or step.id in self._reruns else 0.5
        self._reruns.discard(step.id)
        share = share_of(left, self._reserved.values(), fraction)
        self._reserved[step.id] = share
        return share
