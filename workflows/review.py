"""The review gate: a revision runs once it is approved, by a person, by auto_approve, or by
policy (a replan when replan_requires_approval is off, unless it loosens what was approved). The
rules are `stratagem.domain.decisions`'; this waits for them. Workflow code: deterministic, no I/O.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import SearchAttributeKey
from temporalio.exceptions import ActivityError, is_cancelled_exception

with workflow.unsafe.imports_passed_through():
    from stratagem.domain import decisions, standing
    from stratagem.domain.decisions import standing as standing_rules
    from stratagem.domain.ledger import EventKind
    from stratagem.domain.plan import PlanDraft
    from stratagem.domain.run_levels import Change
    from stratagem.domain.run_types import (
        ApproveInput,
        DecisionKind,
        EscalationTimeoutAction,
        Phase,
        ReviewTimeoutAction,
        RunState,
    )

from .activity_options import STANDING_RETRY, STANDING_TIMEOUT
from .compensation import Compensation
from .core import has
from .escalation import Escalation
from .failures import cause_message
from .observe import Observer
from .progress import Progress
from .steps import Steps

SCHEDULED_BY = SearchAttributeKey.for_keyword("TemporalScheduledById")


class Review:
    def __init__(
        self,
        state: RunState,
        progress: Progress,
        steps: Steps,
        observe: Observer,
        escalation: Escalation,
        compensation: Compensation,
    ) -> None:
        self._state = state
        self._compensation = compensation
        self._progress = progress
        self._steps = steps
        self._observe = observe
        self._escalation = escalation
        # The plan a run of a process renders (set at its start): what a standing approval
        # approves, and the only plan it may (a planner's, or a revision, waits for a person).
        self.rendered: PlanDraft | None = None

    async def review(self) -> None:
        state = self._state
        assert state.plan is not None
        is_replan = state.ledger.replans > 0 and state.plan.revision > 1
        if state.options.auto_approve:
            decision = ApproveInput(by="auto_approve", revision=state.plan.revision, comment="auto_approve")
            decisions.approve_plan(state, decision, via="auto", now=workflow.now())
            return
        changes = decisions.review_changes(state, has(state, Change.PARTIAL_REAPPROVAL))
        if changes is not None and not decisions.covered(changes):
            # Nothing differs from the approved revision (a replan that retries the failed steps as
            # they were): its approval stands.
            return decisions.carry_approval(state, workflow.now())
        note: str | None = None
        if state.process is not None and state.approved_revision is None and not is_replan and not state.pending:
            note = await self._standing()
            if note is None:
                return
        why: list[str] = []
        if is_replan and not state.options.replan_requires_approval and not state.pending:
            why = decisions.loosened(state.approved_plan, state.plan)
            if not why or not has(state, Change.LOOSENED_REPLAN):
                decision = ApproveInput(
                    by="policy", revision=state.plan.revision, comment="replan_requires_approval is off"
                )
                decisions.approve_plan(state, decision, via="policy", now=workflow.now())
                return
            state.ledger.record(
                EventKind.review_escalated,
                workflow.now(),
                revision=state.plan.revision,
                message="needs a person although replan_requires_approval is off: " + "; ".join(why),
            )
        # As runs before it decided (their memo writes replay unchanged).
        if not has(state, Change.PLAN_APPROVAL_BESIDE_OTHERS):
            if not state.pending:
                state.pending = [decisions.plan_approval_request(state, workflow.now(), why, changes)]
        elif decisions.pending_for(state, DecisionKind.plan_approval, None) is None:  # else carried here
            state.pending.insert(0, decisions.plan_approval_request(state, workflow.now(), why, changes))
        asked = decisions.pending_for(state, DecisionKind.plan_approval, None)
        if note and asked is not None:
            asked.standing = note
            asked.prompt += ". A standing approval did not apply: " + note.split(": ", 1)[1].split("; ")[0][:300]
        self._progress.show()
        attributes = {"stratagem.revision": state.plan.revision}
        with self._observe.span(f"review revision {state.plan.revision}", attributes) as span:
            await self._await_review()
            span.set_attribute("stratagem.outcome", state.phase.value)
            span.set_attribute("stratagem.revision.decided", state.plan.revision)
            if state.ledger.decisions:
                span.set_attribute("stratagem.decided_by", state.ledger.decisions[-1].by)

    async def _standing(self) -> str | None:
        """Ask the task queue's registry for a standing approval of this run of a process, before
        anyone is asked. Returns None once it approved the plan; else what the reviewer is told
        about standing approvals that did not apply ("" when there are none)."""
        state = self._state
        assert state.plan is not None and state.process is not None
        draft = self.rendered
        rendered = (
            draft is not None
            and state.plan.revision == 1
            and (state.plan.goal, state.plan.steps)
            == (
                draft.goal,
                draft.steps,
            )
        )
        # Which schedule started the run is read where Temporal writes it on a Schedule's runs
        # (TemporalScheduledById), not from the run's input: a run started by hand that names a
        # schedule in its input is no run of that schedule to a grant limited to it. (A client
        # may set that attribute too: the limit narrows a grant, the bounds and digest bound it.)
        scheduled_by = workflow.info().typed_search_attributes.get(SCHEDULED_BY)
        request = standing.StandingRequest(
            registry=standing.registry_id(workflow.info().task_queue),
            record=state.process.model_copy(update={"schedule": scheduled_by}),
            rendered=rendered,
            now=workflow.now(),
        )
        try:
            found = await workflow.execute_activity(
                standing.FIND_ACTIVITY,
                request,
                result_type=standing.StandingMatch,
                start_to_close_timeout=STANDING_TIMEOUT,
                retry_policy=STANDING_RETRY,
                summary=f"standing approval of {state.process.label}"[:200],
            )
        except ActivityError as exc:
            if is_cancelled_exception(exc):
                raise
            return f"the standing approvals could not be read ({cause_message(exc)[:200]}); a person decides"
        if found.grant is not None:
            refused = standing_rules.plan_refusal(state, found.grant)
            if refused is None:
                standing_rules.approve_by_grant(state, found, workflow.now())
                return None
            found = found.model_copy(update={"grant": None, "why": [refused, *found.why]})
        if not found.exists:
            return ""
        differences = standing.difference(found.approved, state.process, state.plan) if found.approved else []
        return standing.notes(found, differences)

    async def _await_review(self) -> None:
        state = self._state
        assert state.plan is not None
        timeout = state.options.review_timeout_seconds
        while state.phase is Phase.awaiting_approval:
            revision = state.plan.revision
            try:
                # A revise starts a new review (and a new timeout): the reviewer sees a new plan.
                expired = await self._escalation.wait(
                    DecisionKind.plan_approval,
                    None,
                    lambda: (
                        state.phase is not Phase.awaiting_approval
                        or (state.plan is not None and state.plan.revision != revision)
                    ),
                    timedelta(seconds=timeout) if timeout else None,
                    "review timeout",
                )
                if expired is not None:  # escalated, and undecided past its own deadline
                    action, reason = expired
                    if action is EscalationTimeoutAction.stop:
                        return self._steps.fail_run(reason)
                    if self._compensation.wanted():  # a revision rejected after effects ran: undone (level 10)
                        return self._compensation.begin(reason, self._rejected)
                    return self._rejected(reason)
            except TimeoutError:
                undo = state.options.on_review_timeout is ReviewTimeoutAction.compensate
                if undo and timeout and has(state, Change.COMPENSATION):
                    self._timed_out(revision, timeout)
                    why = f"no decision on revision {revision} within {timeout:g} seconds"
                    if self._compensation.active:  # the compensation's own review: it ends, effects remain
                        return self._steps.fail_run(why)
                    return self._compensation.begin(why, self._steps.fail_run)
                if state.options.on_review_timeout is ReviewTimeoutAction.fail:
                    state.ledger.record(
                        EventKind.review_timed_out,
                        workflow.now(),
                        revision=revision,
                        message=f"no decision within {timeout:g} s",
                    )
                    self._steps.fail_run(f"no decision on revision {revision} within {timeout:g} seconds")
                    return
                for pending in state.pending:
                    pending.escalated = True
                state.ledger.record(
                    EventKind.review_escalated,
                    workflow.now(),
                    revision=revision,
                    message=f"no decision within {timeout:g} s; escalated, still waiting",
                )
                timeout = None

    def _timed_out(self, revision: int, timeout: float) -> None:
        self._state.ledger.record(
            EventKind.review_timed_out, workflow.now(), revision=revision, message=f"no decision within {timeout:g} s"
        )

    def _rejected(self, reason: str) -> None:
        self._steps.reject_run(reason, "plan rejected")
