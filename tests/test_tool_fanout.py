"""The tool calls of one model answer in an llm step run concurrently (stratagem/io/tool_round.py):
at most `max_parallel` at once, sync and async tools alike, each at the position (and so with the
key) the answer's order gives it, answered in that order whatever order they finish in; refused
and malformed calls answered at once; a call that waits for a person stops the round after the
calls before it; a cancelled attempt leaves no call running. A real run on the dev server:
tests/test_workflow_wire.py::test_a_joint_run_makes_the_calls_of_one_answer_at_once."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from stratagem.domain import activity_io
from stratagem.domain.ledger import ToolCallStatus
from stratagem.domain.plan import Step, StepKind
from stratagem.io.executor import AwaitingApproval, Executor, ExecutorProgress
from stratagem.io.in_flight import arguments_digest
from stratagem.models import ScriptedModel
from stratagem.tools import ToolContext, ToolRegistry, tool

pytestmark = pytest.mark.unit

Span = tuple[str, float, float, str]  # label, start, end, key


def registry(spans: list[Span], started: list[str] | None = None) -> ToolRegistry:
    """`nap` (blocking) and `doze` (async) sleep `seconds` and record when, under which key;
    `pay` waits for a person's approval."""

    @tool
    def nap(label: str, seconds: float, ctx: ToolContext) -> str:
        """Sleep in a thread."""
        start = time.monotonic()
        time.sleep(seconds)
        spans.append((label, start, time.monotonic(), ctx.idempotency_key))
        return f"napped {label}"

    @tool
    async def doze(label: str, seconds: float, ctx: ToolContext) -> str:
        """Sleep on the event loop."""
        start = time.monotonic()
        if started is not None:
            started.append(label)
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            spans.append((f"{label} cancelled", start, time.monotonic(), ctx.idempotency_key))
            raise
        spans.append((label, start, time.monotonic(), ctx.idempotency_key))
        return f"dozed {label}"

    @tool(requires_approval=True)
    def pay(amount: int, ctx: ToolContext) -> str:
        """Pay an amount."""
        spans.append((f"pay {amount}", time.monotonic(), time.monotonic(), ctx.idempotency_key))
        return f"paid {amount}"

    tools = ToolRegistry()
    for fn in (nap, doze, pay):
        tools.register(fn)
    return tools


def call(tool_name: str, label: str, seconds: float = 0.0) -> dict[str, Any]:
    return {"tool": tool_name, "args": {"label": label, "seconds": seconds}}


def executor(
    tmp_path: Path,
    answer: list[dict[str, Any]],
    spans: list[Span],
    *,
    max_parallel: int = 8,
    progress: ExecutorProgress | None = None,
    saved: list[ExecutorProgress] | None = None,
    decisions: dict[str, activity_io.CallDecision] | None = None,
    started: list[str] | None = None,
) -> Executor:
    """An executor whose model asks for `answer`'s calls in one answer, then says "done"."""
    path = tmp_path / "script.yaml"
    path.write_text(yaml.safe_dump({"executor": {"work": [{"calls": answer}, "done"]}}))
    step = Step(id="work", title="work", kind=StepKind.llm, instructions="go", tools=["nap", "doze", "pay"])
    request = activity_io.LlmStepInput(
        run_id="r",
        execution_id="e",
        revision=1,
        step=step,
        instructions="go",
        model=f"scripted:{path}",
        max_parallel=max_parallel,
        call_decisions=decisions or {},
    )
    keep = saved if saved is not None else []
    return Executor(
        ScriptedModel(str(path)),
        request,
        registry(spans, started),
        workspace=tmp_path,
        attempt=1,
        progress=progress if progress is not None else ExecutorProgress(),
        save=lambda p: keep.append(p.model_copy(deep=True)),
    )


def most_at_once(spans: list[Span]) -> int:
    edges = sorted([(s, 1) for _, s, _, _ in spans] + [(e, -1) for _, _, e, _ in spans], key=lambda x: (x[0], x[1]))
    running = peak = 0
    for _, step in edges:
        running += step
        peak = max(peak, running)
    return peak


async def test_the_calls_of_one_answer_run_at_once_and_are_answered_in_its_order(tmp_path):
    # Blocking and async tools, the first call the slowest: they finish in the reverse order.
    answer = [call("nap" if n % 2 else "doze", f"c{n}", 0.6 - 0.1 * n) for n in range(6)]
    spans: list[Span] = []
    saved: list[ExecutorProgress] = []
    began = time.monotonic()
    progress = ExecutorProgress()
    assert await executor(tmp_path, answer, spans, progress=progress, saved=saved).run() == "done"
    assert time.monotonic() - began < 1.5  # one after another: 2.1 s
    assert most_at_once(spans) == 6
    assert [label for label, *_ in spans] == [f"c{n}" for n in reversed(range(6))]  # finished last first
    # Answered in the answer's order, each at its position and with its key.
    assert [m.tool_call_id for m in progress.messages if m.role == "tool"] == [f"call_0_{n}" for n in range(6)]
    assert [m.content for m in progress.messages if m.role == "tool"] == [
        f"{'napped' if n % 2 else 'dozed'} c{n}" for n in range(6)
    ]
    assert [(t.call, t.tool, t.status) for t in progress.tool_calls] == [
        (n, "nap" if n % 2 else "doze", ToolCallStatus.ok) for n in range(6)
    ]
    assert {label: key.rsplit("/", 1)[1] for label, _, _, key in spans} == {f"c{n}": f"c{n}" for n in range(6)}
    # The save before any call ran named all six (position, tool, digest of the arguments); each
    # save after a call finished named those still running; the last, none.
    first = next(s for s in saved if s.in_flight)
    assert not first.tool_calls
    assert [(c.call, c.tool, c.digest) for c in first.in_flight] == [
        (n, a["tool"], arguments_digest(a["args"])) for n, a in enumerate(answer)
    ]
    named = [[c.call for c in s.in_flight] for s in saved if s.tool_calls and len(s.tool_calls) < 6]
    assert named == [list(range(6 - k)) for k in range(1, 6)]
    assert progress.in_flight == [] and saved[-1].in_flight == []


async def test_at_most_max_parallel_calls_run_at_once_started_in_the_answers_order(tmp_path):
    answer = [call("nap" if n % 2 else "doze", f"c{n}", 0.15) for n in range(7)]
    spans: list[Span] = []
    progress = ExecutorProgress()
    assert await executor(tmp_path, answer, spans, max_parallel=3, progress=progress).run() == "done"
    assert most_at_once(spans) == 3
    by_start = [label for label, *_ in sorted(spans, key=lambda s: s[1])]
    assert set(by_start[:3]) == {"c0", "c1", "c2"} and by_start[-1] == "c6"  # started in the answer's order
    assert [t.call for t in progress.tool_calls] == list(range(7))


async def test_blocking_tools_overlap_past_the_event_loops_default_threads(tmp_path):
    # The loop's default executor has min(32, CPUs + 4) threads: 6 on a 2-CPU machine.
    answer = [call("nap", f"c{n}", 0.3) for n in range(12)]
    spans: list[Span] = []
    assert await executor(tmp_path, answer, spans, max_parallel=12).run() == "done"
    assert most_at_once(spans) == 12


async def test_refused_and_malformed_calls_are_answered_at_once_at_their_positions(tmp_path):
    answer = [
        call("doze", "a", 0.3),
        {"tool": "delete_everything", "args": {}},
        {"tool": "nap", "args": "not an object"},
        call("nap", "b", 0.3),
    ]
    spans: list[Span] = []
    saved: list[ExecutorProgress] = []
    progress = ExecutorProgress()
    assert await executor(tmp_path, answer, spans, progress=progress, saved=saved).run() == "done"
    assert most_at_once(spans) == 2
    # Before the two naps ran, the refused and the malformed call were answered, and not named in flight.
    first = next(s for s in saved if s.in_flight)
    assert [(t.call, t.status) for t in first.tool_calls] == [(1, ToolCallStatus.refused), (2, ToolCallStatus.error)]
    assert [c.call for c in first.in_flight] == [0, 3]
    assert [(t.call, t.status) for t in progress.tool_calls] == [
        (0, ToolCallStatus.ok),
        (1, ToolCallStatus.refused),
        (2, ToolCallStatus.error),
        (3, ToolCallStatus.ok),
    ]
    results = [m for m in progress.messages if m.role == "tool"]
    assert [m.tool_call_id for m in results] == [f"call_0_{n}" for n in range(4)]
    assert [m.is_error for m in results] == [False, True, True, False]
    assert sorted(key.rsplit("/", 1)[1] for *_, key in spans) == ["c0", "c3"]


async def test_a_call_waiting_for_a_person_stops_the_round_after_the_calls_before_it(tmp_path):
    answer = [
        call("doze", "a", 0.3),
        call("nap", "b", 0.3),
        {"tool": "pay", "args": {"amount": 100}},
        call("doze", "c", 0.3),
    ]
    spans: list[Span] = []
    progress = ExecutorProgress()
    with pytest.raises(AwaitingApproval) as paused:
        await executor(tmp_path, answer, spans, progress=progress).run()
    assert paused.value.awaited.call_id == "2" and paused.value.awaited.tool == "pay"
    assert sorted(label for label, *_ in spans) == ["a", "b"] and most_at_once(spans) == 2
    assert [t.call for t in progress.tool_calls] == [0, 1] and progress.in_flight == []

    # The next dispatch, with the decision, answers the paid call and the one after it, at their positions.
    approved = {"2": activity_io.CallDecision(approved=True, by="dana")}
    resumed = progress.resumed()
    assert await executor(tmp_path, answer, spans, progress=resumed, decisions=approved).run() == "done"
    assert {label: key.rsplit("/", 1)[1] for label, _, _, key in spans} == {
        "a": "c0",
        "b": "c1",
        "pay 100": "c2",
        "c": "c3",
    }
    assert [(t.call, t.message) for t in resumed.new_tool_calls] == [(2, "approved by dana"), (3, "")]
    assert [m.tool_call_id for m in resumed.messages if m.role == "tool"] == [f"call_0_{n}" for n in range(4)]


async def test_a_cancelled_attempt_cancels_every_call_it_was_running(tmp_path):
    answer = [call("doze", f"c{n}", 30) for n in range(3)]
    spans: list[Span] = []
    started: list[str] = []
    run = asyncio.create_task(executor(tmp_path, answer, spans, started=started).run())
    while len(started) < 3:
        await asyncio.sleep(0.01)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    # Each call's coroutine saw the cancel before the attempt ended: none is left running.
    assert sorted(label for label, *_ in spans) == ["c0 cancelled", "c1 cancelled", "c2 cancelled"]
