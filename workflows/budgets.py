"""Model usage and the run's budgets: recording what model calls cost, noticing a budget used
up (or too small for one more call), asking a person to raise it, and sharing what is left
between llm steps that run at once. The rules are in `stratagem.usage`; this is the workflow's
side of them. Workflow code: deterministic, no I/O.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from stratagem import decisions, transitions
    from stratagem.ledger import EventKind, ToolCallRecord
    from stratagem.plan import Step, StepKind
    from stratagem.run_types import Phase
    from stratagem.usage import Allowance, CallUsage, UsageTotals, allowance, exhausted, share_of

from .core import RunCore

# A model budget too small for one more call asks a person before a step starts, not after.
BUDGET_SHORT_PATCH = "budget-short-of-a-call"


class Budgets(RunCore):
    def _record_calls(self, calls: list[CallUsage], purpose: str, step_id: str | None = None) -> UsageTotals:
        totals = transitions.record_calls(self.state, calls, purpose, self._now(), step_id)
        self._budget_epoch += 1
        self._observe.calls(self.state.ledger.calls[-totals.calls :] if totals.calls else [])
        return totals

    def _record_step_work(self, step: Step, calls: list[CallUsage], tool_calls: list[ToolCallRecord]) -> None:
        """Keep what an llm step's executor did, whether the step succeeded or not."""
        if step.kind is not StepKind.llm:
            return
        totals = self._record_calls(calls, "execute", step.id)
        if totals.calls:
            self.state.ledger.note_step_usage(totals)
        transitions.record_tool_calls(self.state, step.id, tool_calls, self._now())

    def _budget_used_up(self) -> list[str]:
        state = self.state
        if not state.options.budget.is_set:
            return []
        started = state.started_at or self._now()
        elapsed = (self._now() - started).total_seconds()
        return exhausted(state.options.budget, state.ledger.usage, elapsed)

    def _request_budget(self, used_up: list[str]) -> None:
        """Ask a person to raise the budget or stop the run (once, however many steps wait)."""
        if not decisions.request_budget(self.state, used_up, self._now()):
            return
        self._show()

    async def _budget_gate(self) -> bool:
        """Before a planner or synthesis call: wait while the budget is used up. False if a
        person stopped the run meanwhile (it has then ended)."""
        while used_up := self._budget_used_up():
            self._request_budget(used_up)
            epoch = self._budget_epoch
            await workflow.wait_condition(lambda: self._budget_epoch != epoch or self._rejection is not None)
            if self._rejection is not None:
                self._end(Phase.rejected, self._rejection, EventKind.run_rejected)
                return False
        return True

    def _budget_left(self) -> Allowance | None:
        """What is left of the model budgets, with the largest call so far as the next call's estimate."""
        left = allowance(self.state.options.budget, self.state.ledger.usage)
        if left is not None:
            calls = self.state.ledger.calls
            left.call_tokens = max((c.input_tokens + c.output_tokens for c in calls), default=0)
            left.call_cost_usd = max((c.cost_usd or 0.0 for c in calls), default=0.0)
        return left

    def _budget_short(self) -> list[str]:
        """With no model step out: the budgets too small for one more call the size of the largest
        so far. A step started now would stop before its first call, so a person is asked."""
        left = None if self._model_steps_in_flight else self._budget_left()
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
        if short and self._patched(BUDGET_SHORT_PATCH):
            return short
        return []

    def _allowance(self, step: Step) -> Allowance | None:
        """What of the model budgets this llm step may use, reserved until it ends.

        Steps in flight keep their reservations, so steps started together cannot each count on
        the same remainder. A step alone takes all that is free; beside others it takes half,
        leaving room for the next. One that used its share waits for the others, then runs
        again with everything that is left (or the run asks a person for more).
        """
        left = self._budget_left()
        if left is None:
            return None
        alone = self._model_steps_in_flight <= 1 and self._model_steps_waiting == 0
        fraction = 1.0 if alone or step.id in self._budget_reruns else 0.5
        self._budget_reruns.discard(step.id)
        share = share_of(left, self._reserved.values(), fraction)
        self._reserved[step.id] = share
        return share
