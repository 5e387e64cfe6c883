"""Moving a long run's routine events out of its state, into the output store."""

from __future__ import annotations

import asyncio

from pydantic_core import to_json
from temporalio import activity

from stratagem.domain import activity_io
from stratagem.domain.ledger import EventArchive
from stratagem.io.store import OutputStore, default_store, store_json

from .errors import as_application_error


class ArchiveActivities:
    def __init__(self, store: OutputStore | None = None):
        self._store = store or default_store()

    @activity.defn(name=activity_io.ARCHIVE_EVENTS)
    async def archive_events(self, request: activity_io.ArchiveEventsInput) -> EventArchive:
        """Write the events as one stored value, `runs/<run>/events/<first>-<last>`. Writes are
        content-addressed, so a retried attempt stores them once."""
        events = request.events
        first, last = events[0].seq, events[-1].seq
        try:
            stored = await asyncio.to_thread(
                store_json, self._store, f"runs/{request.run_id}/events/{first}-{last}", to_json(events)
            )
        except Exception as exc:
            raise as_application_error(exc)  # its cause is a redacted copy (activities/errors.py)
        stored.pop("preview", None)  # a reference, not a summary: nobody reads these in the history
        return EventArchive(first_seq=first, last_seq=last, count=len(events), stored=stored)
