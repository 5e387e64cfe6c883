"""The approval inbox: every run waiting for a person, read from visibility alone.

One visibility query on the StratagemStatus search attribute finds the runs; each run's memo
(`goal`, and `waiting`, stratagem.domain.decisions.listed) says what it waits for, since when
and who may decide it. No run is asked anything, so a page costs the same with 10 runs waiting
or 10,000. The console pages (`page`); the CLI reads every page (`every`).

Visibility keeps running runs newest started first, and pages are cut along that order with a
cursor naming where the last page stopped (a start time, and the runs at exactly it already
listed), so runs that leave or arrive between pages neither shift nor repeat the others. The
filters on what the memo holds (kind, who may decide, how long it waited) are applied as runs are
read; a page reads at most `SCAN` runs, so with a narrow filter it may hold fewer than `limit`
rows, and `next` says where to go on. `total` counts the runs the visibility query finds (every
run waiting, or with an age, every one started before it): the other filters are not counted.

A run approved a moment ago may stay listed until it writes its memo again (with its next
workflow task, once its first steps end): a decision on it is then refused by the run, as stale.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import json
from collections.abc import AsyncIterator, Collection
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.api.workflowservice.v1 import ListWorkflowExecutionsRequest
from temporalio.client import Client
from temporalio.service import RPCError

from stratagem.common.errors import StratagemError
from stratagem.domain.decisions import listed
from stratagem.domain.run_types import DecisionKind
from stratagem.status_attribute import AWAITING_QUERY

DEFAULT_LIMIT = 50
MAX_LIMIT = 500
SCAN = 2000
"""The most runs one page reads: a filter few runs pass answers in bounded time, and goes on from `next`."""
UNREADABLE_GOAL = "(unreadable: encrypted with a key this reader lacks)"
_CURSOR_VERSION = 1


class InboxError(StratagemError):
    """A request the inbox cannot answer as asked: a cursor it did not give, an unknown kind."""


@dataclass(frozen=True)
class Filter:
    """Which waiting runs to list. `decider`: only those this person may decide; `kinds`: only
    those waiting for one of these (DecisionKind values); `older_than`: only those waiting longer."""

    kinds: frozenset[str] = frozenset()
    decider: str | None = None
    older_than: timedelta | None = None

    @classmethod
    def of(cls, kinds: Collection[str] = (), decider: str | None = None, older_than: timedelta | None = None) -> Filter:
        known = {k.value for k in DecisionKind}
        unknown = sorted(set(kinds) - known)
        if unknown:
            raise InboxError(f"unknown waiting kind '{unknown[0][:40]}'; choose from {', '.join(sorted(known))}")
        if older_than is not None and older_than < timedelta(0):
            raise InboxError("the age to wait longer than must not be negative")
        return cls(frozenset(kinds), decider or None, older_than)

    def fingerprint(self) -> str:
        """What a cursor is bound to: it goes on only with the filter that made it."""
        text = json.dumps(
            [sorted(self.kinds), self.decider, self.older_than.total_seconds() if self.older_than else None]
        )
        return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass
class Page:
    runs: list[dict[str, Any]]
    next: str | None
    total: int
    scanned: int = 0

    def as_json(self) -> dict[str, Any]:
        return {"runs": self.runs, "next": self.next, "total": self.total}


@dataclass(frozen=True)
class _Position:
    """Where a page stopped: runs started at `before` or earlier come next, but for `seen`."""

    before: datetime
    seen: tuple[str, ...] = ()


def _encode(position: _Position, chosen: Filter) -> str:
    body = {
        "v": _CURSOR_VERSION,
        "t": position.before.isoformat(),
        "s": list(position.seen),
        "f": chosen.fingerprint(),
    }
    raw = json.dumps(body, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode(cursor: str, chosen: Filter) -> _Position:
    """A cursor this inbox gave for this filter, or InboxError: never a wider or other listing."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        body = json.loads(raw)
        before = datetime.fromisoformat(body["t"])
        seen = tuple(str(s) for s in body["s"])
        made_for, version = body["f"], body["v"]
    except (binascii.Error, ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise InboxError("the cursor is not one the inbox gave; start again from the first page") from None
    if version != _CURSOR_VERSION or before.tzinfo is None or len(seen) > MAX_LIMIT:
        raise InboxError("the cursor is not one the inbox gave; start again from the first page")
    if made_for != chosen.fingerprint():
        raise InboxError("the cursor belongs to another filter; start again from the first page")
    return _Position(before, seen)


def _when(moment: datetime) -> str:
    # Visibility's own form of a time: UTC, to the microsecond.
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _query(chosen: Filter, now: datetime, position: _Position | None = None) -> str:
    query = AWAITING_QUERY
    if chosen.older_than is not None:
        # A run waits no longer than it has existed: the runs started since cannot pass.
        query += f" AND StartTime <= '{_when(now - chosen.older_than)}'"
    if position is not None:
        # Up to the end of that microsecond: a time kept more finely than a datetime holds stays in.
        query += f" AND StartTime < '{_when(position.before + timedelta(microseconds=1))}'"
    return query


async def count(client: Client, chosen: Filter, now: datetime) -> int:
    return (await client.count_workflows(_query(chosen, now))).count


@dataclass(frozen=True)
class Listed:
    """A waiting run as visibility lists it: its id, when it started, and the memo keys the inbox reads."""

    run_id: str
    started: datetime | None
    memo: dict[str, Any]


MEMO_KEYS = ("goal", "waiting")
PAGE_SIZE = 1000  # the most a visibility page holds by default (frontend.visibilityMaxPageSize)


async def _listed(client: Client, query: str, page_size: int = PAGE_SIZE) -> AsyncIterator[Listed]:
    """Every run the query finds, page after page. Read from the raw pages, each page's memos
    decoded in one call, and the next page asked for while this one is read: with thousands of
    runs the SDK's per-run conversions (every search attribute, each memo key apart) were most
    of the time."""
    request = ListWorkflowExecutionsRequest(namespace=client.namespace, page_size=page_size, query=query)
    asking = asyncio.ensure_future(client.workflow_service.list_workflow_executions(request))
    try:
        while True:
            response = await asking
            if response.next_page_token:
                request = ListWorkflowExecutionsRequest(
                    namespace=client.namespace,
                    page_size=page_size,
                    query=query,
                    next_page_token=response.next_page_token,
                )
                asking = asyncio.ensure_future(client.workflow_service.list_workflow_executions(request))
            for found in await _decoded(client, response.executions):
                yield found
            if not response.next_page_token:
                return
    finally:
        if not asking.done():
            asking.cancel()


async def _decoded(client: Client, executions: Any) -> list[Listed]:
    places: list[tuple[int, str]] = []
    payloads = []
    for i, info in enumerate(executions):
        for key in MEMO_KEYS:
            if key in info.memo.fields:
                places.append((i, key))
                payloads.append(info.memo.fields[key])
    memos: list[dict[str, Any]] = [{} for _ in executions]
    try:
        values = await client.data_converter.decode(payloads) if payloads else []
    except Exception:
        values = None  # one memo this reader cannot decode (another key): each on its own, below
    if values is not None:
        for (i, key), value in zip(places, values, strict=True):
            memos[i][key] = value
    else:
        for i, key in places:
            try:
                memos[i][key] = (await client.data_converter.decode([executions[i].memo.fields[key]]))[0]
            except Exception:
                memos[i] = {"goal": UNREADABLE_GOAL}  # encrypted with a key this reader lacks: listed, saying so
    return [
        Listed(
            info.execution.workflow_id,
            info.start_time.ToDatetime(tzinfo=UTC) if info.HasField("start_time") else None,
            memo,
        )
        for info, memo in zip(executions, memos, strict=True)
    ]


def row(found: Listed, who: str | None, now: datetime) -> dict[str, Any]:
    """A run as the inbox lists it (the same for the console and `stratagem list --json`)."""
    memo = found.memo
    waiting = [w for w in memo.get("waiting") or [] if isinstance(w, dict)]
    since = min((str(w["since"]) for w in waiting if w.get("since")), default=None)
    started = found.started.isoformat() if found.started else None
    listed_row: dict[str, Any] = {
        "run_id": found.run_id,
        "goal": str(memo.get("goal", "")),
        "since": since or started,
        "started_at": started,
        "waiting_for": [listed.words(w) for w in waiting],
        "waiting": waiting,
    }
    if who is not None:
        listed_row["may_decide"] = [listed.may_decide(w, who, now) for w in waiting]
    return listed_row


def _passes(chosen: Filter, memo: dict[str, Any], now: datetime) -> bool:
    waiting = [w for w in memo.get("waiting") or [] if isinstance(w, dict)]
    if chosen.kinds and not any(w.get("kind") in chosen.kinds for w in waiting):
        return False
    if chosen.older_than is not None:
        ages = [age for w in waiting if (age := listed.waited(w, now)) is not None]
        if not ages or max(ages) < chosen.older_than:
            return False
    if chosen.decider is not None and not any(listed.may_decide(w, chosen.decider, now) for w in waiting):
        return False
    return True


async def page(
    client: Client,
    *,
    chosen: Filter | None = None,
    cursor: str | None = None,
    limit: int = DEFAULT_LIMIT,
    who: str | None = None,
    now: datetime | None = None,
    scan: int = SCAN,
) -> Page:
    """One page of the inbox: up to `limit` runs after `cursor` (None: from the first), with
    `next` to go on (None: nothing after), and `total`. `who`: say for each wait whether this
    person may decide it (`may_decide`)."""
    chosen = chosen or Filter()
    now = now or datetime.now(UTC)
    limit = max(1, min(limit, MAX_LIMIT))
    position = _decode(cursor, chosen) if cursor else None
    total = await count(client, chosen, now)
    seen = set(position.seen) if position is not None else set()
    rows: list[dict[str, Any]] = []
    # The start time of the last run read, and every run read at exactly it: where the next page begins.
    at, at_ids = (position.before, list(position.seen)) if position is not None else (None, [])
    scanned = 0
    try:
        async for found in _listed(client, _query(chosen, now, position), min(max(limit * 2, 100), PAGE_SIZE)):
            if found.run_id in seen:
                continue
            if len(rows) == limit or scanned >= scan:
                assert at is not None  # more follow: the next page starts where this one stopped
                return Page(rows, _encode(_Position(at, tuple(at_ids)), chosen), total, scanned)
            scanned += 1
            started = found.started or now
            if started == at:
                at_ids.append(found.run_id)
            else:
                at, at_ids = started, [found.run_id]
            if _passes(chosen, found.memo, now):
                rows.append(row(found, who, now))
    except RPCError as exc:
        raise InboxError(f"visibility refused the inbox's query: {exc.message}") from None
    return Page(rows, None, total, scanned)


async def every(
    client: Client,
    chosen: Filter | None = None,
    *,
    who: str | None = None,
    now: datetime | None = None,
    page_size: int = PAGE_SIZE,
) -> AsyncIterator[dict[str, Any]]:
    """Every waiting run the filter passes, read through visibility's pages to the end."""
    chosen = chosen or Filter()
    now = now or datetime.now(UTC)
    try:
        async for found in _listed(client, _query(chosen, now), page_size):
            if _passes(chosen, found.memo, now):
                yield row(found, who, now)
    except RPCError as exc:
        raise InboxError(f"visibility refused the inbox's query: {exc.message}") from None


__all__ = ["DEFAULT_LIMIT", "MAX_LIMIT", "Filter", "InboxError", "Page", "count", "every", "page", "row"]
