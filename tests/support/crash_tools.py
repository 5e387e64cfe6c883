"""Tools for the crash tests (tests/test_crash.py): slow steps with a side effect, leaving evidence.

Every call appends what it knows (run, step, revision, attempt, idempotency key, pid) to
`attempts.jsonl` in the workspace, at its start, after its side effect and at its end, so a test
can tell which attempts ran, on which worker process, and which of them a SIGKILL cut short.
Each record is one `write` to a file opened for appending, so records from several worker
processes never interleave, and a killed process leaves only whole records behind.

The side effect is a row in `effects/<run_id>.csv`, appended with the built-in `append_csv_row`,
which appends once per idempotency key: a retried attempt finds the row there and adds nothing.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any

from stratagem.common.errors import ToolError
from stratagem.tools import ToolContext, builtin, tool

ATTEMPTS_LOG = "attempts.jsonl"


def log_attempt(ctx: ToolContext, event: str, **extra: Any) -> None:
    ctx.workspace.mkdir(parents=True, exist_ok=True)
    record = {
        "event": event,
        "run_id": ctx.run_id,
        "execution_id": ctx.execution_id,
        "step": ctx.step_id,
        "revision": ctx.revision,
        "attempt": ctx.attempt,
        "key": ctx.idempotency_key,
        "pid": os.getpid(),
        "t": time.time(),
        **extra,
    }
    fd = os.open(ctx.workspace / ATTEMPTS_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(record) + "\n").encode())
    finally:
        os.close(fd)


@tool
async def crash_work(label: str, seconds: float, ctx: ToolContext) -> str:
    """Work for `seconds`; halfway through, record the step's side effect (once per idempotency key). Returns `label`."""
    log_attempt(ctx, "start", seconds=seconds)
    await asyncio.sleep(seconds / 2)
    effect = await asyncio.to_thread(
        builtin.append_csv_row,
        path=f"effects/{ctx.run_id}.csv",
        row={"step": ctx.step_id, "key": ctx.idempotency_key, "attempt": ctx.attempt, "pid": os.getpid()},
        ctx=ctx,
    )
    log_attempt(ctx, "effect", repeated=effect["repeated"])
    await asyncio.sleep(seconds / 2)
    log_attempt(ctx, "end")
    return label


@tool(requires_approval=True)
def crash_wire(amount: int, ctx: ToolContext) -> str:
    """Wire money: every call waits for a person. Records its effect once per idempotency key."""
    log_attempt(ctx, "wire", amount=amount)
    builtin.append_csv_row(
        path=f"effects/{ctx.run_id}.csv",
        row={"step": ctx.step_id, "key": ctx.idempotency_key, "amount": amount},
        ctx=ctx,
    )
    return f"wired {amount}"


@tool
def crash_fails_once(label: str, ctx: ToolContext) -> str:
    """Fails for good the first time a run's step calls it; works after (a repair's retry)."""
    path = ctx.workspace / ATTEMPTS_LOG
    earlier = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    log_attempt(ctx, "fails_once")
    if not any(e["event"] == "fails_once" and e["run_id"] == ctx.run_id for e in earlier):
        raise ToolError(f"{label}: the first try fails", retryable=False)
    return label


@tool
async def crash_wait_for(name: str, ctx: ToolContext) -> str:
    """Mark the workspace with `<name>.started`, then wait until a file `name` appears there and
    return its text; a text starting "fail" fails the step for good."""
    ctx.workspace.mkdir(parents=True, exist_ok=True)
    (ctx.workspace / f"{name}.started").write_text(str(os.getpid()))
    while not (ctx.workspace / name).exists():
        await asyncio.sleep(0.05)
    text = (ctx.workspace / name).read_text()
    if text.startswith("fail"):
        raise ToolError(text, retryable=False)
    return text
