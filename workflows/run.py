"""The Stratagem run: plan -> review gate -> execute ready steps in parallel -> record -> replan -> finish.

This is workflow code: deterministic, no I/O. Everything that touches the world happens in
activities. The plan, the ledger and every pending decision live in one `RunState`, which
continue-as-new carries. What a decision (approve, reject, revise, answer) may do and what it
records are rules in `stratagem.decisions`; the handlers here call them.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any, Callable, Mapping

from temporalio import workflow
from temporalio.common import RawValue
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError as TemporalCancelledError
from temporalio.exceptions import TimeoutError as TemporalTimeoutError, TimeoutType
from temporalio.exceptions import is_cancelled_exception

with workflow.unsafe.imports_passed_through():
    # Pure, deterministic modules shared with the worker. Passing them through avoids
    # re-importing pydantic models inside the sandbox for every workflow task.
    from stratagem import activity_io
    from stratagem import decisions, handlers
    from stratagem.errors import DecisionRefusedError, ReferenceResolutionError
    from stratagem.ledger import EventArchive, EventKind, Ledger, StepRecord, StepStatus, ToolCallRecord, ToolCallStatus
    from stratagem.plan import Author, AuthorKind, Plan, PlanDraft, Step, StepKind
    from stratagem.references import references_in, resolve
    from stratagem.roles import Role, role_queue
    from stratagem.stored import describe, is_stored
    from stratagem.run import (
        JOINT_STEP_ID,
        RUN_LEVEL,
        WORKFLOW_NAME,
        AnswerInput,
        ApproveInput,
        BudgetInput,
        EventPage,
        EventsQuery,
        Mode,
        DecisionKind,
        DecisionOutcome,
        PendingDecision,
        Phase,
        RejectInput,
        ReviewTimeoutAction,
        ReviseInput,
        RunInput,
        RunResult,
        RunState,
        RunStatus,
        progress_markdown,
        StepCounts,
    )
    from stratagem.scheduling import Frontier, Reconciliation, all_succeeded, reconcile, sink_steps
    from stratagem.tools.spec import ToolCatalog
    from stratagem.usage import Allowance, CallUsage, UsageTotals, allowance, budget_warnings, exhausted, may_cross, price_for, share_of
    from stratagem.validation import plan_problems
    from opentelemetry import trace

from .activity_options import (
    ARCHIVE_RETRY, ARCHIVE_TIMEOUT, CATALOG_RETRY, CATALOG_TIMEOUT, LOCAL_CATALOG_RETRY, LOCAL_CATALOG_TIMEOUT, PLANNING_RETRY,
    PLANNING_TIMEOUT, max_attempts, step_activity_options,
)
from .observe import Observer, mark

# Routine events move to the output store at a continue-as-new, in batches of at least this many.
ARCHIVE_PATCH = "archive-events"
ARCHIVE_MIN_EVENTS = 200
# How stale the step table in the Temporal UI may be while steps finish.
DETAILS_EVERY = timedelta(seconds=1)
# Runs started before the phase was kept in the memo replay without it.
PHASE_MEMO_PATCH = "phase-in-memo"
# A replan that loosens what was approved (lower risk, more tools, a gated step's new arguments)
# waits for a person even when replan_requires_approval is off; older runs were approved by policy.
LOOSENED_PATCH = "replan-loosened-needs-a-person"
# Plans may not carry literal credentials in HTTP headers (stratagem.validation).
CREDENTIALS_PATCH = "no-literal-credentials"
# A model budget too small for one more call asks a person before a step starts, not after.
BUDGET_SHORT_PATCH = "budget-short-of-a-call"
# A used-up budget holds human steps too, not only steps that call models.
HUMAN_BUDGET_PATCH = "budget-holds-human-steps"


class DecisionRefused(ApplicationError):
    def __init__(self, message: str):
        super().__init__(message, type="DecisionRefused", non_retryable=True)


@workflow.defn(name=WORKFLOW_NAME)
class StratagemRun:
    @workflow.init
    def __init__(self, input: RunInput) -> None:
        # Built in __init__ so queries and updates that arrive before run() starts see a state.
        # A state is trusted only from this run's own continue-as-new. Anyone who can start a
        # workflow could otherwise hand it a state with the plan approved and every gate passed.
        self._forged = input.state is not None and workflow.info().continued_run_id is None
        self._continued = input.state is not None and not self._forged
        if self._continued:
            self.state = input.state
            input.state = None  # the workflow holds the only reference, so it can let go of it (_release)
        else:
            input.state = None
            run_id = input.run_id or workflow.info().workflow_id
            self.state = RunState(
                run_id=run_id,
                execution_id=workflow.info().first_execution_run_id,
                goal=input.goal or (input.plan.goal if input.plan else ""),
                options=input.options,
                ledger=Ledger(run_id=run_id),
                level=input.level,
            )
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._ended = 0  # step tasks that ended: what the execution loop wakes on
        self._resumed: list[Step] = []
        # Per revision, the steps each step refers to (a step's references never change).
        self._references: dict[str, frozenset[str]] = {}
        self._busy_slots = 0
        # Stopping: a step failed or was rejected. Waiting steps give up, running ones finish.
        self._stopping = False
        # Winding down: a continue-as-new is due. Nothing new starts, running steps finish, and
        # steps parked on a person (an answer, a step approval) stay parked: the state carries them.
        self._winding_down = False
        self._parked: set[str] = set()
        self._finished_here = 0
        self._rejection: str | None = None
        self._memo_phase: str | None = None
        self._memo_due = False
        self._memo_hold: int | None = None
        self._details_key: Any = None
        self._details_at: Any = None
        # Bumped whenever usage, a budget or the steps in flight change: what budget waits wake on.
        self._budget_epoch = 0
        self._model_steps_in_flight = 0
        self._model_steps_waiting = 0
        # Model budget reserved by llm steps in flight (their allowances), and steps that used
        # their share and run again once the others are done.
        self._reserved: dict[str, Allowance] = {}
        self._budget_reruns: set[str] = set()
        # Which steps may start; rebuilt whenever execution (re)starts on a plan.
        self._frontier: Frontier | None = None
        # Spans, metrics and the status search attribute (workflows/observe.py).
        self._observe = Observer(self.state.run_id)
        self._plan_span: trace.Span | None = None
        # The span of the step whose failure the next replan answers, which that replan links to.
        self._failure_span: trace.Span | None = None
        # What the run span reports when this execution handed its state on (_release).
        self._outcome: dict[str, Any] | None = None

    # ------------------------------------------------------------------ the loop

    @workflow.run
    async def run(self, input: RunInput) -> RunResult:
        # One span per execution: a continued one is the child of the one before (continue-as-new
        # carries the trace context), so a run is one trace however often it continued.
        state = self.state
        name = f"run {state.run_id}" + (f" (continued {state.continued})" if self._continued else "")
        attributes = {
            "stratagem.run_id": state.run_id, "stratagem.goal": state.goal[:200], "stratagem.mode": state.options.mode.value,
            "stratagem.continued": state.continued,
        }
        with self._observe.span(name, attributes) as span:
            try:
                return await self._run(input)
            finally:
                # Harmless if the span does not end here (an evicted workflow): nothing is exported.
                span.set_attributes(self._outcome or self._outcome_attributes())

    def _outcome_attributes(self) -> dict[str, Any]:
        state = self.state
        return {
            "stratagem.phase": state.phase.value, "stratagem.replans": state.ledger.replans,
            "stratagem.model_calls": state.ledger.usage.calls, "stratagem.cost_usd": state.ledger.usage.cost_usd,
        }

    async def _run(self, input: RunInput) -> RunResult:
        if self.state.level > RUN_LEVEL:
            # Not a failure of the run: its task fails and Temporal retries it until a worker
            # that knows this level takes it (workers are upgraded before clients).
            raise RuntimeError(f"run {self.state.run_id} was started at level {self.state.level}; this worker runs up to {RUN_LEVEL}")
        try:
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
                else:  # planning only happens in _start; reaching it here is a bug
                    raise ApplicationError(f"run is in unexpected phase {self.state.phase.value}", non_retryable=True)
            return await self._finish()
        except BaseException as exc:
            if not is_cancelled_exception(exc):
                raise
            await self._on_cancel()
            raise asyncio.CancelledError() from exc

    async def _catalog(self) -> ToolCatalog:
        """The tools the run may use, from the worker's configuration. From level 3, the worker
        running this task answers in a local activity when it serves the tools role too (no
        round trip: the concurrency bench's runs went from 0.79x to 0.88x of bare workflows). A
        workflow-only worker, or a command line hosting the workflow for a moment, answers
        None, and the tools role answers in an activity, as at lower levels."""
        if self.state.level >= 3:
            here = await workflow.execute_local_activity(
                activity_io.DESCRIBE_TOOLS_HERE,
                result_type=ToolCatalog | None,
                start_to_close_timeout=LOCAL_CATALOG_TIMEOUT,
                retry_policy=LOCAL_CATALOG_RETRY,
                summary="describe tools",
            )
            if here is not None:
                return here
        return await workflow.execute_activity(
            activity_io.DESCRIBE_TOOLS,
            task_queue=self._queue(Role.tools),
            result_type=ToolCatalog,
            start_to_close_timeout=CATALOG_TIMEOUT,
            retry_policy=CATALOG_RETRY,
            summary="describe tools",
        )

    async def _start(self, input: RunInput) -> None:
        ledger = self.state.ledger
        self.state.started_at = self._now()
        ledger.record(
            EventKind.run_started, self._now(), message=self.state.goal, auto_approve=self.state.options.auto_approve,
            mode=self.state.options.mode.value,
        )
        try:
            self.state.catalog = await self._catalog()
        except ActivityError as exc:
            if is_cancelled_exception(exc):
                raise
            return self._fail(f"cannot read the worker's tools: {_cause_message(exc)}")
        if input.plan is not None:
            author = input.author or Author(kind=AuthorKind.human, name="unknown")
            problems = self._problems(input.plan)
            if problems:
                return self._fail("the supplied plan is invalid: " + "; ".join(problems))
            self._adopt(Reconciliation(draft=input.plan), author, input.plan.reason or "supplied plan")
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

    async def _call_planner(self, current: Plan | None) -> Plan | None:
        """Ask the planner for the next revision, within a `plan revision N` span (its model calls
        are the span's grandchildren, under the activity attempt)."""
        if not await self._budget_gate():
            return None
        revision = self.state.plan.revision + 1 if self.state.plan else 1
        planner = self.state.options.planner or ""
        with self._observe.span(f"plan revision {revision}", {"stratagem.revision": revision, "stratagem.model": planner}) as span:
            self._plan_span = span
            plan = await self._ask_planner(current)
            self._plan_span = None
            if plan is None:
                mark(span, self.state.reason or "planning failed")
            return plan

    async def _ask_planner(self, current: Plan | None) -> Plan | None:
        options = self.state.options
        assert options.planner is not None
        request = activity_io.PlanningInput(
            goal=self.state.goal,
            model=options.planner,
            catalog=self.state.catalog,
            first_call_index=self.state.planner_calls,
            max_repairs=options.max_plan_repairs,
            current=current.draft() if current else None,
            records={sid: self.state.ledger.steps[sid] for sid in current.step_ids} if current else {},
            failure=self.state.failure,
            history=self._history() if current else [],
            has_executor=bool(options.executor),
            tiers=sorted(options.tiers),
            price=price_for(options.planner, options.prices),
        )
        try:
            out = await workflow.execute_activity(
                activity_io.PLAN,
                request,
                task_queue=self._queue(Role.planner),
                result_type=activity_io.PlanningOutput,
                start_to_close_timeout=PLANNING_TIMEOUT,
                retry_policy=PLANNING_RETRY,
                summary="revise plan" if current else "plan",
            )
        except ActivityError as exc:
            if is_cancelled_exception(exc):
                raise
            self._record_calls(_cause_detail(exc, "calls", CallUsage), "plan")
            self._fail(f"planning failed: {_cause_message(exc)}")
            return None
        self._record_calls(out.call_usage, "plan")
        self.state.planner_calls += out.calls
        for number, problems in enumerate(out.rejected_attempts, start=1):
            self.state.ledger.record(
                EventKind.planning_attempt_invalid, self._now(), actor=out.model,
                message=f"planner attempt {number} was invalid and sent back for repair", problems=problems,
            )
        # The activity validated the draft against the same catalogue; checking again here
        # keeps "no invalid plan reaches execution" true even for a misbehaving worker.
        merged = reconcile(current, out.draft, self.state.ledger.steps)
        problems = merged.problems or self._problems(merged.draft)
        if problems:
            self._fail("the planner's plan is invalid: " + "; ".join(problems))
            return None
        reason = out.draft.reason or ("revised after: " + (self.state.failure or "") if current else "initial plan")
        return self._adopt(merged, Author(kind=AuthorKind.model, name=out.model), reason)

    def _history(self) -> list[str]:
        """What the replanner should know beyond the current plan: earlier revisions, decisions
        and failures, oldest first, so it does not repeat what people already turned down."""
        ledger = self.state.ledger
        lines = [f"revision {p.revision} by {p.author}: {p.reason}" for p in ledger.revisions]
        for decision in ledger.decisions:
            comment = f": {decision.comment}" if decision.comment else ""
            target = f" step {decision.step_id} of" if decision.step_id else ""
            lines.append(f"{decision.by} {decision.action.value}d{target} revision {decision.revision}{comment}")
        lines.extend(
            f"step {e.step_id} failed under revision {e.revision}: {e.message}"
            for e in ledger.events if e.kind is EventKind.step_failed
        )
        return lines

    def _problems(self, draft: PlanDraft) -> list[str]:
        # Runs from before the credential rule replay as they were decided.
        credentials = self._patched(CREDENTIALS_PATCH)
        return plan_problems(draft, self.state.catalog, **self.state.options.plan_rules(), credentials=credentials)

    def _adopt(self, merged: Reconciliation, author: Author, reason: str) -> Plan:
        """Make a reconciled draft the next revision and bring the ledger in line with it."""
        state, ledger, now = self.state, self.state.ledger, self._now()
        revision = (state.plan.revision + 1) if state.plan else 1
        plan = Plan.from_draft(merged.draft, revision=revision, author=author, reason=reason)
        for sid in merged.dropped:
            # A failed step keeps its status and error: that is what the revision learned from.
            if ledger.steps[sid].status is StepStatus.pending:
                self._close_step(ledger.steps[sid], StepStatus.skipped, f"dropped by revision {revision}")
        for sid in merged.retried:
            record = ledger.steps[sid]
            record.status, record.error, record.output = StepStatus.pending, None, None
        ledger.add_revision(plan)
        state.step_approvals = {}
        state.failure = None
        ledger.record(
            EventKind.plan_proposed, now, revision=revision, actor=str(author), message=reason,
            steps=len(plan.steps), carried=merged.carried, dropped=merged.dropped, retried=merged.retried,
        )
        attributes = {
            "stratagem.revision": revision, "stratagem.author": str(author), "stratagem.reason": reason[:200],
            "stratagem.steps": len(plan.steps), "stratagem.steps.carried": len(merged.carried),
            "stratagem.steps.dropped": len(merged.dropped), "stratagem.steps.retried": len(merged.retried),
        }
        if self._plan_span is not None:
            self._plan_span.set_attributes(attributes)
        else:  # a person's plan (supplied or revised), or joint mode's: no planner call to span
            self._observe.start(f"plan revision {revision}", attributes).end()
        return plan

    def _adopt_joint_plan(self) -> None:
        """Joint mode: one llm step in which one model thinks and acts. It still waits for
        approval, so a person sees the goal, the model and the tools it may call before it runs."""
        state, options = self.state, self.state.options
        tools = options.joint_tools if options.joint_tools is not None else state.catalog.names
        step = Step(
            id=JOINT_STEP_ID, title="Reach the goal in one loop", kind=StepKind.llm,
            instructions=state.goal.replace("${", "$${"), tools=tools,
        )
        draft = PlanDraft(goal=state.goal, steps=[step], reason="joint mode: one model thinks and acts in a single loop")
        problems = self._problems(draft)
        if problems:
            return self._fail("the joint run cannot start: " + "; ".join(problems))
        assert options.executor is not None
        self._adopt(Reconciliation(draft=draft), Author(kind=AuthorKind.model, name=options.executor), draft.reason)
        state.phase = Phase.awaiting_approval

    # ------------------------------------------------------------------ usage and budgets

    def _record_calls(self, calls: list[CallUsage], purpose: str, step_id: str | None = None) -> UsageTotals:
        state = self.state
        totals = state.ledger.record_calls(
            calls, self._now(), purpose=purpose, prices=state.options.prices, step_id=step_id,
            revision=state.plan.revision if state.plan else None,
        )
        self._budget_epoch += 1
        self._observe.calls(state.ledger.calls[-totals.calls:] if totals.calls else [])
        for warning in budget_warnings(state.options.budget, state.ledger.usage, state.budget_warned):
            state.budget_warned.append(warning.dimension)
            state.ledger.record(EventKind.budget_warning, self._now(), message=warning.message, dimension=warning.dimension)
        return totals

    def _record_step_work(self, step: Step, calls: list[CallUsage], tool_calls: list[ToolCallRecord]) -> None:
        """Keep what an llm step's executor did, whether the step succeeded or not."""
        if step.kind is not StepKind.llm:
            return
        totals = self._record_calls(calls, "execute", step.id)
        if totals.calls:
            self.state.ledger.note_step_usage(totals)
        ledger, revision = self.state.ledger, self.state.plan.revision if self.state.plan else None
        ledger.steps[step.id].tool_calls.extend(tool_calls)
        for call in tool_calls:
            refused = call.status is ToolCallStatus.refused
            ledger.record(
                EventKind.tool_call_refused if refused else EventKind.tool_called, self._now(), revision=revision,
                step_id=step.id, message=call.message or call.tool, tool=call.tool, call=call.call, status=call.status.value,
            )

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

    # ------------------------------------------------------------------ review gate

    async def _review(self) -> None:
        state = self.state
        assert state.plan is not None
        is_replan = state.ledger.replans > 0 and state.plan.revision > 1
        if state.options.auto_approve:
            decision = ApproveInput(by="auto_approve", revision=state.plan.revision, comment="auto_approve")
            decisions.approve_plan(state, decision, via="auto", now=self._now())
            return
        why: list[str] = []
        if is_replan and not state.options.replan_requires_approval and not state.pending:
            why = decisions.loosened(state.approved_plan, state.plan)
            if not why or not self._patched(LOOSENED_PATCH):
                decision = ApproveInput(by="policy", revision=state.plan.revision, comment="replan_requires_approval is off")
                decisions.approve_plan(state, decision, via="policy", now=self._now())
                return
            state.ledger.record(
                EventKind.review_escalated, self._now(), revision=state.plan.revision,
                message="needs a person although replan_requires_approval is off: " + "; ".join(why),
            )
        if not state.pending:  # already pending when a continue-as-new carried it here
            state.pending = [decisions.plan_approval_request(state, self._now(), why)]
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
                    lambda: state.phase is not Phase.awaiting_approval or state.plan.revision != revision,
                    timeout=timedelta(seconds=timeout) if timeout else None,
                    timeout_summary="review timeout",
                )
            except asyncio.TimeoutError:
                if state.options.on_review_timeout is ReviewTimeoutAction.fail:
                    state.ledger.record(
                        EventKind.review_timed_out, self._now(), revision=revision, message=f"no decision within {timeout:g} s"
                    )
                    self._fail(f"no decision on revision {revision} within {timeout:g} seconds")
                    return
                for pending in state.pending:
                    pending.escalated = True
                state.ledger.record(
                    EventKind.review_escalated, self._now(), revision=revision,
                    message=f"no decision within {timeout:g} s; escalated, still waiting",
                )
                timeout = None

    # ------------------------------------------------------------------ execution

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
        # Human steps already out for an answer when a continue-as-new carried them here: their
        # question stays asked, only the waiting resumes.
        self._resumed = [
            s for s in state.plan.steps if s.kind is StepKind.human and state.ledger.steps[s.id].status is StepStatus.running
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
            state.phase = Phase.replanning
        elif all_succeeded(state.plan, state.ledger):
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
                "stratagem.step.id": step.id, "stratagem.step.kind": step.kind.value, "stratagem.step.title": step.title[:200],
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
        if step.needs_step_approval and not await self._step_gate(step):
            return
        if step.kind is StepKind.human:
            # A used-up budget pauses questions to people too (runs from before asked anyway).
            while (used_up := self._budget_used_up()) and not self._stopping and self._patched(HUMAN_BUDGET_PATCH):
                self._request_budget(used_up)
                epoch = self._budget_epoch
                await self._park(step.id, lambda: self._budget_epoch != epoch or self._stopping or self._winding_down)
                if self._winding_down:
                    return
            if self._stopping:
                return
            await self._ask_human(step)
            return
        uses_model = step.kind is StepKind.llm
        if not await self._wait_for_dispatch(step, uses_model):
            return  # stays pending; it runs after the replan, the continue-as-new or a raised budget
        self._busy_slots += 1
        self._model_steps_in_flight += uses_model
        try:
            outputs = state.ledger.outputs()
            deferred = _stored_references(self._referenced(step), outputs)
            if deferred is None:
                try:
                    args = resolve(step.args, outputs)
                    instructions = resolve(step.instructions, outputs)
                except ReferenceResolutionError as exc:
                    self._step_started(record, plan.revision)
                    self._step_failed(step, record, str(exc), attempts=0)
                    return
            else:
                # Some referenced outputs are in the store, where only an activity may read:
                # the activity resolves the references.
                args, instructions = step.args, step.instructions
            self._step_started(record, plan.revision)
            try:
                result = await self._dispatch(step, plan.revision, args, str(instructions), outputs, deferred)
            except ActivityError as exc:
                if isinstance(exc.cause, TemporalCancelledError):
                    # The run was cancelled while the activity ran: that is not the step's failure.
                    raise asyncio.CancelledError() from exc
                self._record_step_work(
                    step, _cause_detail(exc, "calls", CallUsage), _cause_detail(exc, "tool_calls", ToolCallRecord)
                )
                if _cause_type(exc) == "BudgetReachedError":
                    # Not the step's failure: it runs again with what is left once the steps
                    # beside it are done, or waits, pending, for a person to raise the budget.
                    self._budget_reruns.add(step.id)
                    record.status = StepStatus.pending
                    state.ledger.record(
                        EventKind.budget_exhausted, self._now(), revision=plan.revision, step_id=step.id,
                        message=_cause_message(exc),
                    )
                    return True
                self._step_failed(step, record, _cause_message(exc), attempts=_cause_attempts(exc, max_attempts(step, state.options)))
                return
            self._record_step_work(step, result.calls, result.tool_calls)
            record.attempts += result.attempt
            record.output = result.output
            record.transcript = result.transcript
            self._close_step(record, StepStatus.succeeded, None)
            state.ledger.record(
                EventKind.step_succeeded, self._now(), revision=plan.revision, step_id=step.id,
                attempt=result.attempt, model=result.model,
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
            hold = uses_model and self._model_steps_in_flight > 0 and (
                step.id in self._budget_reruns
                or may_cross(state.options.budget, state.ledger.usage, state.ledger.largest_step, self._model_steps_in_flight)
            )
            if not hold and self._busy_slots < state.options.max_parallel:
                return True
            epoch = self._budget_epoch
            await workflow.wait_condition(
                lambda: held_back() or self._budget_epoch != epoch
                or (not hold and self._busy_slots < state.options.max_parallel)
            )
        return False

    async def _dispatch(
        self, step: Step, revision: int, args: Any, instructions: str, outputs: dict[str, Any],
        references: dict[str, Any] | None,
    ) -> activity_io.StepOutput:
        options = self.state.options
        if step.kind is StepKind.tool:
            assert step.tool is not None
            request: Any = activity_io.ToolStepInput(
                run_id=self.state.run_id, execution_id=self.state.execution_id, step_id=step.id, revision=revision,
                tool=step.tool, args=args, references=references, workspace=self.state.options.workspace,
            )
            spec = self.state.catalog.get(step.tool)
            if spec is not None and spec.local:
                # The fast path: no task-queue round trip, and no heartbeats (the tool is quick).
                local = step_activity_options(step, options, local=True)
                return await workflow.execute_local_activity(activity_io.RUN_TOOL, request, **local)
            queue, remote = self._queue(Role.tools), step_activity_options(step, options)
            return await workflow.execute_activity(activity_io.RUN_TOOL, request, task_queue=queue, **remote)
        model = options.model_for(step)
        assert model, "validation refuses llm steps that no configured model can run"
        request = activity_io.LlmStepInput(
            run_id=self.state.run_id, execution_id=self.state.execution_id, revision=revision, step=step,
            instructions=instructions, inputs={dep: outputs.get(dep) for dep in step.depends_on}, model=model,
            max_rounds=options.max_tool_rounds, references=references, price=price_for(model, options.prices),
            allowance=self._allowance(step),
            workspace=options.workspace,
        )
        return await workflow.execute_activity(
            activity_io.RUN_LLM, request, task_queue=self._queue(Role.executor), **step_activity_options(step, options)
        )

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
            short.append(f"the token budget has {left.tokens:,} left, less than one model call takes ({left.call_tokens:,})")
        if left.cost_usd is not None and 0 < left.cost_usd < left.call_cost_usd:
            short.append(f"the cost budget has ${left.cost_usd:,.4f} left, less than one model call costs (${left.call_cost_usd:,.4f})")
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

    def _referenced(self, step: Step) -> frozenset[str]:
        """The steps `step` refers to, worked out once per revision."""
        found = self._references.get(step.id)
        if found is None:
            found = self._references[step.id] = frozenset(ref.step_id for ref in references_in(step.instructions, step.args))
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
                question = str(resolve(step.instructions, shown))
            except ReferenceResolutionError as exc:
                self._step_started(record, revision)
                self._step_failed(step, record, str(exc), attempts=0)
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
            except asyncio.TimeoutError:
                decisions.remove_pending(state, step.id)
                self._step_failed(step, record, f"no answer within {step.timeout_seconds:g} seconds", attempts=1)
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

    def _step_started(self, record: StepRecord, revision: int) -> None:
        record.status = StepStatus.running
        record.started_at = self._now()
        record.ended_at = None
        record.revision = revision
        self.state.ledger.record(EventKind.step_started, self._now(), revision=revision, step_id=record.step_id)

    def _step_failed(self, step: Step, record: StepRecord, error: str, *, attempts: int) -> None:
        record.attempts += attempts
        self._close_step(record, StepStatus.failed, error)
        revision = self.state.plan.revision if self.state.plan else None
        self.state.ledger.record(
            EventKind.step_failed, self._now(), revision=revision, step_id=step.id, message=error, attempts=attempts
        )
        if self.state.failure is None:
            self.state.failure = f"step '{step.id}' failed: {error}"
            self._failure_span = trace.get_current_span()  # the step's span: the replan links to it
        self._stopping = True

    def _close_step(self, record: StepRecord, status: StepStatus, error: str | None) -> None:
        record.status = status
        record.error = error
        record.ended_at = self._now()
        if status is StepStatus.succeeded and self._frontier is not None:
            self._frontier.succeeded(record.step_id)
        self._observe.step_finished(status.value)
        if status in (StepStatus.skipped, StepStatus.cancelled):
            kind = EventKind.step_skipped if status is StepStatus.skipped else EventKind.step_cancelled
            self.state.ledger.record(kind, self._now(), step_id=record.step_id, message=error or "")

    def _close_open_steps(self, status: StepStatus, why: str) -> None:
        for record in self.state.ledger.steps.values():
            if record.status in (StepStatus.pending, StepStatus.running):
                self._close_step(record, status, why)

    # ------------------------------------------------------------------ replanning

    async def _replan(self) -> None:
        state = self.state
        assert state.plan is not None
        failure = state.failure or "a step failed"
        if state.ledger.replans >= state.options.max_replans:
            state.ledger.record(
                EventKind.replan_cap_reached, self._now(), revision=state.plan.revision,
                message=f"{state.ledger.replans} of {state.options.max_replans} replans used",
            )
            return self._fail(f"{failure}; the replan limit ({state.options.max_replans}) is reached")
        if state.options.mode is Mode.joint:
            return self._fail(f"{failure}; a joint run does not replan")
        if not state.options.planner:
            return self._fail(f"{failure}; no planner model is configured to revise the plan")
        state.ledger.replans += 1
        state.ledger.record(
            EventKind.replan_requested, self._now(), revision=state.plan.revision, message=failure,
            replan=state.ledger.replans,
        )
        self._observe.replanned()
        failed = self._failure_span
        self._failure_span = None
        links = [trace.Link(failed.get_span_context(), {"stratagem.failure": failure[:200]})] if failed else []
        attributes = {"stratagem.replan": state.ledger.replans, "stratagem.failure": failure[:500]}
        with self._observe.span(f"replan {state.ledger.replans}", attributes, links=links):
            if await self._call_planner(current=state.plan) is not None:
                state.phase = Phase.awaiting_approval

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
                                goal=state.goal, model=model, outputs=outputs, price=price_for(model, state.options.prices)
                            ),
                            task_queue=self._queue(Role.planner),
                            result_type=activity_io.SynthesisOutput,
                            start_to_close_timeout=PLANNING_TIMEOUT,
                            retry_policy=PLANNING_RETRY,
                            summary="synthesis",
                        )
                    self._record_calls(out.calls, "synthesize")
                    synthesis = out.text
                except ActivityError as exc:
                    if is_cancelled_exception(exc):
                        raise
                    self._fail(f"every step succeeded, but the final synthesis failed: {_cause_message(exc)}")
            if state.phase is Phase.running:
                self._end(Phase.succeeded, None, EventKind.run_succeeded)
                await workflow.wait_condition(workflow.all_handlers_finished)
                self._write_memo(final=True)
                return RunResult(
                    run_id=state.run_id, status=Phase.succeeded, revision=state.plan.revision,
                    outputs=outputs, synthesis=synthesis, replans=state.ledger.replans,
                )
        await workflow.wait_condition(workflow.all_handlers_finished)
        self._write_memo(final=True)
        if state.phase is Phase.rejected:
            return RunResult(
                run_id=state.run_id, status=Phase.rejected, revision=state.plan.revision if state.plan else None,
                reason=state.reason, replans=state.ledger.replans,
            )
        # A failed business process is a failed workflow, so the Temporal UI tells the truth.
        raise ApplicationError(state.reason or "the run failed", type="RunFailed", non_retryable=True)

    def _fail(self, reason: str) -> None:
        self._close_open_steps(StepStatus.skipped, "run failed")
        self._end(Phase.failed, reason, EventKind.run_failed)

    def _end(self, phase: Phase, reason: str | None, kind: EventKind) -> None:
        self.state.phase = phase
        self.state.reason = reason
        self.state.pending = []
        revision = self.state.plan.revision if self.state.plan else None
        self.state.ledger.record(kind, self._now(), revision=revision, message=reason or "")
        self._show()

    async def _on_cancel(self) -> None:
        for task in self._tasks.values():
            task.cancel()
        # Each step task marks its own record cancelled as the cancellation reaches it.
        await workflow.wait_condition(lambda: all(t.done() for t in self._tasks.values()))
        self._tasks.clear()
        self._close_open_steps(StepStatus.cancelled, "run cancelled")
        self._end(Phase.cancelled, "cancelled", EventKind.run_cancelled)
        self._write_memo(final=True)

    # ------------------------------------------------------------------ continue-as-new

    def _continue_as_new_due(self) -> bool:
        info = workflow.info()
        limit = self.state.options.continue_as_new_after_events
        if limit is not None:
            return info.get_current_history_length() >= limit
        return info.is_continue_as_new_suggested()

    async def _continue_as_new(self) -> None:
        if self._patched(ARCHIVE_PATCH):
            await self._archive_events()
        self._write_memo(final=True)
        # Handlers may still be mutating the state; carry it only once they are done.
        await workflow.wait_condition(workflow.all_handlers_finished)
        self.state.continued += 1
        self.state.ledger.record(
            EventKind.continued_as_new, self._now(), revision=self.state.plan.revision if self.state.plan else None,
            history_events=workflow.info().get_current_history_length(),
        )
        # Converted here, not by Temporal as the run ends, so this execution can let go of its
        # state before the next one reads it in: otherwise the worker holds both at once, twice the
        # memory of a long plan at every continue-as-new. (Temporal does not compare the arguments
        # of a continue-as-new on replay.)
        carried = workflow.payload_converter().to_payload(RunInput(state=self.state, options=self.state.options))
        self._release()
        workflow.continue_as_new(RawValue(carried))

    async def _archive_events(self) -> None:
        """Move the routine events (a step started, succeeded, called a tool) to the output store,
        so the state a continue-as-new carries stays the size of the plan, not of the history.
        If the store cannot take them, they stay in the state: nothing is lost, it is only larger."""
        ledger = self.state.ledger
        routine = ledger.routine_events()
        if len(routine) < ARCHIVE_MIN_EVENTS:
            return
        try:
            archive = await workflow.execute_activity(
                activity_io.ARCHIVE_EVENTS,
                activity_io.ArchiveEventsInput(run_id=self.state.run_id, events=routine),
                task_queue=self._queue(Role.workflow),
                result_type=EventArchive,
                start_to_close_timeout=ARCHIVE_TIMEOUT,
                retry_policy=ARCHIVE_RETRY,
                summary=f"archive events {routine[0].seq}-{routine[-1].seq}",
            )
        except ActivityError as exc:
            if is_cancelled_exception(exc):
                raise
            workflow.logger.warning("run %s keeps its events in its state: %s", self.state.run_id, _cause_message(exc))
            return
        ledger.archived(routine, archive)

    def _release(self) -> None:
        """Drop the bulk of the state (plan, records, events): the execution ends with the
        continue-as-new that carries it, and answers no query after it."""
        self._outcome = self._outcome_attributes()
        self.state.ledger = Ledger(run_id=self.state.run_id)
        self._frontier = None
        self._references = {}

    # ------------------------------------------------------------------ decisions
    # Temporal requires the handlers on the workflow class; the rules live in stratagem.decisions.

    @workflow.update(name=handlers.APPROVE)
    async def approve(self, decision: ApproveInput) -> DecisionOutcome:
        outcome = self._apply_approve(decision, via="update")
        self._show()
        return outcome

    @approve.validator
    def _validate_approve(self, decision: ApproveInput) -> None:
        self._validate(decisions.check_approve, decision)

    @workflow.signal(name=handlers.signal_name(handlers.APPROVE))
    def approve_signal(self, decision: ApproveInput) -> None:
        self._signal(decisions.check_approve, decision, lambda: self._apply_approve(decision, via="signal"))

    @workflow.update(name=handlers.REJECT)
    async def reject(self, decision: RejectInput) -> DecisionOutcome:
        outcome = self._apply_reject(decision, via="update")
        self._show()
        return outcome

    @reject.validator
    def _validate_reject(self, decision: RejectInput) -> None:
        self._validate(decisions.check_reject, decision)

    @workflow.signal(name=handlers.signal_name(handlers.REJECT))
    def reject_signal(self, decision: RejectInput) -> None:
        self._signal(decisions.check_reject, decision, lambda: self._apply_reject(decision, via="signal"))

    @workflow.update(name=handlers.REVISE)
    async def revise(self, decision: ReviseInput) -> DecisionOutcome:
        outcome = self._apply_revise(decision, via="update")
        self._show()
        return outcome

    @revise.validator
    def _validate_revise(self, decision: ReviseInput) -> None:
        self._validate(decisions.check_revise, decision)

    @workflow.signal(name=handlers.signal_name(handlers.REVISE))
    def revise_signal(self, decision: ReviseInput) -> None:
        self._signal(decisions.check_revise, decision, lambda: self._apply_revise(decision, via="signal"))

    @workflow.update(name=handlers.ANSWER)
    async def answer(self, answer: AnswerInput) -> DecisionOutcome:
        outcome = self._apply_answer(answer)
        self._show()
        return outcome

    @answer.validator
    def _validate_answer(self, answer: AnswerInput) -> None:
        self._validate(decisions.check_answer, answer)

    @workflow.signal(name=handlers.signal_name(handlers.ANSWER))
    def answer_signal(self, answer: AnswerInput) -> None:
        self._signal(decisions.check_answer, answer, lambda: self._apply_answer(answer))

    def _refusal(self, check: Callable[[RunState, Any], None], decision: Any) -> DecisionRefused | None:
        # As an ApplicationError the refusal reaches update callers with its type.
        try:
            check(self.state, decision)
        except DecisionRefusedError as exc:
            return DecisionRefused(str(exc))
        return None

    def _validate(self, check: Callable[[RunState, Any], None], decision: Any) -> None:
        """A validator that raises refuses the update before it reaches history; the caller gets the error."""
        refused = self._refusal(check, decision)
        if refused is not None:
            raise refused

    def _signal(self, check: Callable[[RunState, Any], None], decision: Any, apply: Callable[[], Any]) -> None:
        """Signals cannot be refused, so a refused one is recorded instead of applied. One the
        worker could not verify (stratagem.signing) is refused before its content is looked at."""
        verdict = decision.verdict
        if verdict is not None and verdict.refused:
            message = f"not verified: {verdict.refused}"
            self.state.ledger.record(EventKind.signal_ignored, self._now(), actor=decision.by, message=message)
            return
        refused = self._refusal(check, decision)
        if refused is not None:
            self.state.ledger.record(EventKind.signal_ignored, self._now(), actor=decision.by, message=refused.message)
            return
        apply()
        self._show()

    def _apply_approve(self, decision: ApproveInput, *, via: str) -> DecisionOutcome:
        if decision.step_id is not None:
            self._decide_step(decision, via=via)
        else:
            decisions.approve_plan(self.state, decision, via=via, now=self._now())
            if self.state.level >= 2:
                # The phase's memo write waits for the next workflow task (_memo_held): in this
                # one it delayed the first step's start by the server's visibility update.
                self._memo_hold = workflow.info().get_current_history_length()
        return decisions.outcome(self.state, "approved")

    def _decide_step(self, decision: ApproveInput | RejectInput, *, via: str) -> None:
        rejection = decisions.decide_step(self.state, decision, via=via, now=self._now())
        if rejection is not None:
            self._rejection = rejection
            self._stopping = True

    def _apply_reject(self, decision: RejectInput, *, via: str) -> DecisionOutcome:
        if decision.step_id is not None:
            self._decide_step(decision, via=via)
            return decisions.outcome(self.state, "step rejected; the run ends once running steps finish")
        reason = decisions.record_plan_rejection(self.state, decision, via=via, now=self._now())
        self._close_open_steps(StepStatus.skipped, "plan rejected")
        self._end(Phase.rejected, reason, EventKind.run_rejected)
        return decisions.outcome(self.state, "rejected")

    def _apply_revise(self, decision: ReviseInput, *, via: str) -> DecisionOutcome:
        merged = reconcile(self.state.plan, decision.plan, self.state.ledger.steps)
        author = Author(kind=AuthorKind.human, name=decision.by)
        plan = self._adopt(merged, author, decision.reason or decision.plan.reason or "edited by a reviewer")
        decisions.record_revision(self.state, decision, plan, via=via, now=self._now())
        return decisions.outcome(self.state, f"revision {plan.revision} awaits approval")

    def _apply_answer(self, answer: AnswerInput) -> DecisionOutcome:
        decisions.record_answer(self.state, answer, self._now())
        return decisions.outcome(self.state, f"answer recorded for step '{answer.step_id}'")

    @workflow.update(name=handlers.BUDGET)
    async def budget(self, decision: BudgetInput) -> DecisionOutcome:
        outcome = self._apply_budget(decision, via="update")
        self._show()
        return outcome

    @budget.validator
    def _validate_budget(self, decision: BudgetInput) -> None:
        self._validate(self._check_budget, decision)

    @workflow.signal(name=handlers.signal_name(handlers.BUDGET))
    def budget_signal(self, decision: BudgetInput) -> None:
        self._signal(self._check_budget, decision, lambda: self._apply_budget(decision, via="signal"))

    def _check_budget(self, state: RunState, decision: BudgetInput) -> None:
        started = state.started_at or self._now()
        decisions.check_budget(state, decision, elapsed_seconds=(self._now() - started).total_seconds())

    def _apply_budget(self, decision: BudgetInput, *, via: str) -> DecisionOutcome:
        stop = decisions.apply_budget(self.state, decision, via=via, now=self._now(), still_used_up=self._budget_used_up)
        self._budget_epoch += 1
        if stop is not None:
            self._rejection = stop
            self._stopping = True
            return decisions.outcome(self.state, "the run stops once running steps finish")
        return decisions.outcome(self.state, "budget changed")

    # ------------------------------------------------------------------ queries

    @workflow.query(name=handlers.STATUS)
    def status(self) -> RunStatus:
        state = self.state
        counts = StepCounts()
        if state.plan is not None:
            for step in state.plan.steps:
                status = state.ledger.steps[step.id].status.value
                setattr(counts, status, getattr(counts, status) + 1)
        return RunStatus(
            run_id=state.run_id, goal=state.goal, phase=state.phase,
            revision=state.plan.revision if state.plan else None, approved_revision=state.approved_revision,
            steps=counts, pending=state.pending, replans=state.ledger.replans,
            max_replans=state.options.max_replans, reason=state.reason, continued=state.continued,
            usage=state.ledger.usage, budget=state.options.budget, mode=state.options.mode,
            workspace=state.options.workspace,
        )

    @workflow.query(name=handlers.PLAN)
    def plan(self) -> Plan | None:
        return self.state.plan

    @workflow.query(name=handlers.LEDGER)
    def ledger(self) -> Ledger:
        return self.state.ledger

    @workflow.query(name=handlers.PENDING)
    def pending(self) -> list[PendingDecision]:
        return self.state.pending

    @workflow.query(name=handlers.EVENTS)
    def events(self, query: EventsQuery) -> EventPage:
        """The progress stream from an offset: small pages, so a watcher never fetches the whole ledger."""
        ledger = self.state.ledger
        return EventPage(
            events=ledger.events_after(query.after, query.limit), last_seq=ledger.last_seq, phase=self.state.phase,
            archives=[a for a in ledger.archives if a.last_seq > query.after],
        )

    def _show(self) -> None:
        """Publish the run's progress as its current details in the Temporal UI, and its phase in
        the memo when it changed, so listings tell a succeeded run from a rejected one (both are
        completed workflows)."""
        state, now = self.state, workflow.now()
        # The step table is rebuilt when the phase or the waits change, and otherwise at most once
        # a second: rebuilding it after every step of a busy run cost a tenth of its workflow CPU.
        # (Details are kept in memory for the UI's query, not in history, so this is replay-safe.)
        key = (state.phase, state.plan.revision if state.plan else None, [(p.kind, p.step_id) for p in state.pending])
        if key != self._details_key or self._details_at is None or now - self._details_at >= DETAILS_EVERY:
            self._details_key, self._details_at = key, now
            workflow.set_current_details(progress_markdown(state))
        if not self._memo_held():
            self._observe.publish(state)  # the status search attribute and the waits, likewise held
        if self.state.phase.value == self._memo_phase:
            return
        if self.state.level < 1:
            self._memo_phase = self.state.phase.value
            if workflow.patched(PHASE_MEMO_PATCH):
                workflow.upsert_memo({"phase": self._memo_phase})
        elif not self._memo_due:
            # Written once this workflow task's code has run, so phases passed through in one
            # task (planned, approved by policy, running) cost one memo write, not one each.
            self._memo_due = True
            asyncio.get_running_loop().call_soon(self._write_memo)

    def _write_memo(self, final: bool = False) -> None:
        """The phase into the memo, if it changed (level 1 runs; `final` right before the run
        completes or continues as new, after which no command may follow)."""
        self._memo_due = False
        phase = self.state.phase.value
        if not final and self._memo_held():
            return  # written by the next workflow task's _show
        if self.state.level >= 1 and phase != self._memo_phase:
            self._memo_phase = phase
            workflow.upsert_memo({"phase": phase})

    def _memo_held(self) -> bool:
        """Level 2: in the workflow task that approved a plan, "running" is not written yet (the
        memo's phase and waits, the status search attribute). The steps it starts are activities,
        whose ends bring the next task and the write; a step that waits on a person instead adds
        to `pending`, which writes at once. Until then visibility still says the run awaits
        approval; `stratagem list` and the inbox correct that from the run's pending activities."""
        return (
            self._memo_hold is not None
            and self._memo_hold == workflow.info().get_current_history_length()
            and self.state.phase is Phase.running and not self.state.pending
        )

    def _patched(self, patch: str) -> bool:
        """A behaviour introduced behind `patch`: always on for runs at level 1 or more (stratagem.run.RUN_LEVEL)."""
        return self.state.level >= 1 or workflow.patched(patch)

    def _now(self) -> Any:
        return workflow.now()

    def _queue(self, role: Role) -> str:
        """Where a role's activities go: a queue per role, beside the workflow's own (stratagem/roles.py)."""
        return role_queue(workflow.info().task_queue, role)


def _stored_references(referenced: frozenset[str], outputs: Mapping[str, Any]) -> dict[str, Any] | None:
    """The outputs a step refers to, if any of them is in the store; else None."""
    if not any(is_stored(outputs.get(sid)) for sid in referenced):
        return None
    return {sid: outputs[sid] for sid in referenced if sid in outputs}


def _cause_message(exc: ActivityError) -> str:
    cause = exc.cause
    while cause is not None and not isinstance(cause, ApplicationError) and cause.cause is not None:
        cause = cause.cause
    if cause is None:
        return str(exc)
    if isinstance(exc.cause, TemporalTimeoutError):
        return _TIMEOUTS.get(exc.cause.type, "timed out") if exc.cause.type else "timed out"
    return cause.message if isinstance(cause, ApplicationError) else str(cause)


_TIMEOUTS = {
    TimeoutType.START_TO_CLOSE: "timed out: an attempt took longer than its time limit",
    TimeoutType.HEARTBEAT: "timed out: the worker running it stopped reporting (it crashed or is stuck)",
    TimeoutType.SCHEDULE_TO_CLOSE: "timed out: no attempt finished in the time allowed",
}


def _failure_details(exc: ActivityError) -> dict[str, Any]:
    """What the failed activity reported (activities/errors.py), or, if it timed out, its last checkpoint."""
    cause = exc.cause
    details: Any = None
    if isinstance(cause, ApplicationError) and cause.details:
        details = cause.details[0]
    elif isinstance(cause, TemporalTimeoutError) and cause.last_heartbeat_details:
        details = cause.last_heartbeat_details[0]
    return details if isinstance(details, dict) else {}


def _cause_type(exc: ActivityError) -> str | None:
    return exc.cause.type if isinstance(exc.cause, ApplicationError) else None


def _cause_detail(exc: ActivityError, key: str, model: Any) -> list[Any]:
    """Records an activity reported with its failure (`key` of its details), as `model`s."""
    return [model.model_validate(item) for item in _failure_details(exc).get(key) or []]


def _cause_attempts(exc: ActivityError, max_attempts: int) -> int:
    attempt = _failure_details(exc).get("attempt")
    return attempt if isinstance(attempt, int) else max_attempts
