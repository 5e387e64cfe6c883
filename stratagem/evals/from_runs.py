"""An eval set from the runs a namespace recorded: each run's goal, with the plan people
approved as its reference and the run's own tool catalogue (`stratagem eval --from-runs`).

What a run decided lives in its state (`RunState`: the ledger's revisions and approvals, the
catalogue it read at its start), and a closed run's state is nowhere but in its history: a query
would need a worker to replay it. So this replays each history here, as `stratagem show` has a
closed run's workflow replayed by the command's own host, but without a worker on any task
queue: Temporal's Replayer runs the workflow code over the history in this process, configured
as the workers are (StratagemPlugin: the client's converter and codec, the decision checks), and
the state is read from the replayed workflow. Nothing is asked of a worker, nothing is sent to
the run, and a run whose history does not replay here (another encryption key, decisions signed
with keys this process does not trust, a payload it cannot read) is skipped with the reason.

A history is written by whoever could start runs, so it is read as untrusted: visibility is
paged and capped, a history longer than MAX_HISTORY_EVENTS is not read, a history with no
approval in it is not replayed at all, everything replayed is decoded through the pydantic
models, and a case that does not validate is skipped, with every skip counted by its reason.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowExecution, WorkflowHistory
from temporalio.service import RPCError
from temporalio.worker import (
    ExecuteWorkflowInput,
    Interceptor,
    Replayer,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)

from stratagem.common.errors import StratagemError
from stratagem.common.signing import APPROVER_KEYS_ENV, ISSUER_KEYS_ENV
from stratagem.domain.decisions import kinds
from stratagem.domain.ledger import EventKind
from stratagem.domain.plan import PlanDraft
from stratagem.domain.run_state import Phase, RunState
from stratagem.domain.run_types import WORKFLOW_NAME
from stratagem.evals.cases import EvalCase, EvalSet
from stratagem.temporal.plugin import StratagemPlugin
from stratagem.workflows import StratagemRun

# How a person's decision reaches a run. The run's own approvals (auto_approve, a replan under
# `replan_requires_approval: false`, a standing approval, an approval carried to an unchanged
# revision) come `via` auto, policy, standing or carried: nobody looked at that plan.
BY_A_PERSON = frozenset({"update", "signal"})
# Runs looked at per case asked for: enough to pass over runs nobody approved, bounded however
# many the namespace holds.
SCAN_PER_CASE = 10
PAGE_SIZE = 100
# A longer history is not read: its replay would cost seconds (a run that continues as new at
# Temporal's suggestion stays well under this).
MAX_HISTORY_EVENTS = 10_000

_APPROVALS = frozenset({kinds.APPROVE.update, kinds.APPROVE.signal})


async def set_from_runs(client: Client, *, query: str | None = None, limit: int = 50) -> EvalSet:
    """The runs matching `query` (a visibility query; default: every run) that had a plan
    approved, newest first, at most `limit`. Raises StratagemError (one line) when none has.

    Newest first is visibility's order, as `stratagem list` shows runs: those still going,
    newest started first, then those that ended, latest ended first."""
    if limit < 1:
        raise StratagemError(f"the number of runs to read must be at least 1, not {limit}")
    query = (query or "").strip() or None
    # A run that continued as new leaves closed executions behind: each run is read once, from
    # its latest execution, whose state carries the earlier ones' (as `stratagem list` lists).
    listed = f"WorkflowType = '{WORKFLOW_NAME}' AND ExecutionStatus != 'ContinuedAsNew'"
    if query:
        listed += f" AND ({query})"
    where = f"runs in {client.namespace}" + (f" matching {query}" if query else "")
    reader = _Reader(client)
    cases: list[EvalCase] = []
    skipped: Counter[str] = Counter()
    seen: set[str] = set()
    try:
        async for execution in client.list_workflows(listed, limit=limit * SCAN_PER_CASE, page_size=PAGE_SIZE):
            if execution.id in seen:  # an id reused: its newest run is the one listed first
                continue
            seen.add(execution.id)
            read = await reader.read(execution)
            if isinstance(read, EvalCase):
                cases.append(read)
                if len(cases) == limit:
                    break
            else:
                skipped[read] += 1
    except RPCError as exc:
        raise StratagemError(f"cannot list the {where}: {_one_line(exc.message)}") from None
    if not cases:
        raise StratagemError(none_qualified(where, len(seen), skipped))
    return EvalSet(name=where, cases=cases)


def none_qualified(where: str, looked: int, skipped: Counter[str]) -> str:
    """The one line that says why no run made a case."""
    if not looked:
        return f"there are no {where}"
    why = ", ".join(f"{count} {reason}" for reason, count in skipped.most_common(6))
    if len(skipped) > 6:
        why += ", ..."
    runs = "1 run" if looked == 1 else f"{looked} runs"
    return f"none of the {where} had a plan approved by a person ({runs} looked at: {why})"


def unapproved(phase: Phase | None, status: str | None = None) -> str:
    """Why a run makes no case, by where it stands."""
    if phase is Phase.rejected:
        return "rejected"
    if phase is Phase.awaiting_approval:
        return "still awaiting approval"
    if phase is Phase.planning:
        return "still planning"
    if phase is not None:
        return f"{phase.value} without a person's approval"
    return f"{status or 'ended'} without a person's approval"


def first_approved(state: RunState) -> PlanDraft | None:
    """The first revision a person approved (a quorum's last approval approves it), as a draft."""
    for event in state.ledger.events:
        if event.kind is not EventKind.plan_approved or event.revision is None:
            continue
        if getattr(event.details, "via", None) not in BY_A_PERSON:
            continue
        try:
            plan = state.ledger.revision(event.revision)
        except KeyError:
            return None
        return PlanDraft.model_validate({name: getattr(plan, name) for name in PlanDraft.model_fields})
    return None


@dataclass
class _Reader:
    """Reads one listed run into a case, or says why it makes none."""

    client: Client

    def __post_init__(self) -> None:
        self._capture = _Capture()
        self._replayer = Replayer(
            workflows=[StratagemRun],
            plugins=[StratagemPlugin(self.client.data_converter)],
            interceptors=[self._capture],
            # The client's runtime: a command line's is quiet (stratagem.client.quiet_runtime), and a
            # history whose input is no run fails its task in the replay with a warning otherwise.
            runtime=self.client.service_client.config.runtime,
        )

    async def read(self, execution: WorkflowExecution) -> EvalCase | str:
        events = await self._events(execution)
        if isinstance(events, str):
            return events
        if not _may_be_approved(events):
            return unapproved(await _memo_phase(execution), _status(execution))
        history = WorkflowHistory(execution.id, events)
        try:
            result = await self._replayer.replay_workflow(history, raise_on_replay_failure=False)
        except Exception as exc:  # a history the replayer cannot even take
            return f"not readable here ({_first_line(exc)})"
        instance = self._capture.seen.pop(execution.id, None)
        if result.replay_failure is not None:
            return _not_replayable(result.replay_failure)
        state = getattr(instance, "state", None)
        if not isinstance(state, RunState):
            return "not replayable here (its workflow does not start from its input)"
        try:
            reference = first_approved(state)
            if reference is None:
                return unapproved(state.phase)
            return EvalCase(id=execution.id, goal=state.goal, reference=reference, catalog=state.catalog)
        except (ValidationError, ValueError, TypeError) as exc:
            return f"malformed ({_first_line(exc)})"

    async def _events(self, execution: WorkflowExecution) -> list[HistoryEvent] | str:
        """The execution's history, or why it is not read."""
        if execution.history_length > MAX_HISTORY_EVENTS:
            return f"too long to read (over {MAX_HISTORY_EVENTS:,} events)"
        handle = self.client.get_workflow_handle(execution.id, run_id=execution.run_id)
        events: list[HistoryEvent] = []
        try:
            async for event in handle.fetch_history_events(page_size=1000):
                events.append(event)
                if len(events) > MAX_HISTORY_EVENTS:  # visibility's count lags a run still going
                    return f"too long to read (over {MAX_HISTORY_EVENTS:,} events)"
        except RPCError as exc:
            return f"not readable ({_one_line(exc.message)})"
        return events or "not readable (an empty history)"


def _may_be_approved(events: list[HistoryEvent]) -> bool:
    """Whether a person's approval may be in this execution: an approve update the run accepted
    (a refused one leaves no trace), an approve signal (which the run may still have ignored), or
    a state carried from the execution before. Without any, no replay is needed to say no."""
    if events[0].event_type != EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
        return False
    if events[0].workflow_execution_started_event_attributes.continued_execution_run_id:
        return True
    for event in events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
            if event.workflow_execution_update_accepted_event_attributes.accepted_request.input.name in _APPROVALS:
                return True
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            if event.workflow_execution_signaled_event_attributes.signal_name in _APPROVALS:
                return True
    return False


async def _memo_phase(execution: WorkflowExecution) -> Phase | None:
    """The phase the run last wrote into its memo (None: it wrote none, or it cannot be read here)."""
    try:
        memo: dict[str, Any] = dict(await execution.memo())
        return Phase(memo.get("phase"))
    except Exception:  # another encryption key, or a value that is no phase
        return None


def _status(execution: WorkflowExecution) -> str | None:
    return execution.status.name.lower().replace("_", " ") if execution.status is not None else None


def _not_replayable(failure: BaseException) -> str:
    if "nondeterminism" in str(failure).lower():
        # A signal the workers took that this process's keys refuse, or code that decides otherwise.
        return (
            f"not replayable here (it decides otherwise without the workers' keys: set {APPROVER_KEYS_ENV} "
            f"and {ISSUER_KEYS_ENV} as they have them; or it ran other workflow code)"
        )
    return f"not replayable here ({_first_line(failure)})"


def _first_line(exc: BaseException) -> str:
    return _one_line(str(exc)) or type(exc).__name__


def _one_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0][:200] if lines else ""


class _Capture(Interceptor):
    """Keeps each replayed run workflow, by workflow id, so its state is read once the replay ends."""

    def __init__(self) -> None:
        self.seen: dict[str, Any] = {}
        self._inbound = type("CaptureInbound", (_CaptureInbound,), {"seen": self.seen})

    def workflow_interceptor_class(self, input: WorkflowInterceptorClassInput) -> type[WorkflowInboundInterceptor]:
        return self._inbound


class _CaptureInbound(WorkflowInboundInterceptor):
    seen: dict[str, Any]

    async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
        self.seen[workflow.info().workflow_id] = workflow.instance()
        return await super().execute_workflow(input)
