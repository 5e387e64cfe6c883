"""The Runs page and `/api/runs`: every run in the namespace, newest first, filtered and paged
(stratagem.console.listing reads them from visibility). Nothing here changes a run."""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, Response

from stratagem.console.access import Person, person
from stratagem.console.listing import PAGE_SIZE, PHASES, WAITING_ANY, WAITING_KINDS, FilterError, RunFilter, list_runs
from stratagem.console.state import Console

router = APIRouter(dependencies=[Depends(person)])

Limit = Annotated[int, Query(ge=1, le=200, description="Runs per page.")]


def _filter(phase: str, waiting: str, mine: bool, q: str) -> RunFilter:
    return RunFilter(phase=phase, waiting=waiting, mine=mine, text=q)


@router.get("/runs", response_class=HTMLResponse, include_in_schema=False)
async def runs_page(
    request: Request,
    who: Person,
    console: Console,
    phase: str = "",
    waiting: str = "",
    mine: bool = False,
    q: str = "",
    cursor: str = "",
    limit: Limit = PAGE_SIZE,
) -> Response:
    wanted = _filter(phase, waiting, mine, q)
    error, rows, more, page = "", [], None, None
    try:
        page = await list_runs(
            console.client, who, wanted, limit=limit, cursor=cursor or None, secret=console.identity.secret
        )
        rows, more = page.runs, page.next
    except FilterError as exc:
        error = str(exc)
    shown = {"phase": phase, "waiting": waiting, "mine": "true" if mine else "", "q": q, "limit": limit}
    kept = {k: v for k, v in shown.items() if v and not (k == "limit" and v == PAGE_SIZE)}
    context = {
        "who": who,
        "csrf": console.identity.csrf_token(who),
        "rows": rows,
        "filters": {"phase": phase, "waiting": waiting, "mine": mine, "q": q},
        "phases": PHASES,
        "kinds": [WAITING_ANY, *WAITING_KINDS],
        "next_url": f"/runs?{urlencode({**kept, 'cursor': more})}" if more else "",
        "first_url": f"/runs?{urlencode(kept)}" if cursor else "",
        "error": error,
        "scanned": page.scanned if page else 0,
        "short": bool(more) and len(rows) < limit,  # stopped at the scan limit: older runs follow
    }
    return console.templates.TemplateResponse(request, "runs.html", context, status_code=400 if error else 200)


@router.get("/api/runs", tags=["runs"])
async def api_runs(
    who: Person,
    console: Console,
    phase: Annotated[str, Query(description=f"Only runs in this phase: one of {', '.join(PHASES)}.")] = "",
    waiting: Annotated[
        str, Query(description=f"Only runs waiting for this kind of decision ({WAITING_ANY}: any).")
    ] = "",
    mine: Annotated[bool, Query(description="Only runs with a decision the signed-in person may take.")] = False,
    q: Annotated[str, Query(description="Text the goal or the run id contains (any case).")] = "",
    cursor: Annotated[str, Query(description="The `next` of the page before.")] = "",
    limit: Limit = PAGE_SIZE,
) -> dict[str, Any]:
    """Every run in the namespace, runs still going first (newest first), then ended runs (latest
    ended first), one page at a time: `next` is the cursor to the
    rest (null: no more). Read from visibility and the runs' memos, without asking any run."""
    try:
        wanted = _filter(phase, waiting, mine, q)
        secret = console.identity.secret
        page = await list_runs(console.client, who, wanted, limit=limit, cursor=cursor or None, secret=secret)
    except FilterError as exc:
        raise HTTPException(400, str(exc)) from None
    return {"runs": page.runs, "next": page.next}


__all__ = ["router"]
