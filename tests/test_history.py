"""History discipline: large data stays out of history, and a long run keeps each history bounded."""

from __future__ import annotations

import pytest
from conftest import payload_sizes
from support.plans import step

from stratagem.client import execution_histories
from stratagem.domain.ledger import ROUTINE_EVENTS, EventKind, Ledger
from stratagem.io.store import is_stored

pytestmark = pytest.mark.workflow

STEPS = 2000


async def test_two_thousand_steps_with_large_outputs_keep_every_history_bounded(harness):
    # Wide and deep at once: 40 chains of 50 steps, every output 20 KiB (above the inline limit).
    steps = []
    for chain in range(40):
        for link in range(STEPS // 40):
            sid = f"c{chain}_{link}"
            after = [f"c{chain}_{link - 1}"] if link else []
            steps.append(step(sid, "big_output", after, kib=20))
    run = await harness.start({"goal": "a long run", "steps": steps}, auto_approve=True, max_parallel=40)
    result = await run.result()
    assert len(result.outputs) == 40 and all(is_stored(o) for o in result.outputs.values())

    ledger = await run.ledger()
    assert sum(r.status.value == "succeeded" for r in ledger.steps.values()) == STEPS
    assert all(is_stored(r.output) for r in ledger.steps.values())
    status = await run.status()
    assert status.continued >= 1, "a run this long must continue as new"

    # Each continue-as-new moved the routine events to the store: the run's state holds only the
    # rest, and the client reads the whole stream back, every seq once and in order.
    held = await run.handle.query("ledger", result_type=Ledger)
    assert held.archives and sum(a.count for a in held.archives) + len(held.events) == held.last_seq
    assert not any(e.kind in ROUTINE_EVENTS and e.seq <= held.archives[-1].last_seq for e in held.events)
    assert [e.seq for e in ledger.events] == list(range(1, held.last_seq + 1))
    assert sum(e.kind is EventKind.step_succeeded for e in ledger.events) == STEPS
    page = await run.events(after=5, limit=300)
    assert [e.seq for e in page.events] == list(range(6, 306)) and page.last_seq == held.last_seq

    # Every execution of the chain: bounded length, and no payload above the claim-check limit.
    histories = await execution_histories(harness.client, run.id)
    lengths = [len(h.events) for h in histories]
    largest = max(size for h in histories for size in payload_sizes(h))
    print(f"executions: {len(lengths)}, events per execution: {lengths}, largest payload: {largest} bytes")
    assert len(lengths) == status.continued + 1
    assert max(lengths) <= 12_000, lengths
    assert largest <= 128 * 1024 + 1024, largest
