"""Client helpers: connect with the right data converter, start runs, and send decisions."""

from __future__ import annotations

import asyncio
import functools
import getpass
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.client import (
    Client,
    WorkflowHandle,
    WorkflowHistory,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.common import TypedSearchAttributes, WorkflowIDReusePolicy
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.runtime import LoggingConfig, Runtime, TelemetryConfig, TelemetryFilter
from temporalio.service import RPCError, RPCStatusCode

from stratagem.common.config import Settings
from stratagem.common.errors import DecisionRefusedError, RunAlreadyStartedError, RunUnresponsiveError, StratagemError
from stratagem.common.signing import AUTO_APPROVE_KIND, Keyring, Signer
from stratagem.common.workflow_errors import execute_decision
from stratagem.domain import handlers
from stratagem.domain.catalog import ToolCatalog
from stratagem.domain.decisions import Kind, kinds
from stratagem.domain.ledger import EventArchive, Ledger, LedgerEvent
from stratagem.domain.plan import AuthorKind, Plan
from stratagem.domain.process import ProcessRun, render_goal, run_values
from stratagem.domain.run_types import (
    WORKFLOW_NAME,
    AnswerInput,
    ApproveInput,
    AutoApproval,
    BudgetInput,
    DecisionInput,
    DecisionOutcome,
    EventPage,
    EventsQuery,
    PendingDecision,
    RejectInput,
    RepairInput,
    ReviseInput,
    RunInput,
    RunResult,
    RunStatus,
    start_digest,
)
from stratagem.effect_decisions import EffectDecisions
from stratagem.event_stream import POLL_SECONDS, stream_events
from stratagem.io.store import OutputStore, default_store, load_value
from stratagem.run_queries import NO_WORKER, RunQueries

# Where they always were, for callers: the attribute lives in stratagem.status_attribute.
from stratagem.status_attribute import AWAITING_QUERY as AWAITING_QUERY
from stratagem.status_attribute import PROCESS_KEY as PROCESS_KEY
from stratagem.status_attribute import REGISTER_STATUS_HINT as REGISTER_STATUS_HINT
from stratagem.status_attribute import STATUS_KEY as STATUS_KEY
from stratagem.status_attribute import ensure_status_attribute as ensure_status_attribute
from stratagem.status_attribute import has_process_attribute as has_process_attribute
from stratagem.status_attribute import has_status_attribute as has_status_attribute
from stratagem.status_attribute import start_attributes
from stratagem.temporal.plugin import StratagemPlugin


@functools.cache
def quiet_runtime() -> Runtime:
    """A Temporal runtime whose core logs only errors: no WARN lines such as
    "temporalio_client::retry ... tcp connect error" on a terminal. Created once per process,
    as a runtime must be."""
    return Runtime(
        telemetry=TelemetryConfig(
            logging=LoggingConfig(filter=TelemetryFilter(core_level="ERROR", other_level="ERROR"))
        )
    )


async def connect(settings: Settings | None = None, *, runtime: Runtime | None = None, quiet: bool = False) -> Client:
    """A client with Stratagem's data converter: the pydantic converter, encrypting payloads and
    failure messages when the settings carry an encryption key (STRATAGEM_ENCRYPTION_KEY; see
    `stratagem.io.codec`). A malformed key raises ConfigError. `runtime` defaults to the SDK's;
    `quiet=True` uses `quiet_runtime()` (for command-line tools, where the core's warnings are noise)."""
    settings = settings or Settings.from_env()
    plugin = StratagemPlugin.for_settings(settings)
    if runtime is None and quiet:
        runtime = quiet_runtime()
    return await Client.connect(
        settings.address, namespace=settings.namespace, plugins=[plugin], runtime=runtime, **settings.connect_options()
    )


# A decision the server admitted waits for a worker: one that comes up later may still apply it.
MAY_STILL_APPLY = "(it may still take effect once one does; check the run before deciding again)"


def new_run_id() -> str:
    return f"run-{uuid.uuid4().hex[:12]}"


class RunHandle(EffectDecisions, RunQueries):
    """A handle on one run, with typed decisions and queries. `rpc_timeout` bounds each
    decision and query (None: the SDK's defaults). `store` is where a long run's archived
    events are read from (default: the configured output store, as workers use)."""

    def __init__(
        self,
        handle: WorkflowHandle,
        *,
        rpc_timeout: timedelta | None = None,
        store: OutputStore | None = None,
        signer: Signer | None = None,
        keyring: Keyring | None = None,
    ):
        self.handle = handle
        self.rpc_timeout = rpc_timeout
        self.store = store
        # Signs every decision (stratagem.common.signing): this key; else the one in STRATAGEM_SIGNING_KEY;
        # else the deciding person's key in `keyring` (default: the home's), made on first use.
        self.signer = signer
        self.keyring = keyring
        # The run's first execution, which a signature covers (asked once, when first needed).
        self._execution = handle.first_execution_run_id

    async def _archived(self, archive: EventArchive) -> list[LedgerEvent]:
        store = self.store or default_store()
        data = await asyncio.to_thread(load_value, store, archive.stored)
        return [LedgerEvent.model_validate(event) for event in data]

    @property
    def id(self) -> str:
        return self.handle.id

    async def approve(self, decision: ApproveInput) -> DecisionOutcome:
        return await self.decide(kinds.APPROVE, decision)

    async def reject(self, decision: RejectInput) -> DecisionOutcome:
        return await self.decide(kinds.REJECT, decision)

    async def revise(self, decision: ReviseInput) -> DecisionOutcome:
        return await self.decide(kinds.REVISE, decision)

    async def answer(self, answer: AnswerInput) -> DecisionOutcome:
        return await self.decide(kinds.ANSWER, answer)

    async def budget(self, decision: BudgetInput) -> DecisionOutcome:
        """Raise the run's budget, or stop a run waiting on it."""
        return await self.decide(kinds.BUDGET, decision)

    async def repair(self, decision: RepairInput) -> DecisionOutcome:
        """Retry a failed step (with new arguments if given), skip it with an output, or stop the run."""
        return await self.decide(kinds.REPAIR, decision)

    async def decide(self, kind: Kind, decision: DecisionInput) -> DecisionOutcome:
        """Send a decision of `kind` (stratagem.domain.decisions.KINDS) as its update, signed
        (`decision_signer`) unless it already is. A refusal raises DecisionRefusedError with the
        run's reason. The methods above are this, each with its kind."""
        update = kind.update
        if decision.signature is None:
            signer = decision_signer(decision.by, self.signer, self.keyring)
            decision = signer.sign(self.id, update, decision, await self.execution())
        try:
            return await execute_decision(
                self.handle, update, decision, result_type=DecisionOutcome, rpc_timeout=self.rpc_timeout
            )
        except WorkflowUpdateFailedError as exc:
            cause = exc.cause
            reason = cause.message if isinstance(cause, ApplicationError) else str(cause or exc)
            raise DecisionRefusedError(f"run {self.id} refused the decision: {reason}") from None
        except WorkflowUpdateRPCTimeoutOrCancelledError:
            raise self._untaken() from None
        except RPCError as exc:
            # A decision in flight as the run ends is aborted by the server: NOT_FOUND.
            if exc.status is RPCStatusCode.NOT_FOUND:
                raise DecisionRefusedError(await self._gone()) from None
            if exc.status is RPCStatusCode.DEADLINE_EXCEEDED:
                raise self._untaken() from None
            raise

    async def execution(self) -> str | None:
        """The run's first run id, which every signed decision covers: known to a handle that
        started the run, asked once of Temporal otherwise (None: there is no such run)."""
        if self._execution is None:
            try:
                description = await self.handle.describe(rpc_timeout=self.rpc_timeout)
            except RPCError:
                return None
            info = description.raw_description.workflow_execution_info
            self._execution = info.first_run_id or None
            if self._execution is None:  # a server that does not say: the first event of the history does
                async for event in self.handle.fetch_history_events():
                    started = event.workflow_execution_started_event_attributes
                    self._execution = started.first_execution_run_id or description.run_id
                    break
        return self._execution

    def _untaken(self) -> RunUnresponsiveError:
        return RunUnresponsiveError(f"run {self.id} did not take the decision in time: {NO_WORKER} {MAY_STILL_APPLY}")

    async def _gone(self) -> str:
        """Why a run takes no decisions: it ended (and how), or there is no such run."""
        try:
            description = await self.handle.describe()
        except RPCError:
            return f"there is no run {self.id} (see `stratagem list`)"
        status = description.status.name.lower() if description.status else "closed"
        return f"run {self.id} has ended ({status}); it takes no decisions"

    async def status(self) -> RunStatus:
        return await self._query(handlers.STATUS, RunStatus)

    async def plan(self) -> Plan | None:
        return await self._query(handlers.PLAN, Plan | None)

    async def catalog(self) -> ToolCatalog | None:
        """The run's tools as its worker declared them (their risk, whether they need approval);
        None from a worker that does not answer this query (older than level 4)."""
        try:
            catalog: ToolCatalog = await self._query(handlers.CATALOG, ToolCatalog)
        except RunUnresponsiveError:
            raise  # not an old worker: nobody answered
        except StratagemError:
            return None
        return catalog

    async def ledger(self) -> Ledger:
        """The whole ledger, archived events read back from the store."""
        ledger: Ledger = await self._query(handlers.LEDGER, Ledger)
        if not ledger.archives:
            return ledger
        archived = [event for archive in ledger.archives for event in await self._archived(archive)]
        return ledger.with_events(archived)

    async def pending(self) -> list[PendingDecision]:
        return await self._query(handlers.PENDING, list[PendingDecision])

    async def events(self, after: int = 0, limit: int = 500) -> EventPage:
        """The progress stream: events with seq above `after`, oldest first."""
        page: EventPage = await self._query(handlers.EVENTS, EventPage, EventsQuery(after=after, limit=limit))
        if not page.archives:
            return page
        # Archives hold the routine events of a seq range; the run still holds the rest. Merged
        # by seq, the first `limit` are exactly the events the page stands for.
        merged = list(page.events)
        for archive in page.archives:
            merged += [e for e in await self._archived(archive) if e.seq > after]
            if sum(1 for e in merged if e.seq <= archive.last_seq) >= limit:
                break  # later archives hold only later events
        merged.sort(key=lambda e: e.seq)
        return EventPage(events=merged[:limit], last_seq=page.last_seq, phase=page.phase)

    def stream(self, after: int = 0, *, poll: float = POLL_SECONDS) -> AsyncIterator[LedgerEvent]:
        """Each event after seq `after`, in order, as the run records it, until it ends: event_stream."""
        return stream_events(self.events, after, poll=poll, run_id=self.id)

    async def result(self) -> RunResult:
        return await self.handle.result()

    async def cancel(self) -> None:
        await self.handle.cancel()


def decision_signer(by: str, signer: Signer | None = None, keyring: Keyring | None = None) -> Signer:
    """The key a decision by `by` is signed with: `signer`; else STRATAGEM_SIGNING_KEY's; else
    `by`'s own key in `keyring` (default: the home's), made the first time they decide."""
    return signer or Signer.from_env() or (keyring or Keyring.of_home()).signer(by)


def sign_auto_approval(
    run: RunInput,
    run_id: str,
    *,
    signer: Signer | None = None,
    keyring: Keyring | None = None,
    by: str | None = None,
    now: datetime | None = None,
) -> RunInput:
    """`run` with its auto_approve signed, for exactly this input and run id, now (`now`: the
    server's clock where it differs, as on the time-skipping test server). `by`: who lets it
    approve itself (default: the key's name, else the plan's author, else the login)."""
    configured = signer or Signer.from_env()
    if by is None:
        if configured is not None:
            by = configured.name
        elif run.author is not None and run.author.kind is AuthorKind.human:
            by = run.author.name
        else:
            by = getpass.getuser()
    key = configured or (keyring or Keyring.of_home()).signer(by)
    unsigned = AutoApproval(by=by, digest=start_digest(run), signed_at=now or datetime.now(UTC))
    return run.model_copy(update={"auto_approval": key.sign(run_id, AUTO_APPROVE_KIND, unsigned)})


async def execution_histories(client: Client, run_id: str) -> list[WorkflowHistory]:
    """The history of every execution of a run, oldest first: a run that continued as new
    has several, linked from each to the one before."""
    histories: list[WorkflowHistory] = []
    handle = client.get_workflow_handle(run_id)
    while True:
        history = await handle.fetch_history()
        histories.insert(0, history)
        started = history.events[0].workflow_execution_started_event_attributes
        if not started.continued_execution_run_id:
            return histories
        handle = client.get_workflow_handle(run_id, run_id=started.continued_execution_run_id)


async def run_input_of(client: Client, run: RunHandle) -> RunInput:
    """What the run's current execution was started with (its options, and after a continue-as-new
    its carried state), read from its history through the client's converter (and codec)."""
    history = await run.handle.fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes
    [decoded] = await client.data_converter.decode(started.input.payloads, [RunInput])
    return decoded  # type: ignore[no-any-return]


async def start_run(
    client: Client,
    run: RunInput,
    *,
    task_queue: str,
    run_id: str | None = None,
    memo: dict[str, Any] | None = None,
    rpc_timeout: timedelta | None = None,
    signer: Signer | None = None,
    keyring: Keyring | None = None,
    signed_at: datetime | None = None,
    reuse_id: bool = True,
) -> RunHandle:
    """Start a run. The goal goes into the memo (for listings) and the Temporal UI's summary,
    with the run's approver list where it has one (the console's "I can decide" reads it), and
    for a run of a process the process's name and version. Where the namespace has the
    StratagemStatus search attribute, the run keeps its status there (`stratagem list --status
    awaiting-approval` queries it); where it has StratagemProcess, a process's runs carry its name
    (`stratagem list --process`). `rpc_timeout`: the handle's (RunHandle). A run that approves
    itself (`auto_approve`) starts signed by the person who lets it (`sign_auto_approval`, with
    `signer` or `keyring`), unless it already is. `reuse_id=False`: an id a closed run had is
    refused too (RunAlreadyStartedError), so a start repeated later starts nothing twice."""
    workflow_id = run_id or run.run_id or new_run_id()
    goal = run.goal or (run.plan.goal if run.plan else "") or (process_goal(run.process) if run.process else "")
    run, pairs = await start_attributes(client, run)
    if run.state is None and run.options.auto_approve and run.auto_approval is None:
        run = sign_auto_approval(run, workflow_id, signer=signer, keyring=keyring, now=signed_at)
    try:
        handle = await client.start_workflow(
            WORKFLOW_NAME,
            run,
            id=workflow_id,
            task_queue=task_queue,
            result_type=RunResult,
            memo={**run_memo(run, goal), **(memo or {})},
            static_summary=f"Stratagem: {goal}"[:400],
            search_attributes=TypedSearchAttributes(pairs) if pairs else None,
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE
            if reuse_id
            else WorkflowIDReusePolicy.REJECT_DUPLICATE,
        )
    except WorkflowAlreadyStartedError:
        if reuse_id:
            message = f"a run with id '{workflow_id}' is already running; choose another id"
        else:
            message = f"a run with id '{workflow_id}' was already started"
        raise RunAlreadyStartedError(message, workflow_id) from None
    return RunHandle(handle, rpc_timeout=rpc_timeout, signer=signer, keyring=keyring)


def run_memo(run: RunInput, goal: str) -> dict[str, Any]:
    """What a run's memo starts with: its goal, its approver list, its process."""
    return {"goal": goal, **_approvers(run), **_process(run)}


def process_goal(process: ProcessRun, now: datetime | None = None) -> str:
    """The goal a run of `process` will have, for its memo and summary: rendered from its inputs
    at `now` (default: this moment), as the run renders it from its own start; the template's
    goal where the inputs do not check (the run then says why)."""
    values, problems = run_values(process.spec, process.inputs, now or datetime.now(UTC), process.time_zone)
    return process.spec.goal if problems else render_goal(process.spec, values)


def _process(run: RunInput) -> dict[str, Any]:
    """Which process a run renders, for listings (`stratagem list --process` without the search attribute)."""
    if run.process is None:
        return {}
    return {"process": {"name": run.process.spec.name, "version": run.process.spec.version}}


def _approvers(run: RunInput) -> dict[str, Any]:
    """The run's approver list for listings (the console's "I can decide"), which read memos only."""
    approvers = run.options.approvers
    return {"approvers": list(approvers)} if approvers is not None else {}


def get_run(client: Client, run_id: str, *, rpc_timeout: timedelta | None = None) -> RunHandle:
    return RunHandle(client.get_workflow_handle(run_id, result_type=RunResult), rpc_timeout=rpc_timeout)
