"""History discipline: large data stays out of history, and a long run keeps each history bounded."""

from __future__ import annotations

from conftest import payload_sizes
from plans import step
from stratagem.client import execution_histories
from stratagem.store import is_stored

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

    # Every execution of the chain: bounded length, and no payload above the claim-check limit.
    histories = await execution_histories(harness.client, run.id)
    lengths = [len(h.events) for h in histories]
    largest = max(size for h in histories for size in payload_sizes(h))
    print(f"executions: {len(lengths)}, events per execution: {lengths}, largest payload: {largest} bytes")
    assert len(lengths) == status.continued + 1
    assert max(lengths) <= 12_000, lengths
    assert largest <= 128 * 1024 + 1024, largest
