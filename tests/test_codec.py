"""Encryption at rest: real runs on the dev server, read back raw by a client without the key."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from conftest import keyed_home
from google.protobuf.message import Message
from support import FIXTURE_TOOLS
from support.plans import step
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.api.failure.v1 import Failure
from temporalio.client import Client, WorkflowFailureError, WorkflowHistory, WorkflowUpdateFailedError
from temporalio.converter import DefaultFailureConverterWithEncodedAttributes
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer

from stratagem.client import connect, get_run, start_run
from stratagem.common.config import Settings
from stratagem.common.errors import ConfigError, DecisionRefusedError
from stratagem.domain.plan import Author, AuthorKind, PlanDraft
from stratagem.domain.run_types import ApproveInput, Phase, RejectInput, RunInput, RunOptions
from stratagem.io.codec import (
    ACCEPT_PLAIN_ENV,
    ENCODING,
    KEY_ENV,
    KEY_ID_METADATA,
    REFUSED_ENCODING,
    EncryptionCodec,
    EncryptionKeyError,
    codec_from,
    data_converter,
    key_id,
)
from stratagem.io.payloads import stratagem_data_converter
from stratagem.temporal.plugin import StratagemPlugin
from stratagem.tools import ToolRegistry
from stratagem.worker import build_worker
from stratagem.workflows import StratagemRun

KEY_A = base64.b64encode(os.urandom(32)).decode()
KEY_B = base64.b64encode(os.urandom(32)).decode()
SECRET_OUTPUT = "ACME-PAYROLL-4711"
SECRET_FAILURE = "BANK-DETAILS-9931"
GOAL = "Pay the ZEPHYR-CONTRACTORS-2210 invoices"
SECRETS = (SECRET_OUTPUT, SECRET_FAILURE, GOAL)


def key_bytes(text: str) -> bytes:
    return base64.b64decode(text)


ID_A, ID_B = key_id(key_bytes(KEY_A)), key_id(key_bytes(KEY_B))


# --- the codec on its own ------------------------------------------------------------------


@pytest.mark.unit
async def test_round_trip_hides_everything_and_keeps_the_payload_exact():
    codec = EncryptionCodec(key_bytes(KEY_A))
    original = Payload(metadata={"encoding": b"json/plain", "extra": b"kept"}, data=f'"{SECRET_OUTPUT}"'.encode())
    [sealed] = await codec.encode([original])
    assert sealed.metadata["encoding"] == ENCODING
    assert sealed.metadata[KEY_ID_METADATA] == key_id(key_bytes(KEY_A)).encode()
    assert SECRET_OUTPUT.encode() not in sealed.SerializeToString() and b"json/plain" not in sealed.data
    [again] = await codec.encode([original])
    assert again.data != sealed.data  # a fresh nonce every time
    assert (await codec.encode([sealed])) == [sealed]  # never sealed twice
    assert await codec.decode([sealed, again]) == [original, original]


@pytest.mark.unit
async def test_unencrypted_payloads_are_refused_unless_the_operator_accepts_them():
    plain = [
        Payload(metadata={"encoding": b"json/plain"}, data=b'{"phase": "running"}'),
        Payload(metadata={"encoding": b"binary/null"}),
    ]
    refused = await EncryptionCodec(key_bytes(KEY_A)).decode(plain)
    assert [p.metadata["encoding"] for p in refused] == [REFUSED_ENCODING, REFUSED_ENCODING] and not any(
        p.data for p in refused
    )
    assert await EncryptionCodec(key_bytes(KEY_A), accept_plain=True).decode(plain) == plain


@pytest.mark.unit
async def test_a_wrong_key_names_both_key_ids_and_never_garbles():
    [sealed] = await EncryptionCodec(key_bytes(KEY_A)).encode(
        [Payload(metadata={"encoding": b"json/plain"}, data=b"1")]
    )
    with pytest.raises(EncryptionKeyError) as info:
        await EncryptionCodec(key_bytes(KEY_B)).decode([sealed])
    message = str(info.value)
    assert (
        f"encrypted with key {ID_A}" in message and f"this process has key {ID_B} (STRATAGEM_ENCRYPTION_KEY)" in message
    )
    assert "\n" not in message and KEY_A not in message and KEY_B not in message
    assert isinstance(info.value, ConfigError)  # one line from the CLI, and never an ApplicationError

    # Rotation: B is current, A is old. A's payloads still decrypt; new ones are sealed with B.
    rotated = EncryptionCodec(key_bytes(KEY_B), [key_bytes(KEY_A)])
    assert rotated.key_ids == [ID_B, ID_A]
    assert (await rotated.decode([sealed]))[0].data == b"1"
    [fresh] = await rotated.encode([Payload(metadata={"encoding": b"json/plain"}, data=b"2")])
    assert fresh.metadata[KEY_ID_METADATA] == ID_B.encode()
    with pytest.raises(EncryptionKeyError, match=f"encrypted with key {ID_B}, but this process has key {ID_A}"):
        await EncryptionCodec(key_bytes(KEY_A)).decode([fresh])

    # A payload altered in storage fails authentication instead of decoding to something else.
    tampered = Payload()
    tampered.CopyFrom(sealed)
    tampered.data = sealed.data[:-1] + bytes([sealed.data[-1] ^ 1])
    with pytest.raises(EncryptionKeyError, match=f"key {ID_A} failed authentication: it was altered or damaged"):
        await EncryptionCodec(key_bytes(KEY_A)).decode([tampered])


@pytest.mark.unit
async def test_failures_are_sealed_but_key_mismatches_stay_readable():
    converter = data_converter({"STRATAGEM_ENCRYPTION_KEY": KEY_A})
    sealed = Failure()
    await converter.encode_failure(RuntimeError(f"card {SECRET_FAILURE} declined"), sealed)
    assert sealed.message == "Encoded failure" and SECRET_FAILURE.encode() not in sealed.SerializeToString()
    assert SECRET_FAILURE in str(await converter.decode_failure(sealed))

    # What an activity worker with the wrong key reports: readable by the workflow worker that
    # has the right one, instead of a failure sealed with a key nobody else has.
    wrong = data_converter({"STRATAGEM_ENCRYPTION_KEY": KEY_B})
    try:
        try:
            raise EncryptionKeyError(f"payload was encrypted with key {ID_A}, but ...")
        except EncryptionKeyError as err:
            raise ApplicationError("Failed decoding arguments") from err
    except ApplicationError as err:
        failure = Failure()
        await wrong.encode_failure(err, failure)
    assert failure.message == "Failed decoding arguments" and not failure.HasField("encoded_attributes")
    assert failure.cause.message.startswith(f"payload was encrypted with key {ID_A}")
    decoded = await converter.decode_failure(failure)
    assert str(decoded) == "Failed decoding arguments" and "encrypted with key" in str(decoded.__cause__)


@pytest.mark.parametrize(
    "env, expected",
    [
        ({"STRATAGEM_ENCRYPTION_KEY": "not base64!"}, "STRATAGEM_ENCRYPTION_KEY is not valid base64"),
        (
            {"STRATAGEM_ENCRYPTION_KEY": base64.b64encode(b"k" * 16).decode()},
            "STRATAGEM_ENCRYPTION_KEY decodes to 16 bytes, not 32",
        ),
        (
            {"STRATAGEM_ENCRYPTION_KEY": KEY_A, "STRATAGEM_ENCRYPTION_OLD_KEYS": f"{KEY_B}, abcd"},
            "STRATAGEM_ENCRYPTION_OLD_KEYS (key 2) decodes to 3 bytes, not 32",
        ),
        (
            {"STRATAGEM_ENCRYPTION_OLD_KEYS": KEY_B},
            "STRATAGEM_ENCRYPTION_OLD_KEYS is set but STRATAGEM_ENCRYPTION_KEY is not",
        ),
    ],
)
@pytest.mark.unit
async def test_a_malformed_key_is_one_clear_line(env: dict[str, str], expected: str):
    with pytest.raises(ConfigError) as info:
        data_converter(env)
    message = str(info.value)
    assert message.startswith(expected) and "\n" not in message
    assert all(v.strip() not in message for v in env.values() if len(v) > 8)  # keys are never echoed
    if "STRATAGEM_ENCRYPTION_KEY" in env:
        assert "base64.b64encode(os.urandom(32))" in message
    # connect() refuses the same way, before it touches the network.
    settings = Settings(
        address="127.0.0.1:1",
        encryption_key=env.get("STRATAGEM_ENCRYPTION_KEY"),
        encryption_old_keys=env.get("STRATAGEM_ENCRYPTION_OLD_KEYS"),
    )
    with pytest.raises(ConfigError, match=expected.replace("(", r"\(").replace(")", r"\)")):
        await connect(settings)


@pytest.mark.unit
def test_no_key_leaves_the_converter_unchanged():
    assert data_converter({}) is stratagem_data_converter
    assert data_converter({"STRATAGEM_ENCRYPTION_KEY": "  "}) is stratagem_data_converter
    assert data_converter(Settings()) is stratagem_data_converter
    converter = data_converter({"STRATAGEM_ENCRYPTION_KEY": KEY_A, "STRATAGEM_ENCRYPTION_OLD_KEYS": f" {KEY_B} ,"})
    assert isinstance(converter.payload_codec, EncryptionCodec)
    assert converter.payload_codec.key_ids == [key_id(key_bytes(KEY_A)), key_id(key_bytes(KEY_B))]
    assert issubclass(converter.failure_converter_class, DefaultFailureConverterWithEncodedAttributes)
    assert converter.payload_converter_class is stratagem_data_converter.payload_converter_class
    assert KEY_A not in repr(Settings(encryption_key=KEY_A))


# --- real runs ------------------------------------------------------------------------------


def walk(message: Message, path: str = "") -> Iterator[tuple[str, Any]]:
    """Every message, string and bytes value in a protobuf message, with its path."""
    yield path, message
    for field, value in message.ListFields():
        where = f"{path}.{field.name}"
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            items = list(value.items())
            value_field = field.message_type.fields_by_name["value"]
            for key, item in items:
                yield f"{where}[{key}]", str(key)
                if value_field.message_type is not None:
                    yield from walk(item, f"{where}[{key}]")
                else:
                    yield f"{where}[{key}]", item
        elif isinstance(value, Sequence) and not isinstance(value, (str, bytes)):  # a repeated field
            for i, item in enumerate(value):
                if isinstance(item, Message):
                    yield from walk(item, f"{where}[{i}]")
                else:
                    yield f"{where}[{i}]", item
        elif isinstance(value, Message):
            yield from walk(value, where)
        else:
            yield where, value


def history_parts(history: WorkflowHistory) -> Iterator[tuple[str, Any]]:
    for n, event in enumerate(history.events):
        yield from walk(event, f"event[{n}]:{EventType.Name(event.event_type)}")


def payloads_of(history: WorkflowHistory) -> list[tuple[str, Payload]]:
    return [(p, v) for p, v in history_parts(history) if isinstance(v, Payload)]


def failures_of(history: WorkflowHistory) -> list[tuple[str, Failure]]:
    return [(p, v) for p, v in history_parts(history) if isinstance(v, Failure)]


def is_patch_bookkeeping(path: str) -> bool:
    """Payloads that no codec sees, by Temporal's design: the patch ids of `workflow.patched()`,
    a local activity marker's own bookkeeping (its sequence number, type and times; the result
    beside it is sealed), the run's status search attribute (visibility must index it: a word such
    as `running`), and the trace context that activities and continue-as-new carry in their
    headers (ids only)."""
    return (
        ".marker_recorded_event_attributes.details[data]" in path
        or ".search_attributes.indexed_fields[TemporalChangeVersion]" in path
        or ".search_attributes.indexed_fields[StratagemStatus]" in path
        or ".header.fields[_tracer-data]" in path
        or ".details[patch-data]" in path
    )


def assert_nothing_readable(history: WorkflowHistory, secrets: tuple[str, ...] = SECRETS) -> None:
    """No secret in the history's JSON, nor in any string or bytes (payload data) of any event."""
    text = history.to_json()
    for secret in secrets:
        assert secret not in text
        for path, value in history_parts(history):
            if isinstance(value, str):
                assert secret not in value, path
            elif isinstance(value, bytes):
                assert secret.encode() not in value, path


def target(env: WorkflowEnvironment) -> str:
    return env.client.service_client.config.target_host


async def client_with(
    env: WorkflowEnvironment, key: str | None, old: str | None = None, *, accept_plain: bool = False
) -> Client:
    """A client built the way every Stratagem process builds one: `connect()` and Settings."""
    settings = Settings(
        address=target(env), namespace=env.client.namespace, encryption_key=key, encryption_old_keys=old
    )
    client = await connect(settings)
    if accept_plain:  # what STRATAGEM_ENCRYPTION_ACCEPT_PLAIN=1 gives every process
        converter = client.data_converter
        codec = dataclasses.replace(converter, payload_codec=codec_from({KEY_ENV: key, ACCEPT_PLAIN_ENV: "1"}))
        client = Client(client.service_client, namespace=client.namespace, data_converter=codec)
    return client


@asynccontextmanager
async def worker(client: Client, task_queue: str, workspace: Path) -> AsyncIterator[None]:
    registry = ToolRegistry.from_modules([FIXTURE_TOOLS])
    async with build_worker(client, task_queue=task_queue, registry=registry, workspace=workspace):
        yield


def run_input(steps: list[dict[str, Any]], goal: str = GOAL, auto_approve: bool = True) -> RunInput:
    return RunInput(
        plan=PlanDraft.model_validate({"goal": goal, "steps": steps}),
        author=Author(kind=AuthorKind.human, name="alice"),
        options=RunOptions(auto_approve=auto_approve),
    )


async def replay(history: WorkflowHistory, client: Client) -> None:
    replayer = Replayer(workflows=[StratagemRun], plugins=[StratagemPlugin(client.data_converter)])
    await replayer.replay_workflow(history)


@pytest.mark.system
async def test_histories_hold_only_ciphertext(dev_env: WorkflowEnvironment, tmp_path: Path):
    client = await client_with(dev_env, KEY_A)
    plain = await Client.connect(target(dev_env), namespace=dev_env.client.namespace)  # no codec, no pydantic
    task_queue = f"tq-enc-{uuid.uuid4().hex[:8]}"
    async with worker(client, task_queue, tmp_path / "workspace"):
        good = await start_run(
            client,
            run_input(
                [
                    step("lookup", "fetch_profile", user="ada"),
                    step("payroll", "record", ["lookup"], label=f"{SECRET_OUTPUT} for ${{lookup.name}}"),
                ]
            ),
            task_queue=task_queue,
            run_id=f"enc-ok-{uuid.uuid4().hex[:8]}",
        )
        bad = await start_run(
            client,
            run_input([step("pay", "broken", reason=f"refused: {SECRET_FAILURE}")]),
            task_queue=task_queue,
            run_id=f"enc-fail-{uuid.uuid4().hex[:8]}",
        )
        result = await good.result()
        assert result.status is Phase.succeeded and result.outputs == {"payroll": f"{SECRET_OUTPUT} for Ada"}
        with pytest.raises(WorkflowFailureError) as info:
            await bad.result()
        assert f"step 'pay' failed: refused: {SECRET_FAILURE}" in str(info.value.cause)
        memo = await (await good.handle.describe()).memo()
        assert memo["goal"] == GOAL and memo["phase"] == "succeeded"

    for run in (good, bad):
        raw = await plain.get_workflow_handle(run.id).fetch_history()
        assert_nothing_readable(raw)

        # Every payload is sealed with the current key, but the workflow's code-version patch
        # ids, which Temporal itself writes (a search attribute and a marker); every failure
        # message and stack trace is in a sealed payload.
        payloads = [(path, p) for path, p in payloads_of(raw) if not is_patch_bookkeeping(path)]
        unsealed = [(path, dict(p.metadata)) for path, p in payloads if p.metadata.get("encoding") != ENCODING]
        assert payloads and not unsealed, unsealed
        assert {p.metadata[KEY_ID_METADATA] for _, p in payloads} == {ID_A.encode()}
        assert any("user_metadata.summary" in path for path, _ in payloads)  # the UI's summary too
        assert any("upserted_memo" in path for path, _ in payloads)  # and the phase the run upserts
        failures = failures_of(raw)
        assert all(f.message == "Encoded failure" and not f.stack_trace for _, f in failures)

        # With the key, the same raw history reads back in full.
        history = await client.get_workflow_handle(run.id).fetch_history()
        decoded = b"".join(
            p.data for p in await client.data_converter.payload_codec.decode([p for _, p in payloads_of(history)])
        )
        assert GOAL.encode() in decoded
        await replay(history, client)
        if run is good:
            assert SECRET_OUTPUT.encode() in decoded
            assert not failures
        else:
            assert failures
            messages = []
            for _, failure in failures_of(history):
                copy = Failure()
                copy.CopyFrom(failure)
                messages.append(str(await client.data_converter.decode_failure(copy)))
            assert any(SECRET_FAILURE in m for m in messages), messages

    # A listing from a shell without the key still lists the runs, saying it cannot read them.
    env = {**os.environ, "TEMPORAL_ADDRESS": target(dev_env), "STRATAGEM_HOME": keyed_home(tmp_path / "home")}
    listed = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "stratagem.cli", "list", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listed.returncode == 0, listed.stderr
    rows = {row["run_id"]: row for row in json.loads(listed.stdout)}
    assert rows[good.id]["goal"] == "(unreadable: encrypted with a key this shell lacks)"
    with_key = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "stratagem.cli", "list", "--json"],
        env={**env, "STRATAGEM_ENCRYPTION_KEY": KEY_A},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert {row["run_id"]: row for row in json.loads(with_key.stdout)}[good.id]["goal"] == GOAL

    # A client with another key cannot read the run, and says why.
    other = await client_with(dev_env, KEY_B)
    with pytest.raises(EncryptionKeyError, match=f"encrypted with key {ID_A}, but this process has key {ID_B}"):
        await get_run(other, good.id).result()
    # After rotation (B current, A old) it can.
    rotated = await client_with(dev_env, KEY_B, old=KEY_A)
    assert (await get_run(rotated, good.id).result()).outputs == {"payroll": f"{SECRET_OUTPUT} for Ada"}


@pytest.mark.system
async def test_decisions_and_queries_work_encrypted(dev_env: WorkflowEnvironment, tmp_path: Path):
    """Updates, their refusals (failures, so encoded) and queries all round-trip through the codec."""
    client = await client_with(dev_env, KEY_A)
    task_queue = f"tq-review-{uuid.uuid4().hex[:8]}"
    async with worker(client, task_queue, tmp_path / "workspace"):
        run = await start_run(
            client,
            run_input([step("note", "record", label=SECRET_OUTPUT)], auto_approve=False),
            task_queue=task_queue,
            run_id=f"enc-review-{uuid.uuid4().hex[:8]}",
        )
        for _ in range(200):
            status = await run.status()
            if status.phase is Phase.awaiting_approval:
                break
            await asyncio.sleep(0.05)
        assert status.phase is Phase.awaiting_approval and status.goal == GOAL
        with pytest.raises(DecisionRefusedError) as info:
            await run.approve(ApproveInput(by="bob", revision=7))
        assert "revision" in str(info.value) and "Encoded failure" not in str(info.value)
        await run.reject(RejectInput(by="bob", reason=f"not now: {SECRET_FAILURE}"))
        result = await run.result()
        assert result.status is Phase.rejected and SECRET_FAILURE in (result.reason or "")
    plain = await Client.connect(target(dev_env), namespace=dev_env.client.namespace)
    assert_nothing_readable(await plain.get_workflow_handle(run.id).fetch_history())


@pytest.mark.system
async def test_a_run_started_before_encryption_stays_readable(dev_env: WorkflowEnvironment, tmp_path: Path):
    """The run's input was written in the clear (encryption off); everything after is sealed."""
    unencrypted = await client_with(dev_env, None)
    client = await client_with(dev_env, KEY_A, accept_plain=True)
    task_queue = f"tq-mixed-{uuid.uuid4().hex[:8]}"
    run = await start_run(
        unencrypted,
        run_input([step("note", "record", label=SECRET_OUTPUT)], goal="mixed history"),
        task_queue=task_queue,
        run_id=f"enc-mixed-{uuid.uuid4().hex[:8]}",
    )
    async with worker(client, task_queue, tmp_path / "workspace"):
        result = await get_run(client, run.id).result()
    assert result.outputs == {"note": SECRET_OUTPUT}
    history = await run.handle.fetch_history()
    encodings = {p.metadata.get("encoding") for path, p in payloads_of(history) if "WORKFLOW_EXECUTION_STARTED" in path}
    assert encodings == {b"json/plain"}  # the input, memo and summary from before
    completed = [
        p
        for path, p in payloads_of(history)
        if "ACTIVITY_TASK_COMPLETED" in path or "WORKFLOW_EXECUTION_COMPLETED" in path
    ]
    assert completed and all(p.metadata.get("encoding") == ENCODING for p in completed)
    assert all(SECRET_OUTPUT.encode() not in p.data for p in completed)  # the output came after encryption was on
    with pytest.raises(AssertionError):  # the plan in the input did not: the check sees plaintext
        assert_nothing_readable(history, (SECRET_OUTPUT,))
    await replay(history, client)


@pytest.mark.system
async def test_a_worker_with_the_wrong_key_fails_its_task_and_changes_nothing(
    dev_env: WorkflowEnvironment, tmp_path: Path
):
    client = await client_with(dev_env, KEY_A)
    wrong = await client_with(dev_env, KEY_B)
    task_queue = f"tq-wrong-{uuid.uuid4().hex[:8]}"
    run = await start_run(
        client,
        run_input([step("note", "record", label=SECRET_OUTPUT)]),
        task_queue=task_queue,
        run_id=f"enc-wrong-{uuid.uuid4().hex[:8]}",
    )

    async def task_failure() -> Failure | None:
        history = await run.handle.fetch_history()
        failed = [e for e in history.events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED]
        return failed[0].workflow_task_failed_event_attributes.failure if failed else None

    async with worker(wrong, task_queue, tmp_path / "wrong"):
        for _ in range(200):
            failure = await task_failure()
            if failure is not None:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the worker with the wrong key never failed its workflow task")
    assert not (tmp_path / "wrong" / "calls.jsonl").exists()  # no step ran
    # The one failure left readable (it holds key ids, no data): what the Web UI shows for the
    # stuck workflow task.
    assert failure.message.startswith(f"payload was encrypted with key {ID_A}, but this process has key {ID_B}")
    assert failure.application_failure_info.type == "EncryptionKeyError"

    # The right worker then runs it to the end, as if nothing happened (after the server's
    # backoff between failed workflow tasks, about 10 s).
    async with worker(client, task_queue, tmp_path / "right"):
        result = await asyncio.wait_for(get_run(client, run.id).result(), 45)
    assert result.outputs == {"note": SECRET_OUTPUT}
    plain = await Client.connect(target(dev_env), namespace=dev_env.client.namespace)
    assert_nothing_readable(await plain.get_workflow_handle(run.id).fetch_history())


@pytest.mark.system
async def test_a_plain_decision_from_a_client_without_the_key_is_refused(dev_env: WorkflowEnvironment, tmp_path: Path):
    """The attack: encryption is on, and someone without the key approves in plain JSON."""
    client = await client_with(dev_env, KEY_A)
    task_queue = f"tq-plain-{uuid.uuid4().hex[:8]}"
    async with worker(client, task_queue, tmp_path / "workspace"):
        run = await start_run(
            client,
            run_input([step("pay", "record", label="paid")], auto_approve=False),
            task_queue=task_queue,
            run_id=f"enc-plain-{uuid.uuid4().hex[:8]}",
        )
        for _ in range(200):
            if (await run.status()).phase is Phase.awaiting_approval:
                break
            await asyncio.sleep(0.05)
        plain = await Client.connect(target(dev_env), namespace=dev_env.client.namespace)
        handle = plain.get_workflow_handle(run.id)
        with pytest.raises(WorkflowUpdateFailedError):
            await handle.execute_update("approve", {"by": "alice", "revision": 1})
        await handle.signal("approve_signal", {"by": "alice", "revision": 1})
        await asyncio.sleep(0.5)
        status = await run.status()  # the run still answers: its workflow task did not fail
        assert status.phase is Phase.awaiting_approval
        ledger = await run.ledger()
        assert not ledger.decisions and not (tmp_path / "workspace" / "calls.jsonl").exists()
        await run.reject(RejectInput(by="bob", reason="test over"))
