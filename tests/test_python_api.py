"""`RunHandle.stream()`, the async iterator docs/python.md follows a run with: every event once, in
seq order, live; resumable from any offset; complete across continue-as-new and archived events;
alive through a lost connection; and over when the run is, not before."""

from __future__ import annotations

import asyncio
import logging
import uuid
from datetime import timedelta

import pytest
from support.plans import step
from support.tcp_proxy import CuttableProxy
from temporalio.client import Client
from temporalio.service import RetryConfig

from stratagem.client import get_run, start_run
from stratagem.common.errors import RunUnresponsiveError
from stratagem.domain.ledger import EventKind, Ledger, LedgerEvent
from stratagem.domain.plan import Author, AuthorKind, PlanDraft
from stratagem.domain.run_types import AnswerInput, RunInput
from stratagem.temporal.plugin import StratagemPlugin

pytestmark = pytest.mark.system

# Slow steps between quick ones: the run is still going while the stream reads it.
CHAIN = {
    "goal": "a chain",
    "steps": [
        step("a", "record", label="a"),
        step("b", "slow", ["a"], label="b", seconds=1.0),
        step("c", "record", ["b"], label="c"),
        step("d", "slow", ["c"], label="d", seconds=1.0),
        step("e", "record", ["d"], label="e"),
    ],
}


async def collect(events) -> list[LedgerEvent]:
    async with asyncio.timeout(90):  # a stream that never ends fails the test here
        return [event async for event in events]


def seqs(events: list[LedgerEvent]) -> list[int]:
    return [event.seq for event in events]


def same(events: list[LedgerEvent]) -> list[dict]:
    """Events as compared here: all but `at`. An event recorded after the start's local activity
    (the tool catalogue) bears the worker's clock when the run was live, and the workflow task's
    time once its history is replayed (tens of ms apart): the same event, seen twice."""
    return [event.model_dump(exclude={"at"}) for event in events]


async def test_the_stream_yields_every_event_once_in_order_live_and_ends_with_the_run(dev_harness):
    run = await dev_harness.start(CHAIN, auto_approve=True)
    seen: list[LedgerEvent] = []
    live = False
    async with asyncio.timeout(90):
        async for event in run.stream():
            if not seen:  # the first event came while the run was still going
                live = not (await run.status()).phase.finished
            seen.append(event)
    ledger = await run.ledger()
    assert live
    assert seqs(seen) == list(range(1, ledger.event_count + 1))
    assert same(seen) == same(ledger.events)
    assert seen[-1].kind is EventKind.run_succeeded


async def test_the_stream_waits_with_a_run_that_waits_for_a_person_and_ends_when_it_ends(dev_harness):
    plan = {
        "goal": "ask first",
        "steps": [
            step("a", "record", label="a"),
            {"id": "ask", "title": "Ask", "kind": "human", "instructions": "go on?", "depends_on": ["a"]},
            step("b", "record", ["ask"], label="b"),
        ],
    }
    run = await dev_harness.start(plan, auto_approve=True)
    following = asyncio.create_task(collect(run.stream()))
    await dev_harness.wait_for(run, lambda s: any(p.step_id == "ask" for p in s.pending))
    await asyncio.sleep(1.0)  # three polls with nothing new: still following, not over
    assert not following.done()
    await run.answer(AnswerInput(step_id="ask", answer="yes", by="ops"))
    seen = await following
    assert seqs(seen) == seqs((await run.ledger()).events)
    assert [e.kind for e in seen][-3:] == [EventKind.step_started, EventKind.step_succeeded, EventKind.run_succeeded]


async def test_resuming_from_an_offset_repeats_nothing_and_misses_nothing(dev_harness):
    run = await dev_harness.start(CHAIN, auto_approve=True)
    first: list[LedgerEvent] = []
    async for event in run.stream():
        first.append(event)
        if len(first) == 5:
            break  # a follower that stops mid-run, keeping the last seq it handled
    assert not (await run.status()).phase.finished, "the resume must happen mid-run to prove anything"
    rest = await collect(run.stream(after=first[-1].seq))
    ledger = await run.ledger()
    assert same(first + rest) == same(ledger.events)
    # Once the run has ended: from the end, nothing, at once; from near it, the rest.
    assert await collect(run.stream(after=ledger.event_count)) == []
    assert same(await collect(run.stream(after=ledger.event_count - 3))) == same(ledger.events[-3:])


async def test_a_run_that_continues_as_new_and_archives_its_events_streams_every_event(dev_harness):
    # 200 quick steps, continuing as new after 600 history events: by then about 177 steps have
    # run (measured: 354 routine events, started and succeeded), well over the 200 it takes to
    # move them to the store (workflows/continuation.py), and some are still to run after it.
    steps = [step(f"s{i}", "add", a=i, b=1) for i in range(200)]
    run = await dev_harness.start(
        {"goal": "many steps", "steps": steps}, auto_approve=True, continue_as_new_after_events=600, max_parallel=20
    )
    live = await collect(run.stream())
    held = await run.handle.query("ledger", result_type=Ledger)  # the run's own state, without the store
    print("archived:", [(a.first_seq, a.last_seq) for a in held.archives], "of", held.last_seq, "events")
    assert (await run.status()).continued >= 1
    assert held.archives, "the run must have archived events for this test to prove anything"
    archived = sum(archive.count for archive in held.archives)
    assert archived + len(held.events) == held.last_seq
    whole = list(range(1, held.last_seq + 1))
    assert seqs(live) == whole
    assert sum(e.kind is EventKind.step_succeeded for e in live) == 200
    # Read afterwards, the archived events come from the store, merged in seq order.
    again = get_run(dev_harness.client, run.id)
    again.store = dev_harness.store
    assert same(await collect(again.stream())) == same(live)
    assert seqs(await collect(again.stream(after=10))) == whole[10:]


async def test_the_stream_survives_a_lost_connection_and_resumes_from_the_last_event(dev_env, dev_harness, caplog):
    proxy = CuttableProxy(dev_env.client.service_client.config.target_host)
    await proxy.start()
    # One quick retry in the SDK (its default is 10 s of them), so the stream itself sees the loss.
    client = await Client.connect(
        proxy.address,
        namespace=dev_env.client.namespace,
        plugins=[StratagemPlugin(dev_env.client.data_converter)],
        retry_config=RetryConfig(max_retries=1, max_elapsed_time_millis=500),
    )
    run = await dev_harness.start(CHAIN, auto_approve=True)
    far = get_run(client, run.id)  # the run seen through the proxy; the worker keeps its own connection
    far.store = dev_harness.store
    seen: list[LedgerEvent] = []
    restore: asyncio.Task[str] | None = None

    async def back_in(seconds: float) -> str:
        await asyncio.sleep(seconds)
        return await proxy.start()

    try:
        with caplog.at_level(logging.WARNING, logger="stratagem.event_stream"):
            async with asyncio.timeout(90):
                async for event in far.stream():
                    seen.append(event)
                    if len(seen) == 3:
                        await proxy.cut()
                        restore = asyncio.create_task(back_in(2.0))
    finally:
        if restore is not None:
            await restore
        await proxy.cut()
    lost = [r.getMessage() for r in caplog.records if "lost the connection" in r.getMessage()]
    assert lost, "the stream must have seen the connection go for this test to prove anything"
    assert all(int(message.rsplit(" ", 1)[1]) > seen[2].seq for message in lost), lost  # from where it was
    assert proxy.connections >= 2  # it came back through a new connection
    assert same(seen) == same((await run.ledger()).events)  # nothing missed, nothing twice
    assert seen[-1].kind is EventKind.run_succeeded


async def test_a_run_nobody_hosts_raises_at_once_rather_than_waiting_for_ever(dev_harness):
    """Only a lost connection is retried: a query no worker answers is the caller's to handle."""
    draft = PlanDraft.model_validate({"goal": "g", "steps": [step("a", "record", label="a")]})
    run = await start_run(
        dev_harness.client,
        RunInput(plan=draft, author=Author(kind=AuthorKind.human, name="ops")),
        task_queue=f"nobody-{uuid.uuid4().hex[:8]}",
        rpc_timeout=timedelta(seconds=2),
    )
    dev_harness.runs.append(run)
    with pytest.raises(RunUnresponsiveError, match="no worker is running its workflow"):
        await collect(run.stream())
