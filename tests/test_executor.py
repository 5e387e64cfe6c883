"""The executor loop on its own, and the checkpoint an attempt hands to the next."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import json
import weakref
from pathlib import Path

import pytest
import yaml
from support import FIXTURE_TOOLS
from temporalio.testing import ActivityEnvironment

from stratagem.activities.checkpoint import Checkpoint
from stratagem.domain import activity_io
from stratagem.domain.ledger import ToolCallRecord, ToolCallStatus
from stratagem.domain.plan import Step, StepKind
from stratagem.io.executor import Executor, ExecutorProgress
from stratagem.models import Message, ScriptedModel, ToolCall
from stratagem.tools import ToolRegistry

pytestmark = pytest.mark.unit


def request(tools: list[str]) -> activity_io.LlmStepInput:
    step = Step(id="work", title="work", kind=StepKind.llm, instructions="do it", tools=tools)
    return activity_io.LlmStepInput(
        run_id="r", execution_id="e", revision=1, step=step, instructions="do it", model="scripted:x"
    )


def executor(tmp_path: Path, script: dict, progress: ExecutorProgress, saved: list, attempt: int = 1) -> Executor:
    path = tmp_path / "script.yaml"
    path.write_text(yaml.safe_dump(script))
    return Executor(
        ScriptedModel(str(path)),
        request(["record"]),
        ToolRegistry.from_modules([FIXTURE_TOOLS]),
        workspace=tmp_path / "ws",
        attempt=attempt,
        progress=progress,
        save=lambda p: saved.append(p.model_copy(deep=True)),
    )


def logged(tmp_path: Path) -> list[dict]:
    log = tmp_path / "ws" / "calls.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


async def test_a_resumed_attempt_makes_only_the_calls_still_owed(tmp_path):
    # The earlier attempt was paid for a turn with two calls and ran the first before it died.
    turn = Message(
        role="assistant",
        tool_calls=[
            ToolCall(id="c1", name="record", arguments={"label": "first"}),
            ToolCall(id="c2", name="record", arguments={"label": "second"}),
        ],
    )
    progress = ExecutorProgress(
        messages=[
            Message(role="user", content="do it"),
            turn,
            Message(role="tool", tool_call_id="c1", content="first"),
        ],
        tool_calls=[ToolCallRecord(call=0, tool="record", status=ToolCallStatus.ok)],
    )
    saved: list = []
    run = executor(tmp_path, {"executor": {"work": "all done"}}, progress, saved, attempt=2)
    assert await run.run() == "all done"
    assert [c["label"] for c in logged(tmp_path)] == ["second"]
    assert logged(tmp_path)[0]["key"].endswith("/work/r1/c1")
    assert [m.tool_call_id for m in progress.messages if m.role == "tool"] == ["c1", "c2"]
    assert len(saved) >= 2  # after the owed call, and after the paid model call


async def test_a_final_answer_already_given_is_not_asked_for_again(tmp_path):
    progress = ExecutorProgress(
        messages=[Message(role="user", content="do it"), Message(role="assistant", content="the answer")]
    )
    run = executor(tmp_path, {"executor": {}}, progress, [])  # any model call would fail: no response scripted
    assert await run.run() == "the answer"
    assert progress.calls == []


async def test_unauthorized_calls_never_run_and_keys_count_every_call(tmp_path):
    script = {
        "executor": {
            "work": [
                {
                    "calls": [
                        {"tool": "delete_records", "args": {"table": "t"}},
                        {"tool": "record", "args": {"label": "ok"}},
                    ]
                },
                {"text": "done"},
            ]
        }
    }
    progress = ExecutorProgress()
    assert await executor(tmp_path, script, progress, []).run() == "done"
    assert [c["tool"] for c in logged(tmp_path)] == ["record"]
    assert logged(tmp_path)[0]["key"].endswith("/c1")  # the refused call took position 0
    assert [c.status for c in progress.tool_calls] == [ToolCallStatus.refused, ToolCallStatus.ok]
    assert progress.rounds == 2


async def test_an_attempts_heartbeats_leave_no_cycle_for_the_garbage_collector():
    # Every tool step's attempt runs under a checkpoint. Its heartbeat timer once referred to
    # itself through a closure: only the collector freed it, with the attempt's context, and a
    # ten-step run left a thousand objects to find. Freed at once, a weak reference dies with it.
    env = ActivityEnvironment()
    beats: list = []
    env.on_heartbeat = lambda *details: beats.append(details)

    async def attempt() -> weakref.ref[Checkpoint]:
        checkpoint = Checkpoint(every=0.01)
        assert await checkpoint.run(asyncio.sleep(0.035, result=7)) == 7  # beats meanwhile
        return weakref.ref(checkpoint)

    gc.disable()
    try:
        gone = await env.run(attempt)
        assert beats and gone() is None
    finally:
        gc.enable()


async def test_the_checkpoint_keeps_the_earlier_attempts_progress_until_it_has_its_own():
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, heartbeat_details=[{"calls": [{"model": "m", "input_tokens": 5}]}])
    beats: list = []
    env.on_heartbeat = lambda *details: beats.append(details)

    async def attempt() -> None:
        checkpoint = Checkpoint(every=0.01)
        await checkpoint.run(asyncio.sleep(0.05))  # a slow first call: only periodic heartbeats
        checkpoint.save({"calls": []})

    await env.run(attempt)
    assert beats[0] == ({"calls": [{"model": "m", "input_tokens": 5}]},)
    assert all(b == beats[0] for b in beats[:-1]) and beats[-1] == ({"calls": []},)
