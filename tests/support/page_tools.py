"""An archive whose pages an llm step reads, for the crash tests of llm steps (tests/test_crash_effects.py).

Every page is 20,000 characters, so a conversation that reads a dozen of them outgrows any
checkpoint kept in Temporal's heartbeat details. Every fetch (every call that reaches the archive)
is one line in `fetches.jsonl` in the workspace, with its idempotency key, so a test sees a page
fetched twice. `fetch_page` declares a reconcile check that finds a fetch by its key.

A file `hang_at` in the workspace names a page: the first fetch of it is logged, writes `hung`
beside it and then hangs (the worker is SIGKILLed there: the effect done, its result not recorded).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from stratagem.tools import ToolContext, tool

PAGE_CHARS = 20_000
FETCHES = "fetches.jsonl"


def page_text(page: int) -> str:
    """Page `page`'s text: the same every time, PAGE_CHARS characters."""
    line = f"page {page}: the archive's record of year {1900 + page}. "
    return (line * (PAGE_CHARS // len(line) + 1))[:PAGE_CHARS]


def fetches(workspace: Path) -> list[dict]:
    path = workspace / FETCHES
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def find_page(page: int, ctx: ToolContext) -> str | None:
    """The page an earlier attempt fetched under this call's key, if it did."""
    if any(row["key"] == ctx.idempotency_key and row["page"] == page for row in fetches(ctx.workspace)):
        return page_text(page)
    return None


def _fetch(page: int, ctx: ToolContext) -> str:
    ctx.workspace.mkdir(parents=True, exist_ok=True)
    row = {"page": page, "key": ctx.idempotency_key, "attempt": ctx.attempt, "pid": os.getpid()}
    fd = os.open(ctx.workspace / FETCHES, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(row) + "\n").encode())  # one write: a killed process leaves whole lines
    finally:
        os.close(fd)
    hang = ctx.workspace / "hang_at"
    if hang.exists() and hang.read_text().strip() == str(page) and not (ctx.workspace / "hung").exists():
        (ctx.workspace / "hung").write_text(ctx.idempotency_key)
        while True:  # the worker is killed here, the page fetched and its result not recorded
            time.sleep(1)
    return page_text(page)


@tool(reconcile=find_page)
def fetch_page(page: int, ctx: ToolContext) -> str:
    """Fetch one page of the archive (each fetch is logged; reconcilable by its key)."""
    return _fetch(page, ctx)
