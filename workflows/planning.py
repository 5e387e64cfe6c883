"""Planning: the tools a run may use, asking the planner for a revision, replanning after a
failure, and adopting a revision (the supplied plan, the planner's, a reviewer's edit, or joint
mode's single step) with the ledger brought in line. Whether a plan is valid is decided by `stratagem.domain.validation` and how
a revision carries the work already done by `stratagem.domain.scheduling.reconcile`. Workflow code:
deterministic, no I/O.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, is_cancelled_exception

with workflow.unsafe.imports_passed_through():
    from opentelemetry import trace

    from stratagem.domain import activity_io, decisions, repairs
    from stratagem.domain.catalog import ToolCatalog
    from stratagem.domain.ledger import EventKind, StepStatus
    from stratagem.domain.ledger_events import (
        GoalChecked,
        PlanningAttemptInvalid,
        PlanProposed,
        ReplanRequested,
        StepCarried,
        StepFailed,
    )
    from stratagem.domain.plan import Author, AuthorKind, Plan, PlanDraft, Step, StepKind
    from stratagem.domain.process import planning_goal
    from stratagem.domain.roles import Role
    from stratagem.domain.run_levels import Change
    from stratagem.domain.run_types import JOINT_STEP_ID, DecisionKind, Fork, Mode, Phase, RunState
    from stratagem.domain.scheduling import Reconciliation, reconcile
    from stratagem.domain.usage import CallUsage, price_for
    from stratagem.domain.validation import plan_problems

from .activity_options import (
    CATALOG_RETRY,
    CATALOG_TIMEOUT,
    FORK_RETRY,
    FORK_TIMEOUT,
    LOCAL_CATALOG_RETRY,
    LOCAL_CATALOG_TIMEOUT,
    PLANNING_RETRY,
    PLANNING_TIMEOUT,
)
from .budgets import Budgets
from .compensation import Compensation
from .core import has, queue
from .failures import cause_detail, cause_message
from .observe import Observer, mark
from .steps import Steps


class Planning:
    def __init__(
        self, state: RunState, steps: Steps, budgets: Budgets, observe: Observer, compensation: Compensation
    ) -> None:
        self._state = state
        self._compensation = compensation
        self._steps = steps
        self._budgets = budgets
        self._observe = observe
        # The span of the planner call under way, which the revision it adopts describes.
        self._plan_span: trace.Span | None = None

    async def catalog(self) -> ToolCatalog:
        """The tools the run may use, from the worker's configuration. From level 3, the worker
        running this task answers in a local activity when it serves the tools role too (no
        round trip: the concurrency bench's runs went from 0.79x to 0.88x of bare workflows). A
        workflow-only worker, or a command line hosting the workflow for a moment, answers
        None, and the tools role answers in an activity, as at lower levels."""
        if has(self._state, Change.CATALOG_HERE):
            here = await workflow.execute_local_activity(
                activity_io.DESCRIBE_TOOLS_HERE,
                result_type=ToolCatalog | None,  # type: ignore[arg-type]  # the converter takes a union; the hint says type
                start_to_close_timeout=LOCAL_CATALOG_TIMEOUT,
                retry_policy=LOCAL_CATALOG_RETRY,
                summary="describe tools",
            )
            if here is not None:
                return here
        return await workflow.execute_activity(
            activity_io.DESCRIBE_TOOLS,
            task_queue=queue(Role.tools),
            result_type=ToolCatalog,
            start_to_close_timeout=CATALOG_TIMEOUT,
            retry_policy=CATALOG_RETRY,
            summary="describe tools",
        )

    async def call_planner(self, current: Plan | None) -> Plan | None:
        """Ask the planner for the next revision, within a `plan revision N` span (its model calls
        are the span's grandchildren, under the activity attempt)."""
        if not await self._budgets.gate():
            return None
        revision = self._state.plan.revision + 1 if self._state.plan else 1
        planner = self._state.options.planner or ""
        with self._observe.span(
            f"plan revision {revision}", {"stratagem.revision": revision, "stratagem.model": planner}
        ) as span:
            self._plan_span = span
            plan = await self._ask_planner(current)
            self._plan_span = None
            if plan is None:
                mark(span, self._state.reason or "planning failed")
            return plan

    async def replan(self) -> None:
        """Answer a failure with a new revision from the planner, within a `replan N` span linked
        to the failed step's; when no replan can answer it, a person repairs it or the run fails."""
        state = self._state
        assert state.plan is not None
        failure = state.failure or "a step failed"
        if self._compensation.active:
            # An undo that failed for good: no planner rewrites a compensation, a person repairs it.
            return repairs.request_repair(state, failure, workflow.now())
        if state.ledger.replans >= state.options.max_replans:
            state.ledger.record(
                EventKind.replan_cap_reached,
                workflow.now(),
                revision=state.plan.revision,
                message=f"{state.ledger.replans} of {state.options.max_replans} replans used",
            )
            return self.cannot_replan(f"{failure}; the replan limit ({state.options.max_replans}) is reached")
        if state.options.mode is Mode.joint:
            return self.cannot_replan(f"{failure}; a joint run does not replan")
        if not state.options.planner:
            return self.cannot_replan(f"{failure}; no planner model is configured to revise the plan")
        state.ledger.replans += 1
        state.ledger.record(
            EventKind.replan_requested,
            workflow.now(),
            revision=state.plan.revision,
            message=failure,
            data=ReplanRequested(replan=state.ledger.replans, trigger=self._trigger()),
        )
        self._observe.replanned()
        failed = self._steps.take_failure_span()
        links = [trace.Link(failed.get_span_context(), {"stratagem.failure": failure[:200]})] if failed else []
        attributes = {"stratagem.replan": state.ledger.replans, "stratagem.failure": failure[:500]}
        with self._observe.span(f"replan {state.ledger.replans}", attributes, links=links):
            if await self.call_planner(current=state.plan) is not None:
                state.phase = Phase.awaiting_approval

    def _trigger(self) -> str:
        """What the replan answers: the last failure's kind (step_failed, criteria_unmet, or
        goal_unmet when the final check found the goal not reached)."""
        for event in reversed(self._state.ledger.events):
            if event.kind is EventKind.step_failed:
                return event.details_as(StepFailed).trigger
            if event.kind is EventKind.goal_checked and event.details_as(GoalChecked).met is False:
                return "goal_unmet"
        return "step_failed"

    async def _ask_planner(self, current: Plan | None) -> Plan | None:
        options = self._state.options
        assert options.planner is not None
        request = activity_io.PlanningInput(
            goal=planning_goal(self._state.goal, self._state.process),
            model=options.planner,
            catalog=self._state.catalog,
            first_call_index=self._state.planner_calls,
            max_repairs=options.max_plan_repairs,
            current=current.draft() if current else None,
            records={sid: self._state.ledger.steps[sid] for sid in current.step_ids} if current else {},
            failure=self._state.failure,
            history=self._history() if current else [],
            has_executor=bool(options.executor),
            tiers=sorted(options.tiers),
            approvers=options.approvers,
            groups=options.approver_groups,
            price=price_for(options.planner, options.prices),
            capabilities=options.capabilities_of(options.planner).get(options.planner),
            fallbacks=options.fallbacks.get(options.planner, []),
        )
        try:
            out = await workflow.execute_activity(
                activity_io.PLAN,
                request,
                task_queue=queue(Role.planner),
                result_type=activity_io.PlanningOutput,
                start_to_close_timeout=PLANNING_TIMEOUT,
                retry_policy=PLANNING_RETRY,
                summary="revise plan" if current else "plan",
            )
        except ActivityError as exc:
            if is_cancelled_exception(exc):
                raise
            self._budgets.record_calls(cause_detail(exc, "calls", CallUsage), "plan")
            self._planning_failed(current, f"planning failed: {cause_message(exc)}")
            return None
        self._budgets.record_calls(out.call_usage, "plan")
        self._steps.negotiated(out.negotiated)
        self._steps.failovers(out.failovers)
        self._state.planner_calls += out.calls
        for number, problems in enumerate(out.rejected_attempts, start=1):
            self._state.ledger.record(
                EventKind.planning_attempt_invalid,
                workflow.now(),
                actor=out.model,
                message=f"planner attempt {number} was invalid and sent back for repair",
                data=PlanningAttemptInvalid(problems=problems),
            )
        # The activity validated the draft against the same catalogue; checking again here
        # keeps "no invalid plan reaches execution" true even for a misbehaving worker.
        merged = reconcile(current, out.draft, self._state.ledger.steps)
        problems = merged.problems or self.problems(merged.draft)
        if problems:
            self._planning_failed(current, "the planner's plan is invalid: " + "; ".join(problems))
            return None
        reason = out.draft.reason or ("revised after: " + (self._state.failure or "") if current else "initial plan")
        return self.adopt(merged, Author(kind=AuthorKind.model, name=out.model), reason)

    def cannot_replan(self, why: str) -> None:
        """No replan can answer a failure: a person repairs it (level 4, unless the options say to
        fail, as they do by default for auto_approve runs), the run undoes its effects (level 10,
        on_failure: compensate), or the run fails (from level 9, a step a person rejected ends it
        rejected)."""
        if self._state.options.repairs and has(self._state, Change.REPAIRS):
            repairs.request_repair(self._state, why, workflow.now())
        elif self._compensation.wanted():
            self._compensation.begin(why, self._give_up)
        else:
            self._give_up(why)

    def _give_up(self, why: str) -> None:
        """The run ends without its goal, and without compensating."""
        if has(self._state, Change.REJECTED_STEP_REPAIRS) and self._trigger() == "step_rejected":
            # A person's no that no replan can answer, in a run that waits for nobody: it ends
            # rejected, as a rejected step's run always did before level 9.
            self._steps.reject_run(why)
        else:
            self._steps.fail_run(why)

    def _planning_failed(self, current: Plan | None, why: str) -> None:
        """The planner failed: a first plan cannot be repaired (there is nothing to retry), a replan can."""
        if current is None:
            self._steps.fail_run(why)
        else:
            self.cannot_replan(f"{self._state.failure or 'a step failed'}; then {why}")

    def _history(self) -> list[str]:
        """What the replanner should know beyond the current plan: earlier revisions, decisions
        and failures, oldest first, so it does not repeat what people already turned down."""
        ledger = self._state.ledger
        lines = [f"revision {p.revision} by {p.author}: {p.reason}" for p in ledger.revisions]
        for decision in ledger.decisions:
            comment = f": {decision.comment}" if decision.comment else ""
            target = f" step {decision.step_id} of" if decision.step_id else ""
            lines.append(f"{decision.by} {decision.action.value}d{target} revision {decision.revision}{comment}")
        lines.extend(
            f"step {e.step_id} failed under revision {e.revision}: {e.message}"
            for e in ledger.events
            if e.kind is EventKind.step_failed
        )
        return lines

    def problems(self, draft: PlanDraft) -> list[str]:
        # Runs from before the credential rule replay as they were decided.
        credentials = has(self._state, Change.NO_LITERAL_CREDENTIALS)
        rules = self._state.options.plan_rules()
        return plan_problems(
            draft,
            self._state.catalog,
            **rules,
            credentials=credentials,
            human_fields=has(self._state, Change.HUMAN_STEP_FIELDS),
        )

    def adopt(self, merged: Reconciliation, author: Author, reason: str) -> Plan:
        """Make a reconciled draft the next revision and bring the ledger in line with it."""
        state, ledger, now = self._state, self._state.ledger, workflow.now()
        revision = (state.plan.revision + 1) if state.plan else 1
        plan = Plan.from_draft(merged.draft, revision=revision, author=author, reason=reason)
        for sid in merged.dropped:
            # A failed step keeps its status and error: that is what the revision learned from.
            if ledger.steps[sid].status is StepStatus.pending:
                self._steps.close(ledger.steps[sid], StepStatus.skipped, f"dropped by revision {revision}")
        for sid in merged.retried:
            record = ledger.steps[sid]
            record.status, record.error, record.output = StepStatus.pending, None, None
        previous = state.plan
        ledger.add_revision(plan)
        self._void_pauses(previous, plan)
        # Steps identical to the revision their approval was given in keep it (partial re-approval).
        kept = has(self._state, Change.PARTIAL_REAPPROVAL) and not state.options.whole_plan_approval
        state.step_approvals = decisions.kept_step_approvals(state, previous, plan, merged.retried) if kept else {}
        state.failure = None
        ledger.record(
            EventKind.plan_proposed,
            now,
            revision=revision,
            actor=str(author),
            message=reason,
            data=PlanProposed(
                steps=len(plan.steps), carried=merged.carried, dropped=merged.dropped, retried=merged.retried
            ),
        )
        attributes: dict[str, Any] = {
            "stratagem.revision": revision,
            "stratagem.author": str(author),
            "stratagem.reason": reason[:200],
            "stratagem.steps": len(plan.steps),
            "stratagem.steps.carried": len(merged.carried),
            "stratagem.steps.dropped": len(merged.dropped),
            "stratagem.steps.retried": len(merged.retried),
        }
        if self._plan_span is not None:
            self._plan_span.set_attributes(attributes)
        else:  # a person's plan (supplied or revised), or joint mode's: no planner call to span
            self._observe.start(f"plan revision {revision}", attributes).end()
        return plan

    def _void_pauses(self, before: Plan | None, after: Plan) -> None:
        """A paused llm step that a revision changes or drops starts over (its conversation and the
        calls it waits on belong to the old step); one the revision keeps as it was goes on."""
        state = self._state
        if not state.paused_calls or before is None:
            return
        old = {s.id: s for s in before.steps}
        new = {s.id: s for s in after.steps}
        for sid in list(state.paused_calls):
            if new.get(sid) is None or new[sid] != old.get(sid):
                del state.paused_calls[sid]
                state.pending = [
                    p for p in state.pending if not (p.kind is DecisionKind.tool_call_approval and p.step_id == sid)
                ]

    def adopt_joint_plan(self) -> None:
        """Joint mode: one llm step in which one model thinks and acts. It still waits for
        approval, so a person sees the goal, the model and the tools it may call before it runs."""
        state, options = self._state, self._state.options
        tools = options.joint_tools if options.joint_tools is not None else state.catalog.names
        step = Step(
            id=JOINT_STEP_ID,
            title="Reach the goal in one loop",
            kind=StepKind.llm,
            instructions=state.goal.replace("${", "$${"),
            tools=tools,
        )
        draft = PlanDraft(
            goal=state.goal, steps=[step], reason="joint mode: one model thinks and acts in a single loop"
        )
        problems = self.problems(draft)
        if problems:
            return self._steps.fail_run("the joint run cannot start: " + "; ".join(problems))
        assert options.executor is not None
        self.adopt(Reconciliation(draft=draft), Author(kind=AuthorKind.model, name=options.executor), draft.reason)
        state.phase = Phase.awaiting_approval

    # ------------------------------------------------------------------ forks

    async def fork(self, fork: Fork, draft: PlanDraft) -> bool:
        """Carry over what the run this one was forked from did (stratagem.domain.forks). From level 7
        the outputs are read from the source run's own ledger by an activity: a start request that
        brings its own outputs is refused, as is a source that does not exist. False if the run
        failed for it."""
        outputs = fork.outputs
        if has(self._state, Change.FORK_READS_SOURCE):
            if fork.outputs:
                self._steps.fail_run(
                    "the run's input brings a fork's outputs; a fork reads them from the run it was forked from"
                )
                return False
            try:
                carried = await workflow.execute_activity(
                    activity_io.READ_FORK,
                    activity_io.ReadForkInput(source_run_id=fork.run_id, revision=fork.revision, draft=draft),
                    result_type=activity_io.ForkCarried,
                    start_to_close_timeout=FORK_TIMEOUT,
                    retry_policy=FORK_RETRY,
                    summary=f"read what run {fork.run_id} did"[:200],
                )
            except ActivityError as exc:
                if is_cancelled_exception(exc):
                    raise
                self._steps.fail_run(f"cannot fork from run {fork.run_id}: {cause_message(exc)}")
                return False
            outputs = carried.outputs
        self._carry_fork(fork, outputs)
        return True

    def _carry_fork(self, fork: Fork, outputs: dict[str, Any]) -> None:
        """The carried steps count as done and never run here. (What ran there keeps its effects
        there; the idempotency keys here are this run's own, so whatever runs again is a new call.)"""
        state = self._state
        assert state.plan is not None
        state.forked_from = fork.model_copy(update={"outputs": {}})
        state.ledger.record(
            EventKind.step_carried,
            workflow.now(),
            revision=state.plan.revision,
            message=f"forked from run {fork.run_id} at revision {fork.revision}",
            data=StepCarried(source=fork.run_id, source_revision=fork.revision, steps=sorted(outputs)),
        )
        for sid, output in outputs.items():
            record = state.ledger.steps.get(sid)
            if record is None:
                continue  # a step the plan lacks carries nothing
            record.output, record.attempts = output, 0
            record.revision = state.plan.revision
            self._steps.close(record, StepStatus.succeeded, None)
            state.ledger.record(
                EventKind.step_carried,
                workflow.now(),
                revision=state.plan.revision,
                step_id=sid,
                message=f"output carried from run {fork.run_id} (revision {fork.revision})",
                data=StepCarried(source=fork.run_id),
            )
