"""One run, read: its page (its result once it ended, plan, graph, pending decisions, events), its
audit records, a step's output and a waiting call's arguments as downloads, and its status and
plan over the API. Everything here needs a signed-in person, and nothing here changes a run."""

from __future__ import annotations

import asyncio
import json
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import HTMLResponse, PlainTextResponse, Response

from stratagem.console.access import Person, person
from stratagem.console.plan_graph import plan_svg
from stratagem.console.result_panel import result_view
from stratagem.console.state import Console, ConsoleState
from stratagem.console.views import WHOLE, AnswerDraft, compensation_view, decision_view, diff_text, graph_columns
from stratagem.domain.risk import risk_label
from stratagem.domain.run_types import DecisionKind
from stratagem.domain.stored import is_stored
from stratagem.io.notify import link_valid
from stratagem.io.plan_files import dump_plan
from stratagem.io.store import default_store, load_value

router = APIRouter(dependencies=[Depends(person)])


async def render_run(
    request: Request,
    console: ConsoleState,
    who: str,
    run_id: str,
    *,
    error: str = "",
    done: str = "",
    edit: str | None = None,
    problems: list[str] | None = None,
    typed: dict[str, dict[str, str]] | None = None,
    refused: dict[str, str] | None = None,
    draft: AnswerDraft | None = None,
    status_code: int = 200,
) -> Response:
    """The run page: `edit` and `problems` bring back a refused plan edit beside its problems;
    `typed` and `refused`, by step, the arguments changed in a refused step approval and why;
    `draft` a refused answer with what was typed and each problem at its field."""
    run, status, ledger = await console.read(run_id)
    catalog = await run.catalog()
    plan = ledger.revisions[-1] if ledger.revisions else None
    approved = next((p for p in ledger.revisions if p.revision == status.approved_revision), None)
    columns = graph_columns(plan, ledger) if plan else []
    context = {
        "who": who,
        "csrf": console.identity.csrf_token(who),
        "status": status,
        "ledger": ledger,
        "plan": plan,
        "columns": columns,
        "graph": plan_svg(plan, columns, status.run_id) if plan else "",
        "result": await result_view(run, status, plan, ledger),
        "compensation": compensation_view(status.compensation, ledger),
        "risks": {s.id: risk_label(s, catalog) for s in plan.steps} if plan else {},
        "diff": diff_text(approved, plan) if plan and approved and approved.revision != plan.revision else [],
        "pending": [
            decision_view(p, plan, draft.values, draft.errors)
            if draft is not None and p.kind is DecisionKind.human_answer and p.step_id == draft.step_id
            else decision_view(
                p, plan, (typed or {}).get(p.step_id or ""), {WHOLE: (refused or {}).get(p.step_id or "", "")}
            )
            if p.kind is DecisionKind.step_approval
            else decision_view(p, plan)
            for p in status.pending
        ],
        "plan_yaml": edit if edit is not None else (dump_plan(plan.draft()) if plan else ""),
        "plan_problems": problems or [],
        "events": ledger.events[-200:],
        "process": status.process,
        "error": error,
        "done": done,
    }
    return console.templates.TemplateResponse(request, "run.html", context, status_code=status_code)


@router.get("/runs/{run_id}", response_class=HTMLResponse, include_in_schema=False)
async def run_page(
    request: Request,
    who: Person,
    console: Console,
    run_id: str,
    error: str = "",
    done: str = "",
    exp: str = "",
    sig: str = "",
) -> Response:
    if exp or sig:  # a link from a notification: say so if it was altered or is out of date
        if not link_valid(console.identity.secret, f"/runs/{quote(run_id, safe='')}", exp, sig):
            error = error or "this link has expired or was altered; the page below shows the run as it is now"
    return await render_run(request, console, who, run_id, error=error, done=done)


@router.get("/runs/{run_id}/audit.jsonl", include_in_schema=False)
async def audit(console: Console, run_id: str) -> Response:
    _, _, ledger = await console.read(run_id)
    lines = "".join(json.dumps(r, default=str, sort_keys=True) + "\n" for r in ledger.audit_records())
    headers = {"Content-Disposition": f'attachment; filename="{run_id}-audit.jsonl"'}
    return PlainTextResponse(lines, media_type="application/x-ndjson", headers=headers)


@router.get("/runs/{run_id}/steps/{step_id}/output", response_class=PlainTextResponse, include_in_schema=False)
async def output(console: Console, run_id: str, step_id: str, transcript: bool = False) -> Response:
    _, _, ledger = await console.read(run_id)
    record = ledger.steps.get(step_id)
    if record is None:
        raise HTTPException(404, f"run {run_id} has no step '{step_id}'")
    value = record.transcript if transcript else record.output
    if is_stored(value):
        value = await asyncio.to_thread(load_value, console.store or default_store(), value)
    text = value if isinstance(value, str) else json.dumps(value, indent=2, default=str, ensure_ascii=False)
    return PlainTextResponse(text)  # text/plain: whatever a tool or a model wrote is never markup here


@router.get("/runs/{run_id}/steps/{step_id}/calls/{call_id}/arguments.json", include_in_schema=False)
async def call_arguments(console: Console, run_id: str, step_id: str, call_id: str) -> Response:
    """A waiting tool call's arguments, every one, as the download its approval is about."""
    _, status, _ = await console.read(run_id)
    waiting = next(
        (p.call for p in status.pending if p.step_id == step_id and p.call and p.call.call_id == call_id), None
    )
    if waiting is None:
        raise HTTPException(404, f"step '{step_id}' of run {run_id} has no call {call_id} waiting")
    name = f"{run_id}-{step_id}-call-{call_id}.json"
    headers = {"Content-Disposition": f'attachment; filename="{name}"', "X-Stratagem-Digest": waiting.digest}
    return PlainTextResponse(waiting.arguments, media_type="application/json", headers=headers)


@router.get("/api/runs/{run_id}", tags=["runs"])
async def api_run(console: Console, run_id: str) -> dict[str, Any]:
    """A run's status, its current plan and its pending decisions."""
    _, status, ledger = await console.read(run_id)
    plan = ledger.revisions[-1] if ledger.revisions else None
    return {"status": status.model_dump(mode="json"), "plan": plan.model_dump(mode="json") if plan else None}


__all__ = ["render_run", "router"]
