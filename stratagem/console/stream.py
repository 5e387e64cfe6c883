"""A run's ledger events over the API: a page of them (`/events`), or Server-Sent Events (`/stream`).

Each ledger event goes out with its `seq` as the event id, so a browser that reconnects sends
`Last-Event-ID` and misses and repeats nothing. That header and `?after=` come from the client:
anything but a whole number is a 400 with one line, never an error from deep inside.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import Response, StreamingResponse

from stratagem.client import RunHandle
from stratagem.common.errors import StratagemError
from stratagem.console.access import person
from stratagem.console.state import Console

POLL_SECONDS = 0.5
MAX_DIGITS = 18  # more than any ledger reaches; int() of a 5,000-digit string would raise instead

router = APIRouter(dependencies=[Depends(person)])


@router.get("/api/runs/{run_id}/events", tags=["runs"])
async def api_events(console: Console, run_id: str, after: str = "0") -> dict[str, Any]:
    """The run's ledger events after an offset (`seq`, a whole number), archived ones included."""
    page = await console.run(run_id).events(event_offset(after, "after"))
    return page.model_dump(mode="json")


@router.get("/api/runs/{run_id}/stream", tags=["runs"])
async def api_stream(request: Request, console: Console, run_id: str, after: str = "0") -> Response:
    """Server-Sent Events: one `ledger` event per ledger event, `id` its seq. A reconnect sends
    Last-Event-ID and misses and repeats nothing."""
    header = request.headers.get("last-event-id")
    start = event_offset(header, "Last-Event-ID") if header else event_offset(after, "after")
    events = ledger_events(request, console.run(run_id), start)
    return StreamingResponse(events, media_type="text/event-stream", headers={"Cache-Control": "no-store"})


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


__all__ = ["event_offset", "ledger_events", "router"]
