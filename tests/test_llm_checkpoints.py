"""An llm step's progress kept in the output store between rounds (activities/llm_progress.py), and
a tool call in flight when its attempt died, reconciled before it is made again (stratagem/io/in_flight.py).

Proved with real processes on the dev server by
tests/test_crash_effects.py::test_an_llm_step_killed_mid_conversation_resumes_from_its_last_round."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from temporalio.testing import ActivityEnvironment

from stratagem.activities.execution import ExecutionActivities
from stratagem.activities.llm_progress import CHECKPOINT, ProgressSlot
from stratagem.domain import activity_io
from stratagem.domain.ledger import ToolCallRecord, ToolCallStatus
from stratagem.domain.plan import Step, StepKind
from stratagem.domain.usage import CallUsage
from stratagem.io.executor import Executor, ExecutorProgress
from stratagem.io.in_flight import RECONCILED
from stratagem.io.store import FileStore, StoreError, is_stored
from stratagem.models import Message, ScriptedModel, ToolCall
from stratagem.tools import ToolContext, ToolRegistry, tool

pytestmark = pytest.mark.unit

KEY = "runs/r/work"
PAGE = 20_000


def page_text(page: int) -> str:
    return (f"page {page} " * PAGE)[:PAGE]


def conversation(rounds: int, chars: int = PAGE) -> ExecutorProgress:
    """A conversation of `rounds` model calls, each asking for one page of `chars` characters."""
    progress = ExecutorProgress(messages=[Message(role="system", content="s"), Message(role="user", content="u")])
    for n in range(rounds):
        call = ToolCall(id=f"c{n}", name="fetch", arguments={"page": n})
        progress.messages += [
            Message(role="assistant", tool_calls=[call]),
            Message(role="tool", tool_call_id=f"c{n}", content="x" * chars),
        ]
        progress.calls.append(CallUsage(model="m", input_tokens=100 + n, output_tokens=5))
        progress.tool_calls.append(ToolCallRecord(call=n, tool="fetch", status=ToolCallStatus.ok, arguments="{}"))
    return progress


async def in_attempt(work: Any, attempt: int = 1, activity_id: str = "7") -> Any:
    """`work()` inside an activity: attempt `attempt` of the activity `activity_id`."""
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, attempt=attempt, activity_id=activity_id)

    async def body() -> Any:
        return work()

    return await env.run(body)


class PutGetStore:
    """A store with only `put` and `get` (a `python:` store), content-addressed like the file store."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def put(self, key: str, data: bytes) -> str:
        self.data.setdefault(key, data)
        return f"mem:{key}"

    def get(self, ref: str) -> bytes:
        return self.data[ref.removeprefix("mem:")]


# --- the round trip ------------------------------------------------------------------------------


@pytest.mark.parametrize("rounds, chars", [(12, PAGE), (1, 10)], ids=["large", "small"])
async def test_the_progress_goes_to_the_store_and_the_details_carry_a_reference_and_the_counts(tmp_path, rounds, chars):
    store = FileStore(tmp_path)
    progress = conversation(rounds, chars)
    details = await in_attempt(lambda: ProgressSlot(store, KEY).details(progress))
    assert "messages" not in details and len(json.dumps(details)) < 1_000 + 400 * rounds
    assert [c["input_tokens"] for c in details["calls"]] == [100 + n for n in range(rounds)]  # what the workflow reads
    assert len(details["tool_calls"]) == rounds
    assert details[CHECKPOINT]["slot"] == f"store:{KEY}/checkpoint.json"

    resumed = await in_attempt(lambda: ProgressSlot(store, KEY).checkpointed(details), attempt=2)
    assert resumed == progress


async def test_details_older_than_the_last_save_resume_from_the_last_save(tmp_path):
    # The SDK holds heartbeats back (0.8 x the heartbeat timeout): the server keeps round 3's
    # details while the attempt saved round 5 before it died.
    store = FileStore(tmp_path)
    slot_of = lambda: ProgressSlot(store, KEY)  # noqa: E731
    held = await in_attempt(lambda: slot_of().details(conversation(3)))
    await in_attempt(lambda: slot_of().details(conversation(5)))
    resumed = await in_attempt(lambda: slot_of().checkpointed(held), attempt=2)
    assert resumed == conversation(5)


async def test_details_in_the_earlier_formats_are_read_as_before(tmp_path):
    store = FileStore(tmp_path)
    slot = await in_attempt(lambda: ProgressSlot(store, KEY), attempt=2)
    whole = conversation(2, 10)
    # What workers before #42 sent: the whole progress, or, when too large, all but the conversation.
    assert slot.checkpointed(whole.model_dump(mode="json")) == whole
    counts = slot.checkpointed({**conversation(9).model_dump(mode="json"), "messages": []})
    assert counts is not None and counts.messages == [] and counts.rounds == 9
    assert slot.checkpointed(None) is None
    assert await in_attempt(lambda: slot.checkpointed({"messages": "not a conversation"}), attempt=2) is None


async def test_another_dispatchs_or_a_missing_slot_leaves_the_counts(tmp_path):
    store = FileStore(tmp_path)
    mine = await in_attempt(lambda: ProgressSlot(store, KEY).details(conversation(4)), activity_id="7")
    # A later dispatch of the step (another activity) wrote the slot since.
    await in_attempt(lambda: ProgressSlot(store, KEY).details(conversation(6)), activity_id="9")
    resumed = await in_attempt(lambda: ProgressSlot(store, KEY).checkpointed(mine), attempt=2, activity_id="7")
    assert resumed is not None and resumed.messages == [] and resumed.rounds == 4

    for file in (tmp_path / KEY).glob("checkpoint.json.*"):
        file.unlink()
    resumed = await in_attempt(lambda: ProgressSlot(store, KEY).checkpointed(mine), attempt=2, activity_id="7")
    assert resumed is not None and resumed.messages == [] and resumed.rounds == 4


async def test_a_store_without_replace_keeps_a_small_progress_in_the_details_and_stores_a_large_one():
    store = PutGetStore()
    small, large = conversation(1, 10), conversation(12)
    details = await in_attempt(lambda: ProgressSlot(store, KEY).details(small))
    assert details == small.model_dump(mode="json") and not store.data  # as before #42
    details = await in_attempt(lambda: ProgressSlot(store, KEY).details(large))
    assert is_stored(details[CHECKPOINT]) and "messages" not in details
    assert await in_attempt(lambda: ProgressSlot(store, KEY).checkpointed(details), attempt=2) == large


# --- the file store's slot ------------------------------------------------------------------------


def test_a_slot_gives_the_latest_whole_write_and_a_write_cut_short_leaves_the_one_before(tmp_path):
    store = FileStore(tmp_path)
    ref = store.replace("runs/r/work/checkpoint.json", b"first")
    assert store.replace("runs/r/work/checkpoint.json", b"second") == ref and store.get(ref) == b"second"
    store.replace("runs/r/work/checkpoint.json", b"third" * 1000)
    assert store.get(ref) == b"third" * 1000
    files = sorted((tmp_path / "runs/r/work").glob("checkpoint.json.*"))
    assert len(files) == 2  # two files take turns, rewritten in place
    # A worker killed mid-write: the newest file holds its header and part of its data.
    newest = max(files, key=lambda f: f.read_bytes().split(b" ")[1])
    newest.write_bytes(newest.read_bytes()[:100])
    assert FileStore(tmp_path).get(ref) == b"second"
    # The next write (another worker) replaces the broken one, not the whole one before it.
    FileStore(tmp_path).replace("runs/r/work/checkpoint.json", b"fourth")
    assert store.get(ref) == b"fourth"
    for file in files:
        file.write_bytes(b"slot 9 5 00000000\nbroken")
    with pytest.raises(StoreError, match="is damaged"):
        store.get(ref)


def test_a_slot_written_by_another_worker_meanwhile_is_not_overwritten(tmp_path):
    # Attempts 1 and 3 on one worker, attempt 2 on another, all writing the slot.
    here, there = FileStore(tmp_path), FileStore(tmp_path)
    ref = here.replace("k/checkpoint.json", b"attempt 1, save 1")
    here.replace("k/checkpoint.json", b"attempt 1, save 2")
    there.replace("k/checkpoint.json", b"attempt 2, save 1")
    assert here.get(ref) == b"attempt 2, save 1"
    here.replace("k/checkpoint.json", b"attempt 3, save 1")
    assert there.get(ref) == b"attempt 3, save 1"
    assert store_bytes(tmp_path / "k") == {b"attempt 2, save 1", b"attempt 3, save 1"}


def store_bytes(folder: Path) -> set[bytes]:
    return {f.read_bytes().split(b"\n", 1)[1] for f in folder.glob("checkpoint.json.*")}


# --- a tool call in flight -----------------------------------------------------------------------


class Killed(BaseException):
    """The worker dies here (nothing in the activity catches it, as nothing runs after a SIGKILL)."""


def archive(effects: list[tuple[int, str]], die_at: set[int], reconcilable: bool = True) -> ToolRegistry:
    """`fetch` logs each fetch in `effects`; the first fetch of a page in `die_at` kills the
    attempt once the fetch is done. Its check finds a fetch by the call's key."""

    def fetched(page: int, ctx: ToolContext) -> str | None:
        return page_text(page) if (page, ctx.idempotency_key) in effects else None

    async def fetch(page: int, ctx: ToolContext) -> str:
        """Fetch a page."""
        effects.append((page, ctx.idempotency_key))
        if page in die_at:
            die_at.discard(page)
            raise Killed
        return page_text(page)

    tools = ToolRegistry()
    tools.register(tool(reconcile=fetched)(fetch) if reconcilable else tool(fetch))
    return tools


def script(tmp_path: Path, *turns: Any) -> str:
    path = tmp_path / "script.yaml"
    path.write_text(yaml.safe_dump({"executor": {"work": list(turns)}}))
    return str(path)


def asks(page: int) -> dict[str, Any]:
    """A model turn that asks for `page`."""
    return {"call": {"tool": "fetch", "args": {"page": page}}}


def request(model: str) -> activity_io.LlmStepInput:
    step = Step(id="work", title="work", kind=StepKind.llm, instructions="read", tools=["fetch"])
    return activity_io.LlmStepInput(
        run_id="r", execution_id="e", revision=1, step=step, instructions="read", model=f"scripted:{model}"
    )


def executor(model: str, tools: ToolRegistry, tmp_path: Path, progress: ExecutorProgress, saved: list) -> Executor:
    return Executor(
        ScriptedModel(model),
        request(model),
        tools,
        workspace=tmp_path,
        attempt=1 if not saved else 2,
        progress=progress,
        save=lambda p: saved.append(p.model_copy(deep=True)),
    )


async def test_a_call_in_flight_when_its_attempt_died_is_reconciled_not_made_again(tmp_path):
    effects: list[tuple[int, str]] = []
    tools = archive(effects, die_at={2})
    # Attempt 2 resumes two turns in: its script entry is turn 2 + attempt 2 - 1 (models/scripted.py).
    model = script(tmp_path, asks(1), asks(2), "unused", "read 2 pages")
    saved: list[ExecutorProgress] = []
    with pytest.raises(Killed):
        await executor(model, tools, tmp_path, ExecutorProgress(), saved).run()
    last = saved[-1]
    assert [c.call for c in last.in_flight] == [1] and len(last.tool_calls) == 1

    assert await executor(model, tools, tmp_path, last, saved).run() == "read 2 pages"
    assert [page for page, _ in effects] == [1, 2]  # the second page fetched once
    assert [(t.call, t.attempt, t.message) for t in last.tool_calls] == [(0, 1, ""), (1, 2, RECONCILED)]
    assert last.messages[-2].content == page_text(2)[:16_000] + "\n[cut: 20,000 characters in all]"
    assert last.in_flight == []


async def test_a_call_in_flight_of_a_tool_without_a_check_is_made_again_with_its_key(tmp_path):
    effects: list[tuple[int, str]] = []
    tools = archive(effects, die_at={2}, reconcilable=False)
    model = script(tmp_path, asks(1), asks(2), "unused", "read 2 pages")
    saved: list[ExecutorProgress] = []
    with pytest.raises(Killed):
        await executor(model, tools, tmp_path, ExecutorProgress(), saved).run()
    assert await executor(model, tools, tmp_path, saved[-1], saved).run() == "read 2 pages"
    assert [page for page, _ in effects] == [1, 2, 2] and effects[1][1] == effects[2][1]  # the same key, /c1
    assert effects[1][1].endswith("/work/r1/c1")


@pytest.mark.parametrize("reconcilable", [True, False], ids=["checked", "called-again"])
async def test_the_calls_of_one_answer_in_flight_when_the_attempt_died_keep_their_positions(tmp_path, reconcilable):
    # One answer asks for four pages at once; the worker dies while pages 0 and 2 are fetched,
    # after pages 1 and 3 were answered: the conversation holds the answers to the 2nd and 4th calls.
    effects: list[tuple[int, str]] = []
    tools = archive(effects, die_at={0, 2}, reconcilable=reconcilable)
    four = {"calls": [{"tool": "fetch", "args": {"page": p}} for p in range(4)]}
    model = script(tmp_path, four, "unused", "read 4 pages")
    saved: list[ExecutorProgress] = []
    with pytest.raises(Killed):
        await executor(model, tools, tmp_path, ExecutorProgress(), saved).run()
    last = saved[-1]
    assert [(c.call, c.tool) for c in last.in_flight] == [(0, "fetch"), (2, "fetch")]
    assert [t.call for t in last.tool_calls] == [1, 3]
    assert [m.tool_call_id for m in last.messages if m.role == "tool"] == ["call_0_1", "call_0_3"]

    assert await executor(model, tools, tmp_path, last, saved).run() == "read 4 pages"
    keys = {page: key.rsplit("/", 1)[1] for page, key in effects}
    assert keys == {p: f"c{p}" for p in range(4)}  # each page at its position, whatever attempt made it
    again = "" if not reconcilable else RECONCILED
    assert [(t.call, t.attempt, t.message) for t in last.tool_calls] == [
        (0, 2, again),
        (1, 1, ""),
        (2, 2, again),
        (3, 1, ""),
    ]
    assert [m.tool_call_id for m in last.messages if m.role == "tool"] == [f"call_0_{p}" for p in range(4)]
    assert last.in_flight == []
    fetched = [page for page, _ in effects]
    assert sorted(fetched) == ([0, 1, 2, 3] if reconcilable else [0, 0, 1, 2, 2, 3])


def test_a_checkpoint_from_before_several_calls_ran_at_once_names_its_one_call_or_none():
    one = {"call": 3, "tool": "fetch", "digest": "0" * 64}
    assert [c.call for c in ExecutorProgress.model_validate({"in_flight": one}).in_flight] == [3]
    assert ExecutorProgress.model_validate({"in_flight": None}).in_flight == []
    assert ExecutorProgress.model_validate({}).in_flight == []


async def test_another_call_at_the_position_in_flight_is_not_reconciled(tmp_path):
    # The conversation restarted (its checkpoint lost): the model now asks for page 5 at position 1.
    effects: list[tuple[int, str]] = [(2, "r/e/work/r1/c1")]
    tools = archive(effects, die_at=set())
    progress = ExecutorProgress.model_validate(
        {
            "tool_calls": [{"call": 0, "tool": "fetch", "status": "ok"}],
            "in_flight": {"call": 1, "tool": "fetch", "digest": "0" * 64},
        }
    )
    model = script(tmp_path, asks(5), "done")
    assert await executor(model, tools, tmp_path, progress, []).run() == "done"
    assert effects[1:] == [(5, "r/e/work/r1/c1")] and progress.tool_calls[-1].message == ""


async def test_a_check_that_fails_fails_the_attempt_and_the_next_checks_again(tmp_path):
    effects: list[tuple[int, str]] = []
    looks: list[str] = []

    def fetched(page: int, ctx: ToolContext) -> str | None:
        looks.append(ctx.idempotency_key)
        if len(looks) == 1:
            raise ConnectionError("the archive's index is down")
        return page_text(page) if (page, ctx.idempotency_key) in effects else None

    async def fetch(page: int, ctx: ToolContext) -> str:
        """Fetch a page."""
        effects.append((page, ctx.idempotency_key))
        if len(effects) == 1:
            raise Killed
        return page_text(page)

    tools = ToolRegistry()
    tools.register(tool(reconcile=fetched)(fetch))
    model = script(tmp_path, asks(1), "unused", "done")
    saved: list[ExecutorProgress] = []
    with pytest.raises(Killed):
        await executor(model, tools, tmp_path, ExecutorProgress(), saved).run()
    with pytest.raises(ConnectionError):
        await executor(model, tools, tmp_path, saved[-1], saved).run()
    assert [c.call for c in saved[-1].in_flight] == [0]  # still owed, still to be checked
    assert await executor(model, tools, tmp_path, saved[-1], saved).run() == "done"
    assert len(effects) == 1 and len(looks) == 2


# --- the activity --------------------------------------------------------------------------------


async def test_an_attempt_goes_on_from_its_last_round_whatever_details_the_server_kept(tmp_path):
    """Seven 20 KB pages (past what details may carry), the worker dead while fetching the seventh,
    and the server holding the attempt's first heartbeat only: the next attempt fetches nothing
    again and asks the model nothing again."""
    effects: list[tuple[int, str]] = []
    store = FileStore(tmp_path / "store")
    activities = ExecutionActivities(archive(effects, die_at={7}), tmp_path / "ws", store=store)
    # Attempt 2 resumes seven turns in: its script entry is turn 7 + attempt 2 - 1.
    model = script(tmp_path, *[asks(p) for p in range(1, 8)], "unused", "read 7 pages")
    beats: list[Any] = []

    async def attempt(number: int, previous: Any) -> activity_io.StepOutput:
        env = ActivityEnvironment()
        env.info = dataclasses.replace(env.info, attempt=number, heartbeat_details=[previous] if previous else [])
        env.on_heartbeat = lambda *details: beats.append(details[0] if details else None)
        return await env.run(activities.run_llm, request(model))

    with pytest.raises(Killed):
        await attempt(1, None)
    # The attempt saved as it started: the server got a reference before the first round.
    first = beats[0]
    assert first[CHECKPOINT]["slot"] == "store:runs/r/work/checkpoint.json" and first["calls"] == []
    assert all(len(json.dumps(b)) < 4_000 for b in beats)
    done = await attempt(2, first)
    assert done.output == "read 7 pages"
    assert [page for page, _ in effects] == list(range(1, 8))  # each page fetched once
    assert len({key for _, key in effects}) == 7
    assert [c.attempt for c in done.calls] == [1] * 7 + [2]  # seven rounds paid once, and the answer
    assert [(t.call, t.attempt) for t in done.tool_calls] == [(n, 1) for n in range(6)] + [(6, 2)]
    assert done.tool_calls[-1].message == RECONCILED
