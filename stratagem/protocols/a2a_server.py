"""`stratagem a2a`: the process library as an A2A agent (a2a-sdk, protocol 1.0 and 0.3's names).

A message starts a run: a data part `{"process": NAME, "version"?: V, "inputs": {...}}`, or,
where the server has a planner, a goal as text. The task is the run (its id is the run id,
chosen before it starts), read from Temporal on every call (stratagem.protocols.a2a_tasks): no
executor, no task store, nothing in memory, so a restarted server finds every task. A follow-up
message on a task carries a decision, `{"decision": "approve", ...}`
(stratagem.protocols.decisions), decided as the person whose console token made the call and
signed with the server's issuer key, as the console signs: the run's approver rules decide
whether that person may. Every route but the agent card needs `Authorization: Bearer <console
token>` (stratagem.protocols.access.Tokens, read again on every call). docs/protocols.md is the
guide.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from datetime import timedelta
from typing import Any

import uvicorn
from a2a.helpers import get_data_parts, get_text_parts
from a2a.server.context import ServerCallContext
from a2a.server.events import Event
from a2a.server.request_handlers import RequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    InvalidParamsError,
    InvalidRequestError,
    ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskNotCancelableError,
    TaskNotFoundError,
    TaskPushNotificationConfig,
    UnsupportedOperationError,
)
from a2a.utils.errors import ExtendedAgentCardNotConfiguredError, InternalError, PushNotificationNotSupportedError
from pydantic import ValidationError
from starlette.applications import Starlette
from temporalio.client import Client

from stratagem.client import RunHandle, new_run_id, start_run
from stratagem.common.errors import DecisionRefusedError, RunAlreadyStartedError, StratagemError
from stratagem.common.signing import Signer
from stratagem.domain.process import ProcessSpec
from stratagem.domain.run_options import RunOptions
from stratagem.domain.run_types import RunInput
from stratagem.io.process_library import ProcessLibrary, ProcessNotFound
from stratagem.process_runs import InputsRefusedError, start_process
from stratagem.protocols import one_line
from stratagem.protocols.a2a_auth import person_of, token_middleware
from stratagem.protocols.a2a_card import agent_card
from stratagem.protocols.a2a_tasks import FINAL, MEMO_KEY, UNSETTLED, RunTask, find, plain
from stratagem.protocols.access import Tokens
from stratagem.protocols.decisions import DecisionPayloadError, decision_of

# Each query and decision sent to a run waits this long (as the console's pages do).
RUN_TIMEOUT = timedelta(seconds=10)
# A blocking message/send returns once the task needs a person or has ended, or after this long.
SEND_WAIT_SECONDS = 60.0
POLL_SECONDS = 0.3
MAX_GOAL_CHARS = 8000
MAX_CONTEXT_ID = 200
START_FIELDS = {"process", "version", "inputs"}


class RunsRequestHandler(RequestHandler):
    """A2A's methods over Stratagem runs; see the module's docstring."""

    def __init__(
        self,
        client: Client,
        *,
        signer: Signer,
        library: ProcessLibrary,
        task_queue: str,
        options: RunOptions,
        run_timeout: timedelta = RUN_TIMEOUT,
    ):
        self.client = client
        self.signer = signer
        self.library = library
        self.task_queue = task_queue
        self.options = options  # the operator's, for every run it starts; never a caller's
        self.run_timeout = run_timeout

    async def _find(self, run_id: str) -> RunTask:
        return await find(self.client, run_id, rpc_timeout=self.run_timeout)

    async def _named(self, message: Message) -> RunTask:
        """The task a follow-up message names; a new task's id is never the client's to choose."""
        try:
            return await self._find(message.task_id)
        except TaskNotFoundError as exc:
            raise TaskNotFoundError(
                message=f"{exc.message}: a new task's id is the run's, chosen by this server; "
                "send the message without a task id to start one"
            ) from None

    # ------------------------------------------------------------------ messages

    async def _start(self, message: Message, person: str) -> RunTask:
        """Start the run `message` asks for, as `person`. Its task id is the run id, chosen here."""
        context_id = message.context_id or ""
        if len(context_id) > MAX_CONTEXT_ID:
            raise InvalidParamsError(message=f"a context id takes at most {MAX_CONTEXT_ID} characters")
        run_id = new_run_id()
        context_id = context_id or run_id
        memo = {MEMO_KEY: {"context_id": context_id, "started_by": person}}
        data = [part for part in get_data_parts(message.parts) if isinstance(part, dict)]
        texts = [text for text in get_text_parts(message.parts) if text.strip()]
        try:
            if data:
                run = await self._start_process(plain(data[0]), person, run_id, memo)
            elif texts:
                run = await self._start_goal("\n".join(texts), person, run_id, memo)
            else:
                raise InvalidParamsError(message='a message needs a data part {"process": NAME, "inputs": {...}}')
        except ValidationError as exc:  # the run's own refusal: a process that plans its goal, no planner
            raise InvalidParamsError(message=str(exc.errors()[0]["msg"]).removeprefix("Value error, ")) from None
        except RunAlreadyStartedError as exc:
            raise InternalError(message=str(exc)) from None
        run.signer = self.signer
        return RunTask(run=run, context_id=context_id, running=True, started_by=person)

    async def _start_process(
        self, request: dict[str, Any], person: str, run_id: str, memo: dict[str, Any]
    ) -> RunHandle:
        unknown = sorted(set(request) - START_FIELDS)
        if unknown or not isinstance(request.get("process"), str):
            raise InvalidParamsError(
                message='a message starts a run with a data part {"process": NAME, "version": V (optional), '
                '"inputs": {...}}' + (f"; unknown: {', '.join(unknown)[:200]}" if unknown else "")
            )
        inputs = request.get("inputs", {})
        if not isinstance(inputs, dict):
            raise InvalidParamsError(message="'inputs' must be an object of the process's inputs")
        version = request.get("version")
        spec = self._spec(request["process"], None if version is None else str(version))
        try:
            return await start_process(
                self.client,
                spec,
                inputs,
                task_queue=self.task_queue,
                options=self.options,
                run_id=run_id,
                started_by=person,
                once=True,
                memo=memo,
            )
        except InputsRefusedError as exc:  # every problem, each in one line
            lines = [f"{spec.label} refused its inputs:", *(one_line(p) for p in exc.problems)]
            raise InvalidParamsError(message="\n".join(lines), data={"problems": exc.problems}) from None

    def _spec(self, name: str, version: str | None) -> ProcessSpec:
        try:
            return self.library.get(name, version)
        except ProcessNotFound:
            known = ", ".join(self.library.names()[:20]) or "none"
            which = f"{name[:64]!r}" + (f" version {version[:32]!r}" if version else "")
            raise InvalidParamsError(message=f"no process {which} (processes: {known})") from None

    async def _start_goal(self, goal: str, person: str, run_id: str, memo: dict[str, Any]) -> RunHandle:
        if not self.options.planner:
            raise InvalidParamsError(
                message='this agent runs processes only: send a data part {"process": NAME, "inputs": {...}} '
                "(a goal as text needs a planner: stratagem a2a --planner MODEL)"
            )
        if len(goal) > MAX_GOAL_CHARS:
            raise InvalidParamsError(message=f"a goal takes at most {MAX_GOAL_CHARS} characters")
        run = RunInput(goal=goal, started_by=person, options=self.options)
        return await start_run(self.client, run, task_queue=self.task_queue, run_id=run_id, memo=memo, reuse_id=False)

    async def _decide(self, task: RunTask, message: Message, person: str) -> None:
        """Decide, as `person`, on `task`: the message's data part is the decision."""
        data = [part for part in get_data_parts(message.parts) if isinstance(part, dict) and "decision" in part]
        if not data:
            raise InvalidParamsError(
                message=f'task {task.id} takes decisions: a data part {{"decision": "approve", ...}} '
                "(a new run is a message without a task id)"
            )
        try:
            kind, decision = decision_of(plain(data[0]), person)
        except DecisionPayloadError as exc:
            raise InvalidParamsError(message=str(exc)) from None
        task.run.signer = self.signer  # the issuer vouches for the person the token is: the run's rules decide
        try:
            await task.run.decide(kind, decision)
        except DecisionRefusedError as exc:
            text = str(exc)
            raise InvalidRequestError(
                message=text.split(": ", 1)[-1] if "refused the decision" in text else text
            ) from None
        except StratagemError as exc:
            raise InternalError(message=one_line(exc)) from None

    async def on_message_send(self, params: SendMessageRequest, context: ServerCallContext) -> Task | Message:
        person = person_of(context)
        if params.message.task_id:
            task = await self._named(params.message)
            await self._decide(task, params.message, person)
        else:
            task = await self._start(params.message, person)
        if params.HasField("configuration") and params.configuration.return_immediately:
            return await self._read(task)
        return await self._settled(task)

    async def _settled(self, task: RunTask) -> Task:
        """The task once it waits for a person or has ended (or after SEND_WAIT_SECONDS)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SEND_WAIT_SECONDS
        while True:
            read = await self._read(task)
            if read.status.state not in UNSETTLED or loop.time() > deadline:
                return read
            await asyncio.sleep(POLL_SECONDS)

    async def _read(self, task: RunTask) -> Task:
        try:
            return await task.task()
        except StratagemError as exc:
            raise InternalError(message=one_line(exc)) from None

    async def on_message_send_stream(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event]:
        person = person_of(context)
        if params.message.task_id:
            task = await self._named(params.message)
            after = await task.last_seq() if task.running else 0  # an ended run refuses the decision
            await self._decide(task, params.message, person)
            yield await self._read(task)
        else:
            task = await self._start(params.message, person)
            after = 0
            yield task.submitted()
        async for event in self._follow(task, after):
            yield event

    async def _follow(self, task: RunTask, after: int) -> AsyncIterator[Event]:
        try:
            async for event in task.follow(after):
                yield event
        except StratagemError as exc:
            raise InternalError(message=one_line(exc)) from None

    async def on_subscribe_to_task(
        self, params: SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event]:
        person_of(context)
        task = await self._find(params.id)
        first = await self._read(task)
        yield first
        if first.status.state in FINAL:
            return
        async for event in self._follow(task, await task.last_seq()):
            yield event

    # ------------------------------------------------------------------ tasks

    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext) -> Task | None:
        person_of(context)
        return await self._read(await self._find(params.id))

    async def on_cancel_task(self, params: CancelTaskRequest, context: ServerCallContext) -> Task | None:
        person = person_of(context)
        task = await self._find(params.id)
        if task.started_by != person:  # a run is no one else's to stop (the console has no cancel either)
            raise InvalidRequestError(
                message=f"task {task.id} was not started by {person} over A2A: only the person who started it "
                "may cancel it here"
            )
        before = await self._read(task)
        if before.status.state in FINAL:
            raise TaskNotCancelableError(message=f"task {task.id} has ended; it cannot be cancelled")
        await task.run.cancel()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.run_timeout.total_seconds()
        while True:
            read = await self._read(await self._find(params.id))
            if read.status.state in FINAL or loop.time() > deadline:
                return read
            await asyncio.sleep(POLL_SECONDS)

    async def on_list_tasks(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        raise UnsupportedOperationError(message="tasks are not listed here: the console's inbox lists runs")

    async def on_create_task_push_notification_config(
        self, params: TaskPushNotificationConfig, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        raise PushNotificationNotSupportedError

    async def on_get_task_push_notification_config(
        self, params: GetTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        raise PushNotificationNotSupportedError

    async def on_list_task_push_notification_configs(
        self, params: ListTaskPushNotificationConfigsRequest, context: ServerCallContext
    ) -> ListTaskPushNotificationConfigsResponse:
        raise PushNotificationNotSupportedError

    async def on_delete_task_push_notification_config(
        self, params: DeleteTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> None:
        raise PushNotificationNotSupportedError

    async def on_get_extended_agent_card(
        self, params: GetExtendedAgentCardRequest, context: ServerCallContext
    ) -> AgentCard:
        raise ExtendedAgentCardNotConfiguredError


def create_app(
    client: Client,
    *,
    tokens: Tokens,
    signer: Signer,
    library: ProcessLibrary,
    task_queue: str,
    options: RunOptions | None = None,
    public_url: str,
    run_timeout: timedelta = RUN_TIMEOUT,
) -> Starlette:
    """The A2A agent as an ASGI app: the public card, and JSON-RPC at / (1.0 and 0.3 method
    names). The runs it starts take `options` (`stratagem a2a`'s run options: the operator's);
    a goal as text is a skill where they name a planner."""
    chosen = options or RunOptions()
    handler = RunsRequestHandler(
        client, signer=signer, library=library, task_queue=task_queue, options=chosen, run_timeout=run_timeout
    )
    card = agent_card(library, public_url=public_url, planner=bool(chosen.planner))
    routes = create_agent_card_routes(card) + create_jsonrpc_routes(handler, rpc_url="/", enable_v0_3_compat=True)
    return Starlette(routes=routes, middleware=[token_middleware(tokens)])


async def serve(
    client: Client,
    *,
    host: str,
    port: int,
    tokens: Tokens,
    signer: Signer,
    library: ProcessLibrary,
    task_queue: str,
    public_url: str,
    options: RunOptions | None = None,
) -> None:
    """Serve the agent until stopped. proxy_headers off: a peer is its connection's address."""
    app = create_app(
        client,
        tokens=tokens,
        signer=signer,
        library=library,
        task_queue=task_queue,
        options=options,
        public_url=public_url,
    )
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", proxy_headers=False, server_header=False)
    await uvicorn.Server(config).serve()
