"""Waits: a step waiting on a person. A gated step waits for its approval, an llm step paused on
a tool call for that call's decision, a human step for its answer (and, while the budget is used
up, for a person to raise it). A parked step holds no work, so a continue-as-new need not wait
for it: the state carries the wait. Workflow code: deterministic, no I/O.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.exceptions import CancelledError as TemporalCancelledError

with workflow.unsafe.imports_passed_through():
    from stratagem.common.errors import ReferenceResolutionError
    from stratagem.domain import decisions, risk
    from stratagem.domain.decisions import standing as standing_rules
    from stratagem.domain.decisions.escalation import ACTOR
    from stratagem.domain.ledger import EventKind, StepStatus
    from stratagem.domain.plan import Step
    from stratagem.domain.references import resolve_step
    from stratagem.domain.run_levels import Change
    from stratagem.domain.run_types import (
        ApproveInput,
        DecisionKind,
        EscalationTimeoutAction,
        PausedCall,
        RejectInput,
        RunState,
    )
    from stratagem.domain.step_preview import StepPreview, preview
    from stratagem.domain.stored import describe, is_stored

from .budgets import Budgets
from .control import RunControl
from .core import has
from .escalation import Escalation
from .progress import Progress
from .steps import Steps


class Waits:
    def __init__(
        self,
        state: RunState,
        control: RunControl,
        progress: Progress,
        steps: Steps,
        budgets: Budgets,
        escalation: Escalation,
    ) -> None:
        self._state = state
        self._control = control
        self._progress = progress
        self._steps = steps
        self._budgets = budgets
        self._escalation = escalation
        self._parked: set[str] = set()

    def hold_only(self, step_ids: Iterable[str]) -> bool:
        """Whether every one of `step_ids` waits on a person (so none holds work)."""
        return set(step_ids) <= self._parked

    async def park(
        self,
        step_id: str,
        until: Callable[[], bool],
        timeout: timedelta | None = None,
        escalates: DecisionKind | None = None,
    ) -> str | None:
        """Wait on a person. A parked step holds no work, so a continue-as-new need not wait for it.
        What `escalates` (level 9) goes to the escalation group at its deadline; returns why the run
        gave up on it if the escalation's own deadline passed too, having done what it says
        (`on_escalation_timeout`): a gated step rejected or the run stopping (a question is the caller's)."""
        self._parked.add(step_id)
        self._progress.show()
        try:
            expired = await self._escalation.wait(
                escalates, step_id, until, timeout, summary=f"waiting on a person for {step_id}"
            )
        finally:
            self._parked.discard(step_id)
        if expired is None:
            return None
        action, reason = expired
        if action is EscalationTimeoutAction.stop:
            self._control.halt(reason)
        elif escalates is DecisionKind.step_approval:
            self._control.decide_step(RejectInput(by=ACTOR, step_id=step_id, reason=reason), via="escalation")
        return reason

    # ------------------------------------------------------------------ approvals before a step runs

    async def cleared(self, step: Step, paused: PausedCall | None) -> bool:
        """Whether the step may go on: its paused call decided, or its own approval given."""
        if paused is not None:
            return await self._call_decided(step, paused)
        return not self._gated(step) or await self._step_gate(step)

    def _gated(self, step: Step) -> bool:
        """Whether a step waits for its own approval: what the plan says, raised by its tool's own
        declaration (runs from before level 4 only behind a patch: a catalogue that a newer tools
        worker described with a floor must not gate a step their history shows dispatched)."""
        if step.needs_step_approval:
            return True
        return risk.needs_approval(step, self._state.catalog) and has(self._state, Change.TOOL_RISK_FLOOR)

    async def _step_gate(self, step: Step) -> bool:
        """Wait for a person to approve a gated step. False if it was rejected or the run is stopping."""
        state, control = self._state, self._control
        assert state.plan is not None
        if step.id not in state.step_approvals:
            shown = None
            if has(state, Change.RESOLVED_GATES):
                shown = self._preview(step)
                if shown is None:
                    return False  # a reference names nothing: the step failed, nothing was asked
            # A run of a process approved by a standing approval (level 9 runs only: none before
            # had one) takes that grant's approval of the gated steps it names, bound to what they
            # will run, as a person's is.
            granted = standing_rules.step_decision(state, step)
            if state.options.auto_approve:
                auto = ApproveInput(by="auto_approve", step_id=step.id, comment="auto_approve")
                if shown is not None:
                    state.approved_digests[step.id] = shown.digest
                control.decide_step(auto, via="auto")
            elif granted is not None:
                if shown is not None:
                    state.approved_digests[step.id] = shown.digest
                control.decide_step(granted, via=standing_rules.VIA)
            else:
                decisions.request_step_approval(state, step, workflow.now(), shown)
                await self.park(
                    step.id,
                    lambda: step.id in state.step_approvals or control.stopping,
                    escalates=DecisionKind.step_approval,
                )
                decisions.remove_pending(state, step.id)
        if state.step_approvals.get(step.id) is False and has(state, Change.REJECTED_STEP_REPAIRS):
            # Sent back, not the run: recorded failed, for the replan or repair that answers it.
            self._steps.sent_back(state.ledger.steps[step.id], decisions.rejection(state, step.id))
            return False
        return state.step_approvals.get(step.id, False) and not control.stopping

    def _preview(self, step: Step) -> StepPreview | None:
        """What the step will run, from the outputs before it (they are final: its dependencies
        succeeded). None if a reference names nothing: the step failed, as it would at dispatch."""
        try:
            return preview(step, self._state.ledger.outputs())
        except ReferenceResolutionError as exc:
            assert self._state.plan is not None
            record = self._state.ledger.steps[step.id]
            self._steps.started(record, self._state.plan.revision)
            self._steps.failed(record, str(exc), attempts=0)
            return None

    def approved_as_shown(self, step: Step) -> bool:
        """Level 8, at dispatch: whether a gated step runs exactly what its approval was shown. If
        not (a revision kept its approval but an input it reads changed, a repair re-ran one), its
        approval is dropped and it is asked again, with what it would now run."""
        state = self._state
        approved = state.approved_digests.get(step.id)
        if approved is None or not has(state, Change.RESOLVED_GATES) or not self._gated(step):
            return True
        try:
            now = preview(step, state.ledger.outputs()).digest
        except ReferenceResolutionError:
            return True  # the dispatch fails the step on it, and nothing runs
        if now == approved:
            return True
        state.step_approvals.pop(step.id, None)
        state.approved_digests.pop(step.id, None)
        return False

    async def _call_decided(self, step: Step, paused: PausedCall) -> bool:
        """An llm step paused on a tool call: wait for a person's decision on it. False if the run
        winds down first or stops meanwhile; the state keeps the pause either way (and the request,
        which a person may still decide), so the step goes on where it paused, with the same call
        positions and keys, unless a revision changes or drops it (Planning._void_pauses)."""
        control = self._control
        if paused.decided:
            return True
        decisions.request_call_approval(self._state, step.id, paused.call, workflow.now())
        await self.park(step.id, lambda: paused.decided or control.stopping or control.winding_down)
        if paused.decided:
            return True
        if control.stopping and not control.winding_down:
            self.hold_pause(step.id)
        return False

    def hold_pause(self, step_id: str) -> None:
        """A paused step the run stopped for: pending again, so a revision may keep, change or drop
        it like any step that has not finished; its pause waits in the state."""
        record = self._state.ledger.steps[step_id]
        record.status, record.started_at = StepStatus.pending, None

    # ------------------------------------------------------------------ human steps

    async def human(self, step: Step) -> None:
        """A human step: its question, once the budget allows (a used-up budget pauses questions
        to people too; runs from before asked anyway), and the wait for its answer."""
        if await self._budget_allows(step):
            await self._ask(step)

    async def _budget_allows(self, step: Step) -> bool:
        control, budgets = self._control, self._budgets
        while (
            (used_up := budgets.used_up())
            and not control.stopping
            and has(self._state, Change.BUDGET_HOLDS_HUMAN_STEPS)
        ):
            budgets.request(used_up)
            epoch = budgets.epoch
            await self.park(step.id, lambda: budgets.epoch != epoch or control.stopping or control.winding_down)
            if control.winding_down:
                return False
        return not control.stopping

    async def _ask(self, step: Step) -> None:
        state, steps = self._state, self._steps
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
                steps.started(record, revision)
                steps.failed(record, str(exc), attempts=0)
                return
            steps.started(record, revision)
            pending = decisions.request_answer(state, step.id, question, workflow.now())
        if step.id not in state.answers and not await self._answered(step, pending.since):
            return
        decisions.remove_pending(state, step.id)
        answer = state.answers.pop(step.id)
        record.attempts += 1
        record.output = answer
        steps.close(record, StepStatus.succeeded, None)
        state.ledger.record(EventKind.step_succeeded, workflow.now(), revision=revision, step_id=step.id)

    async def _answered(self, step: Step, asked: datetime) -> bool:
        """Wait for the answer. False if none came: the step failed at its deadline, or the run
        stops (the step is pending again, asked again if a revision keeps it)."""
        state, control = self._state, self._control
        record = state.ledger.steps[step.id]
        # The deadline counts from when the question was asked, across continue-as-new.
        remaining = None
        if step.timeout_seconds:
            deadline = asked + timedelta(seconds=step.timeout_seconds)
            remaining = max(deadline - workflow.now(), timedelta(milliseconds=1))
        try:
            expired = await self.park(
                step.id,
                lambda: step.id in state.answers or control.stopping,
                remaining,
                escalates=DecisionKind.human_answer,
            )
        except TimeoutError:
            decisions.remove_pending(state, step.id)
            self._steps.failed(record, f"no answer within {step.timeout_seconds:g} seconds", attempts=1)
            return False
        except (asyncio.CancelledError, TemporalCancelledError):
            decisions.remove_pending(state, step.id)
            self._steps.close(record, StepStatus.cancelled, "cancelled")
            raise
        finally:
            control.step_returned()
        if expired is not None and not control.stopping:  # rejected: it fails, as a step past its deadline
            decisions.remove_pending(state, step.id)
            self._steps.failed(record, expired, attempts=1)
            return False
        if step.id not in state.answers:
            decisions.remove_pending(state, step.id)
            record.status, record.started_at = StepStatus.pending, None
            return False
        return True
