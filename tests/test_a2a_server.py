"""`stratagem a2a` (issue #43): the process library as an A2A agent, driven by the a2a-sdk's own
client against a real uvicorn server, the Temporal dev server and a real worker. A process runs
from a message to its result with a person's approval between (through the console, and through
A2A follow-up messages decided as the token's person under the run's own approver rules); a new
server instance finds the task; cancel, an unknown task, both method namings; tokens forged,
missing or removed, a bad payload, each refused with nothing started; run text never in the card.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
import yaml
from a2a.client import (
    AuthInterceptor,
    Client,
    ClientCallContext,
    ClientConfig,
    ClientFactory,
    InMemoryContextCredentialStore,
)
from a2a.helpers import get_data_parts, get_message_text, new_data_part, new_message, new_text_part
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)
from a2a.utils.errors import (
    A2AError,
    InvalidParamsError,
    InvalidRequestError,
    TaskNotCancelableError,
    TaskNotFoundError,
)
from conftest import harness_for
from support.ports import wait_listening
from test_console_attacks import free_port, serving
from test_console_processes import workflows_on

from stratagem.client import get_run
from stratagem.common.signing import Signer
from stratagem.console import AuthMode, IdentityConfig, Users
from stratagem.console import create_app as console_app
from stratagem.domain.activity_io import AwaitedCall
from stratagem.domain.run_options import RunOptions
from stratagem.domain.run_reports import RunStatus, StepCounts
from stratagem.domain.run_state import DecisionKind, PendingDecision, Phase
from stratagem.domain.step_preview import StepPreview
from stratagem.io.process_library import ProcessLibrary
from stratagem.protocols import runs_view
from stratagem.protocols.a2a_server import create_app
from stratagem.protocols.access import Tokens

NOTE = {
    "process": {"name": "note", "version": "1", "description": "Record one note."},
    "inputs": {"label": {"type": "string", "minLength": 2}},
    "goal": "Note ${inputs.label}",
    "steps": [{"id": "note", "title": "Note it", "tool": "record", "args": {"label": "${inputs.label}"}}],
}
PAY = {
    "process": {"name": "pay-supplier", "version": "1", "description": "Pay one supplier an approved amount."},
    "inputs": {
        "supplier": {"type": "string", "minLength": 2},
        "amount": {"type": "integer", "minimum": 1, "maximum": 10000},
    },
    "goal": "Pay ${inputs.supplier}",
    "steps": [
        {
            "id": "pay",
            "title": "Pay ${inputs.supplier}",
            "tool": "pay",
            "args": {"amount": "${inputs.amount}", "to": "${inputs.supplier}"},
            "approvers": ["bob"],  # the step's own rule: only bob may let the payment go
        }
    ],
}
TIMEOUT = 30  # the client's; its default (5 s) also applies between a stream's events


class World:
    def __init__(self, harness: Any, tmp_path: Path, issuer: Signer):
        self.harness = harness
        self.issuer = issuer
        folder = tmp_path / "processes"
        folder.mkdir()
        (folder / "note.yaml").write_text(yaml.safe_dump(NOTE, sort_keys=False))
        (folder / "pay.yaml").write_text(yaml.safe_dump(PAY, sort_keys=False))
        self.folder = folder
        self.library = ProcessLibrary.from_env({"STRATAGEM_HOME": str(tmp_path / "home")}, extra=[folder])
        self.users_file = tmp_path / "console-users.yaml"
        users = Users.load(self.users_file)
        for who in ("alice", "bob", "carol"):
            users.set_password(who, f"{who} horse battery")
        self.tokens = {who: users.new_token(f"{who}-agent", who) for who in ("alice", "bob", "carol")}
        users.save()

    @asynccontextmanager
    async def agent_server(self, options: RunOptions | None = None) -> AsyncIterator[str]:
        """The A2A app under uvicorn on a free loopback port, its card naming that address, as
        `stratagem a2a` serves it (log level warning, no proxy headers)."""
        port = free_port()
        config = uvicorn.Config(
            self.app(f"http://127.0.0.1:{port}", options),
            host="127.0.0.1",
            port=port,
            log_level="warning",
            proxy_headers=False,
        )
        server = uvicorn.Server(config)
        task = asyncio.create_task(server.serve())
        while not server.started:
            await asyncio.sleep(0.05)
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            server.should_exit = True
            await task

    def app(self, public_url: str, options: RunOptions | None = None) -> Any:
        return create_app(
            self.harness.client,
            tokens=Tokens(self.users_file),
            signer=self.issuer,
            library=self.library,
            task_queue=self.harness.task_queue,
            options=options,
            public_url=public_url,
        )

    def console(self) -> Any:
        identity = IdentityConfig(mode=AuthMode.users, secret=b"a2a-test", users=Users.load(self.users_file))
        return console_app(self.harness.client, identity, signer=self.issuer, store=self.harness.store)


@pytest.fixture
async def world(dev_env, tmp_path, monkeypatch) -> AsyncIterator[World]:
    issuer = Signer.generate("console")  # the console's and the A2A server's issuer key, trusted by the worker
    monkeypatch.setenv("STRATAGEM_ISSUER_KEYS", issuer.public_line())
    monkeypatch.setenv("STRATAGEM_PROCESSES", "")
    async with harness_for(dev_env, tmp_path) as harness:
        yield World(harness, tmp_path, issuer)


@asynccontextmanager
async def agent(base: str, token: str, *, streaming: bool = True) -> AsyncIterator[tuple[Client, ClientCallContext]]:
    """The SDK's client, as another agent uses it: the card read, the bearer put on by the SDK's
    AuthInterceptor (from the card's scheme), and a timeout longer than the runs' quiet spells."""
    session = uuid.uuid4().hex
    credentials = InMemoryContextCredentialStore()
    await credentials.set_credentials(session, "bearer", token)
    factory = ClientFactory(ClientConfig(streaming=streaming))
    client = await factory.create_from_url(base, interceptors=[AuthInterceptor(credentials)])
    try:
        yield client, ClientCallContext(state={"sessionId": session}, timeout=TIMEOUT)
    finally:
        await client.close()


def start(process: str, inputs: dict[str, Any], **fields: Any) -> SendMessageRequest:
    message = new_message([new_data_part({"process": process, "inputs": inputs})], role=Role.ROLE_USER, **fields)
    return SendMessageRequest(message=message)


def decision(task_id: str, *, stream: bool = False, **payload: Any) -> SendMessageRequest:
    """A follow-up message deciding on `task_id`; answered at once unless it is streamed."""
    return SendMessageRequest(
        message=new_message([new_data_part(payload)], role=Role.ROLE_USER, task_id=task_id),
        configuration=None if stream else SendMessageConfiguration(return_immediately=True),
    )


def state_of(event: StreamResponse) -> tuple[str, Any]:
    """(the event's kind, its task status or artifact)."""
    kind = event.WhichOneof("payload")
    if kind == "task":
        return kind, event.task.status
    if kind == "status_update":
        return kind, event.status_update.status
    return kind, getattr(event, kind)


def waiting(status: Any) -> list[dict[str, Any]]:
    found = [part["waiting"] for part in get_data_parts(status.message.parts) if "waiting" in part]
    return found[0] if found else []


async def send(client: Client, request: SendMessageRequest, ctx: ClientCallContext) -> Task:
    [event] = [e async for e in client.send_message(request, context=ctx)]
    return event.task


async def decisions_of(harness: Any, run_id: str) -> list[tuple[str, str, str | None]]:
    ledger = await get_run(harness.client, run_id).ledger()
    return [(d.action.value, d.by, d.signed_by) for d in ledger.decisions]


@pytest.mark.system
async def test_a_process_from_its_message_to_its_artifact_approved_in_the_console_across_a_restart(world):
    alice, bob = world.tokens["alice"], world.tokens["bob"]
    async with world.agent_server() as base:
        async with agent(base, alice) as (client, ctx):
            seen: list[tuple[str, int]] = []
            async for event in client.send_message(
                start("note", {"label": "hello a2a"}, context_id="conv-7"), context=ctx
            ):
                kind, status = state_of(event)
                seen.append((kind, status.state))
                if kind == "task":
                    task_id = event.task.id
                    assert event.task.context_id == "conv-7" and task_id.startswith("run-")
                if kind == "status_update":
                    assert event.status_update.metadata["kind"]  # each ledger event, by kind
                if status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
                    [asked] = waiting(status)
                    assert asked["kind"] == "plan_approval" and asked["revision"] == 1
                    break  # the client goes away; the run waits on
    assert seen[0] == ("task", TaskState.TASK_STATE_SUBMITTED)

    # Another server instance: nothing was kept but the run; the task and its context are found.
    async with world.agent_server() as base, agent(base, alice) as (client, ctx):
        got = await client.get_task(GetTaskRequest(id=task_id), context=ctx)
        assert got.status.state == TaskState.TASK_STATE_INPUT_REQUIRED and got.context_id == "conv-7"
        assert waiting(got.status)[0]["kind"] == "plan_approval"
        async with serving(world.console()) as console:
            events = []
            async for event in client.subscribe(SubscribeToTaskRequest(id=task_id), context=ctx):
                kind, body = state_of(event)
                events.append(event)
                if kind == "task":
                    assert body.state == TaskState.TASK_STATE_INPUT_REQUIRED
                    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {bob}"}) as http:
                        approved = await http.post(f"{console}/api/runs/{task_id}/approve", json={"revision": 1})
                        assert approved.status_code == 200, approved.text
    kinds = [e.WhichOneof("payload") for e in events]
    assert kinds[-2:] == ["artifact_update", "status_update"]
    [result] = get_data_parts(events[-2].artifact_update.artifact.parts)
    assert result["status"] == "succeeded" and result["outputs"] == {"note": "hello a2a"}
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    forwarded = [e.status_update.metadata["kind"] for e in events[1:-1] if e.HasField("status_update")]
    assert forwarded[0] == "plan_approved" and forwarded[-1] == "run_succeeded"  # the ledger's events, in order
    assert "step_succeeded" in forwarded
    assert await decisions_of(world.harness, task_id) == [("approve", "bob", "console")]


@pytest.mark.system
async def test_decisions_as_a2a_messages_are_the_token_persons_under_the_runs_own_rules(world):
    alice, bob, carol = (world.tokens[who] for who in ("alice", "bob", "carol"))
    async with world.agent_server() as base, agent(base, alice) as (client, ctx):
        async with agent(base, bob) as (as_bob, bob_ctx):
            async with agent(base, carol, streaming=False) as (as_carol, carol_ctx):
                decided: set[str] = set()
                last = None
                request = start("pay-supplier", {"supplier": "ACME", "amount": 250})
                async for event in client.send_message(request, context=ctx):
                    kind, body = state_of(event)
                    last = event
                    if kind == "task":
                        task_id = event.task.id
                    if kind not in ("task", "status_update") or body.state != TaskState.TASK_STATE_INPUT_REQUIRED:
                        continue
                    [asked] = waiting(body)
                    if asked["kind"] == "plan_approval" and "plan" not in decided:
                        decided.add("plan")  # alice may approve the plan: no rule says otherwise
                        async with agent(base, alice, streaming=False) as (again, again_ctx):
                            as_alice = await send(again, decision(task_id, decision="approve", revision=1), again_ctx)
                        assert as_alice.id == task_id
                    elif asked["kind"] == "step_approval" and "step" not in decided:
                        decided.add("step")
                        assert asked["step_id"] == "pay"
                        assert asked["preview"]["tool"] == "pay"
                        assert asked["preview"]["args"] == {"amount": 250, "to": "ACME"}  # exactly what would run
                        with pytest.raises(InvalidRequestError) as refused:
                            await send(as_carol, decision(task_id, decision="approve", step_id="pay"), carol_ctx)
                        assert str(refused.value) == "carol may not decide on step 'pay': its approvers are bob"
                        assert [d[1] for d in await decisions_of(world.harness, task_id)] == ["alice"]
                        with pytest.raises(InvalidParamsError, match="decided by the person"):
                            await send(
                                as_carol, decision(task_id, decision="approve", step_id="pay", by="bob"), carol_ctx
                            )
                        bobs = decision(task_id, stream=True, decision="approve", step_id="pay")
                        followed = [e async for e in as_bob.send_message(bobs, context=bob_ctx)]  # to the end
                        assert followed[0].task.id == task_id
                        assert [e.WhichOneof("payload") for e in followed[-2:]] == ["artifact_update", "status_update"]
                        assert followed[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    assert decided == {"plan", "step"}
    assert last is not None and last.status_update.status.state == TaskState.TASK_STATE_COMPLETED
    assert await decisions_of(world.harness, task_id) == [
        ("approve", "alice", "console"),
        ("approve", "bob", "console"),
    ]
    result = await get_run(world.harness.client, task_id).result()
    assert result.outputs == {"pay": {"paid": 250, "to": "ACME"}}


def rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def follow_run(world: World, run_id: str) -> None:
    """Let the harness end the run if the test did not, and replay its history."""
    world.harness.runs.append(get_run(world.harness.client, run_id))


@pytest.mark.system
async def test_get_and_cancel_under_both_method_namings_and_what_is_no_task(world):
    alice = world.tokens["alice"]
    async with world.agent_server() as base, agent(base, alice, streaming=False) as (client, ctx):
        task = await send(client, start("note", {"label": "to be cancelled"}), ctx)  # returns once a person is needed
        follow_run(world, task.id)
        assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED and task.context_id == task.id
        async with httpx.AsyncClient(base_url=base, headers=bearer(alice), timeout=TIMEOUT) as http:
            old = (await http.post("/", json=rpc("tasks/get", {"id": task.id}))).json()["result"]  # 0.3's names
            assert old["kind"] == "task" and old["status"]["state"] == "input-required"
            message = {
                "role": "user",
                "messageId": uuid.uuid4().hex,
                "parts": [{"kind": "data", "data": {"process": "note", "inputs": {"label": "by 0.3"}}}],
            }
            sent = (await http.post("/", json=rpc("message/send", {"message": message}))).json()["result"]
            follow_run(world, sent["id"])
            assert sent["status"]["state"] == "input-required"
            gone = (await http.post("/", json=rpc("tasks/cancel", {"id": sent["id"]}))).json()["result"]
            assert gone["status"]["state"] == "canceled"

        async with agent(base, world.tokens["bob"], streaming=False) as (as_bob, bob_ctx):
            with pytest.raises(InvalidRequestError, match="only the person who started it"):
                await as_bob.cancel_task(CancelTaskRequest(id=task.id), context=bob_ctx)
        cancelled = await client.cancel_task(CancelTaskRequest(id=task.id), context=ctx)
        assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
        assert "cancel" in get_message_text(cancelled.status.message)
        async with httpx.AsyncClient(base_url=base, headers=bearer(alice), timeout=TIMEOUT) as http:
            request = rpc("tasks/resubscribe", {"id": task.id})  # 0.3's streaming name: SSE, to the final state
            async with http.stream("POST", "/", json=request) as streamed:
                lines = [line async for line in streamed.aiter_lines() if line.startswith("data:")]
            [only] = [json.loads(line.removeprefix("data:"))["result"] for line in lines]
            assert only["status"]["state"] == "canceled"
        with pytest.raises(TaskNotCancelableError):
            await client.cancel_task(CancelTaskRequest(id=task.id), context=ctx)
        again = await client.get_task(GetTaskRequest(id=task.id), context=ctx)  # read from its history now
        assert again.status.state == TaskState.TASK_STATE_CANCELED
        with pytest.raises(TaskNotFoundError):
            await client.get_task(GetTaskRequest(id="run-000000000000"), context=ctx)
        with pytest.raises(TaskNotFoundError, match="without a task id"):  # the server names new tasks
            await send(client, start("note", {"label": "mine"}, task_id="run-chosen-by-me"), ctx)


@pytest.mark.system
async def test_tokens_forged_missing_or_removed_and_bad_payloads_start_nothing(world):
    alice, carol = world.tokens["alice"], world.tokens["carol"]
    with Users.editing(world.users_file) as users:
        users.remove("carol")  # her token goes with her
    async with world.agent_server() as base:
        for token in ("stg_" + "x" * 43, None, carol):
            async with httpx.AsyncClient(base_url=base, timeout=TIMEOUT) as http:
                raw = await http.post("/", json=rpc("message/send", {}), headers=bearer(token) if token else {})
                assert raw.status_code == 401 and raw.headers["www-authenticate"].startswith("Bearer")
            async with agent(base, token or "") as (client, ctx):
                with pytest.raises(A2AError, match="401"):
                    await send(client, start("note", {"label": "never"}), ctx)
        async with agent(base, alice) as (client, ctx):
            with pytest.raises(InvalidParamsError) as refused:
                await send(client, start("pay-supplier", {"supplier": "A", "amount": "lots", "iban": "X"}), ctx)
            first, *problems = str(refused.value).splitlines()
            assert first == "pay-supplier v1 refused its inputs:" and len(problems) == 3  # one line each
            assert any("supplier" in p for p in problems) and any("amount" in p for p in problems)
            with pytest.raises(InvalidParamsError, match=r"no process 'nope' \(processes: note, pay-supplier\)"):
                await send(client, start("nope", {}), ctx)
            with pytest.raises(InvalidParamsError, match="a goal as text needs a planner"):
                goal = new_message([new_text_part("Pay everyone")], role=Role.ROLE_USER)
                await send(client, SendMessageRequest(message=goal), ctx)
            skill = new_message([new_data_part({"skill": "note", "inputs": {}})], role=Role.ROLE_USER)
            with pytest.raises(InvalidParamsError, match="unknown: skill"):
                await send(client, SendMessageRequest(message=skill), ctx)
    assert await workflows_on(world.harness.client, world.harness.task_queue) == []


@pytest.mark.system
async def test_the_card_lists_processes_with_their_schemas_and_never_run_text(world, tmp_path):
    alice = world.tokens["alice"]
    secret = f"RUN-TEXT-{uuid.uuid4().hex[:8]}"
    plan = {
        "goal": "Note the planner's plan",
        "steps": [{"id": "n", "title": "n", "tool": "record", "args": {"label": "x"}}],
    }
    planner = tmp_path / "planner.yaml"
    planner.write_text(yaml.safe_dump({"planner": [{"plan": plan}]}))
    async with world.agent_server() as base, agent(base, alice, streaming=False) as (client, ctx):
        async with httpx.AsyncClient(base_url=base) as http:
            card = (await http.get("/.well-known/agent-card.json")).json()  # public: no token
        assert [(s["id"], s["description"]) for s in card["skills"]] == [
            ("note", "Record one note."),
            ("pay-supplier", "Pay one supplier an approved amount."),
        ]
        [extension] = card["capabilities"]["extensions"]
        schema = extension["params"]["processes"]["pay-supplier"]["inputs"]
        assert schema["required"] == ["supplier", "amount"] and schema["additionalProperties"] is False
        assert schema["properties"]["amount"] == {"type": "integer", "minimum": 1, "maximum": 10000}
        assert card["securitySchemes"] == {"bearer": {"httpAuthSecurityScheme": {"scheme": "bearer"}}}
        assert card["capabilities"]["streaming"] is True

        task = await send(client, start("note", {"label": secret}), ctx)
        follow_run(world, task.id)
        got = await client.get_task(GetTaskRequest(id=task.id), context=ctx)
        assert got.status.state == TaskState.TASK_STATE_INPUT_REQUIRED  # the run knows the secret, the card not
        async with httpx.AsyncClient(base_url=base) as http:
            text = (await http.get("/.well-known/agent-card.json")).text
        assert secret not in text and "Note ${inputs.label}" not in text and "@goal" not in text

    # With a planner, a goal as text is a skill too: planned, then rejected by a person through A2A.
    async with (
        world.agent_server(RunOptions(planner=f"scripted:{planner}", executor=f"scripted:{planner}")) as base,
        agent(base, alice) as (client, ctx),
    ):
        async with httpx.AsyncClient(base_url=base) as http:
            card = (await http.get("/.well-known/agent-card.json")).json()
        assert card["skills"][-1]["id"] == "@goal"
        goal = SendMessageRequest(message=new_message([new_text_part("Note the planner's plan")], role=Role.ROLE_USER))
        states = []
        async for event in client.send_message(goal, context=ctx):
            kind, body = state_of(event)
            if kind == "task":
                task_id = event.task.id
                follow_run(world, task_id)
            if kind in ("task", "status_update"):
                states.append(body.state)
            if kind == "status_update" and body.state == TaskState.TASK_STATE_INPUT_REQUIRED and len(states) < 50:
                async with agent(base, alice, streaming=False) as (again, again_ctx):
                    await send(again, decision(task_id, decision="reject", reason="not this week"), again_ctx)
                states.append(-1)
                break
        async for event in client.subscribe(SubscribeToTaskRequest(id=task_id), context=ctx):
            last = event
    assert states[0] == TaskState.TASK_STATE_SUBMITTED and -1 in states
    _, ended = state_of(last)  # the stream's last event: the task itself if it had ended already
    assert ended.state == TaskState.TASK_STATE_REJECTED and "not this week" in get_message_text(ended.message)


@pytest.mark.system
async def test_stratagem_a2a_serves_the_library_as_the_command_starts_it(cli_env, tmp_path):
    env, harness = cli_env
    folder = tmp_path / "library"
    folder.mkdir()
    (folder / "note.yaml").write_text(yaml.safe_dump(NOTE, sort_keys=False))
    users_file = tmp_path / "users.yaml"
    users = Users.load(users_file)
    token = users.new_token("agent", "dana")
    users.save()
    port = free_port()
    command = [sys.executable, "-m", "stratagem.cli", "a2a", "--port", str(port), "--users", str(users_file)]
    server = subprocess.Popen(
        [*command, "--processes", str(folder)],
        env={**env, "STRATAGEM_PROCESSES": ""},
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        await asyncio.to_thread(wait_listening, port, 30)
        base = f"http://127.0.0.1:{port}"
        async with agent(base, token, streaming=False) as (client, ctx):
            assert [s.id for s in client._card.skills] == ["note"]  # type: ignore[attr-defined]
            request = start("note", {"label": "from the command"})
            request.configuration.return_immediately = True
            task = await send(client, request, ctx)
            harness.runs.append(get_run(harness.client, task.id))
            assert task.status.state in (
                TaskState.TASK_STATE_SUBMITTED,
                TaskState.TASK_STATE_WORKING,
                TaskState.TASK_STATE_INPUT_REQUIRED,
            )
            cancelled = await client.cancel_task(CancelTaskRequest(id=task.id), context=ctx)
            assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
        status = await get_run(harness.client, task.id).status()
        assert status.phase is Phase.cancelled
    finally:
        server.terminate()
        _, err = await asyncio.to_thread(server.communicate, timeout=10)
    assert "Traceback" not in err, err


# ---------------------------------------------------------------------------------- runs_view


def status_in(phase: Phase, *, pending: list[PendingDecision] = (), revision: int | None = 1) -> RunStatus:  # type: ignore[assignment]
    return RunStatus(
        run_id="run-x",
        goal="g",
        phase=phase,
        revision=revision,
        approved_revision=None,
        steps=StepCounts(),
        pending=list(pending),
        replans=0,
        max_replans=2,
        reason="why it ended" if phase.finished else None,
    )


def asking(kind: DecisionKind = DecisionKind.plan_approval, **fields: Any) -> PendingDecision:
    return PendingDecision(kind=kind, revision=1, since=datetime(2026, 1, 1, tzinfo=UTC), **fields)


EXPECTED = {
    Phase.planning: runs_view.TaskState.working,  # a replan's planning: revision 1 exists
    Phase.awaiting_approval: runs_view.TaskState.working,
    Phase.running: runs_view.TaskState.working,
    Phase.replanning: runs_view.TaskState.working,
    Phase.awaiting_repair: runs_view.TaskState.working,
    Phase.succeeded: runs_view.TaskState.completed,
    Phase.failed: runs_view.TaskState.failed,
    Phase.rejected: runs_view.TaskState.rejected,
    Phase.cancelled: runs_view.TaskState.canceled,
    Phase.compensated: runs_view.TaskState.failed,
    Phase.compensation_failed: runs_view.TaskState.failed,
}


@pytest.mark.unit
@pytest.mark.parametrize("phase", list(Phase))
def test_every_phase_is_a_task_state_and_a_person_waited_for_is_input_required(phase: Phase) -> None:
    assert runs_view.task_state(status_in(phase)) is EXPECTED[phase]
    waited = runs_view.task_state(status_in(phase, pending=[asking()]))
    assert waited is (EXPECTED[phase] if phase.finished else runs_view.TaskState.input_required)
    assert waited.final is phase.finished


@pytest.mark.unit
def test_a_first_plan_being_written_is_submitted_and_waits_say_exactly_what_would_run() -> None:
    assert runs_view.task_state(status_in(Phase.planning, revision=None)) is runs_view.TaskState.submitted
    call = AwaitedCall(call_id="3", tool="wire_funds", arguments='{"amount": 5, "to": "ACME"}', digest="d1")
    preview = StepPreview(tool="pay", args={"amount": 250, "to": "ACME"}, digest="d2")
    status = status_in(
        Phase.running,
        pending=[
            asking(DecisionKind.tool_call_approval, step_id="s", call=call, prompt="Wire it?"),
            asking(DecisionKind.step_approval, step_id="pay", preview=preview, quorum=2),
        ],
    )
    assert runs_view.waits(status) == [
        {
            "kind": "tool_call_approval",
            "revision": 1,
            "step_id": "s",
            "prompt": "Wire it?",
            "call": {"call_id": "3", "tool": "wire_funds", "arguments": '{"amount": 5, "to": "ACME"}', "digest": "d1"},
        },
        {
            "kind": "step_approval",
            "revision": 1,
            "step_id": "pay",
            "preview": preview.model_dump(mode="json"),
            "quorum": 2,
        },
    ]
    assert runs_view.summary(status)["state"] == "input-required"
    assert json.dumps(runs_view.summary(status_in(Phase.failed)))  # plain JSON
