"""A run's ledger as Server-Sent Events, and the event offsets a client may ask it from.

Each ledger event goes out with its `seq` as the event id, so a browser that reconnects sends
`Last-Event-ID` and misses and repeats nothing. That header and `?after=` come from the client:
anything but a whole number is a 400 with one line, never an error from deep inside.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from fastapi import HTTPException, Request

from ..client import RunHandle
from ..errors import StratagemError

POLL_SECONDS = 0.5
MAX_DIGITS = 18  # more than any ledger reaches; int() of a 5,000-digit string would raise instead


def event_offset(value: str | None, what: str) -> int:
    """The event number to start after: empty means from the start."""
    text = (value or "").strip()
    if not text:
        return 0
    if not (text.isascii() and text.isdigit()) or len(text) > MAX_DIGITS:
        raise HTTPException(400, f"{what} must be an event number (a whole number from 0), not '{text[:40]}'")
    return int(text)


async def ledger_events(request: Request, run: RunHandle, after: int) -> AsyncIterator[bytes]:
    """`ledger` events after `after` until the run ends (then `end`), or `error` once it stops answering."""
    seen = after
    while True:
        try:
            page = await run.events(seen)
        except StratagemError as exc:
            yield f"event: error\ndata: {json.dumps({'detail': str(exc)})}\n\n".encode()
            return
        for event in page.events:
            seen = event.seq
            yield f"id: {event.seq}\nevent: ledger\ndata: {event.model_dump_json()}\n\n".encode()
        if page.phase.finished and seen >= page.last_seq:
            yield f"event: end\ndata: {json.dumps({'phase': page.phase.value})}\n\n".encode()
            return
        if await request.is_disconnected():
            return
        await asyncio.sleep(POLL_SECONDS)


__all__ = ["event_offset", "ledger_events"]
