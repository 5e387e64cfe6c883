"""The inbox: every run waiting for a person, the longest waiting first, as a page and over the API."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, Response
from temporalio.client import Client

from stratagem.client import AWAITING_QUERY, get_run, has_status_attribute
from stratagem.console.access import Person, person
from stratagem.console.state import Console
from stratagem.domain.decisions import waiting_for
from stratagem.domain.run_types import WORKFLOW_NAME

INBOX_SCAN = 500
INBOX_SCAN_UNFILTERED = 100  # without the attribute every running run is a candidate: the newest only
INBOX_QUERIES = 16
INBOX_QUERY_TIMEOUT = timedelta(seconds=1)  # a hosted run answers in milliseconds

router = APIRouter()


async def waiting_runs(client: Client) -> list[dict[str, Any]]:
    """Runs waiting for a person: those the StratagemStatus attribute says wait, or, on a
    namespace without it, the newest running runs. Each is asked for its pending decisions,
    several at once and briefly: a run nobody hosts (its worker gone) is left out, not waited for."""
    if await has_status_attribute(client):
        listing = client.list_workflows(AWAITING_QUERY, limit=INBOX_SCAN)
    else:
        query = f"WorkflowType = '{WORKFLOW_NAME}' AND ExecutionStatus = 'Running'"
        listing = client.list_workflows(query, limit=INBOX_SCAN_UNFILTERED)
    ids = [execution.id async for execution in listing]
    gate = asyncio.Semaphore(INBOX_QUERIES)

    async def row(run_id: str) -> dict[str, Any] | None:
        async with gate:
            try:
                status = await get_run(client, run_id, rpc_timeout=INBOX_QUERY_TIMEOUT).status()
            except Exception:
                return None  # a run this console cannot read (no worker, another encryption key)
        if not status.pending or status.phase.finished:
            return None
        return {
            "run_id": status.run_id,
            "goal": status.goal,
            "phase": status.phase.value,
            "since": min(p.since for p in status.pending).isoformat(),
            "waiting": [waiting_for(p) for p in status.pending],
        }

    rows = [r for r in await asyncio.gather(*(row(i) for i in ids)) if r is not None]
    return sorted(rows, key=lambda r: r["since"])


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
async def inbox_page(request: Request, who: Person, console: Console) -> Response:
    context = {"who": who, "csrf": console.identity.csrf_token(who), "rows": await waiting_runs(console.client)}
    return console.templates.TemplateResponse(request, "inbox.html", context)


@router.get("/api/inbox", tags=["runs"], dependencies=[Depends(person)])
async def api_inbox(console: Console) -> list[dict[str, Any]]:
    """Every run waiting for a person, the longest waiting first."""
    return await waiting_runs(console.client)


__all__ = ["router", "waiting_runs"]
