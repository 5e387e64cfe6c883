"""A run's progress as an async iterator: `RunHandle.stream()`.

It reads the run's events page by page (`RunHandle.events`, which merges events a long run moved
to the output store), yields each once, in seq order, and ends when the run has finished and its
last event was yielded. As `stratagem watch` does, it survives a lost connection: it retries from
the last event it yielded, so nothing is missed or repeated.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from temporalio.service import RPCError, RPCStatusCode

from stratagem.domain.ledger import LedgerEvent
from stratagem.domain.run_types import EventPage

# How long the stream waits before asking again when it has yielded every event recorded so far.
# A run records a few events per step; 0.3 s keeps a person's view current (the CLI polls as
# often) at one small query per 0.3 s per follower, which a worker answers from its cache.
POLL_SECONDS = 0.3
# After a lost connection: the first wait, doubled at each failure up to the last.
RETRY_FIRST_SECONDS = 0.5
RETRY_MAX_SECONDS = 10.0

logger = logging.getLogger(__name__)


def connection_lost(exc: BaseException) -> bool:
    """True if `exc`, or an exception it wraps, says the Temporal server cannot be reached."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, RPCError) and current.status is RPCStatusCode.UNAVAILABLE:
            return True
        if "tcp connect error" in str(current).lower():
            return True
        current = current.__cause__ or current.__context__
    return False


async def stream_events(
    fetch: Callable[[int], Awaitable[EventPage]],
    after: int = 0,
    *,
    poll: float = POLL_SECONDS,
    run_id: str = "",
) -> AsyncIterator[LedgerEvent]:
    """The events `fetch(after)` pages through, each once, from seq `after + 1` on.

    Ends once a page says the run has finished and no event is left after the last one yielded.
    A lost connection is logged (logger `stratagem.event_stream`, WARNING) and retried from the
    last event yielded, waiting RETRY_FIRST_SECONDS, then twice as long each time, up to
    RETRY_MAX_SECONDS, for as long as it takes: bound it with `asyncio.timeout` if the caller cannot
    wait. Anything else (no worker answers the query: RunUnresponsiveError) is raised.
    """
    delay = RETRY_FIRST_SECONDS
    while True:
        try:
            page = await fetch(after)
        except Exception as exc:
            if not connection_lost(exc):
                raise
            logger.warning("lost the connection to Temporal; retrying run %s from event %d", run_id, after + 1)
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_MAX_SECONDS)
            continue
        delay = RETRY_FIRST_SECONDS
        start = after
        for event in page.events:
            if event.seq <= after:
                continue  # never again, whatever a page holds
            yield event
            after = event.seq
        if after >= page.last_seq and page.phase.finished:
            return
        if after >= page.last_seq or after == start:  # nothing new yet: a full page is followed at once
            await asyncio.sleep(poll)
