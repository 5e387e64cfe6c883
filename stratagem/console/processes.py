"""The Processes page and the Start form: every process of the library (its versions, digest,
description, inputs, and its schedules with their next run times, to pause, resume or trigger),
and a form per process that starts a run of it.

Where processes come from is the console's configuration (its process folders, then the library's
usual places: stratagem.io.process_library), never a request: a request names a process and a
version, and one the library does not hold starts nothing. A file that does not load is listed as
a problem on the page. Starting a run is a change like a decision: a signed-in person, from the
console's own page, with their CSRF token (`CheckedForm`; over the API, `Decider`), recorded as
the run's `started_by`. The inputs are checked as the run checks them before anything starts.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Annotated, Any
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Body, Depends, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import BaseModel, Field, ValidationError
from temporalio.service import RPCError

from stratagem.client import RunHandle
from stratagem.common.errors import StratagemError
from stratagem.console.access import CheckedForm, Decider, Person, person
from stratagem.console.process_schedules import NotOurs, act, process_schedules
from stratagem.console.start_form import FIELD_PREFIX, StartDraft, read_start, shown, start_fields
from stratagem.console.state import Console, ConsoleState
from stratagem.console.views import WHOLE, field_label, one_line
from stratagem.domain.process import ProcessSpec, inputs_schema, run_values
from stratagem.io.process_library import ProcessLibrary, ProcessNotFound
from stratagem.process_runs import start_process as start_process_run

router = APIRouter(dependencies=[Depends(person)])


async def library_of(console: ConsoleState) -> ProcessLibrary:
    return await asyncio.to_thread(console.library)  # reads folders and entry points


def find(library: ProcessLibrary, name: str, version: str | None) -> ProcessSpec:
    """The process a request names; a 404 saying what the library holds when it does not."""
    try:
        return library.get(name, version or None)
    except ProcessNotFound as exc:
        raise HTTPException(404, str(exc)) from None


def input_rows(spec: ProcessSpec) -> list[dict[str, Any]]:
    """Each input in a line of the Processes page: its label, type, whether it is required (or its
    default), its choices and bounds, and its description."""
    rows = []
    for name, schema in spec.inputs.items():
        limits = [f"{word} {schema[key]}" for key, word in (("minimum", "≥"), ("maximum", "≤")) if key in schema]
        rows.append(
            {
                "name": name,
                "label": field_label(name, schema),
                "type": schema["type"]
                if isinstance(schema.get("type"), str)
                else "one of"
                if "enum" in schema
                else "any",
                "choices": [shown(c) for c in schema.get("enum", [])],
                "limits": " ".join(limits),
                "required": "default" not in schema,
                "default": shown(schema["default"]) if "default" in schema else "",
                "description": schema.get("description", "") if isinstance(schema.get("description"), str) else "",
            }
        )
    return rows


async def render_processes(
    request: Request, console: ConsoleState, who: str, *, done: str = "", error: str = "", status_code: int = 200
) -> Response:
    library = await library_of(console)
    schedules, others, schedule_problems = await process_schedules(console.client)
    rows = []
    for name in library.names():
        versions = library.versions(name)
        rows.append(
            {
                "spec": versions[-1],
                "versions": list(reversed(versions)),  # newest first
                "inputs": input_rows(versions[-1]),
                "schedules": schedules.pop(name, []),
            }
        )
    context = {
        "who": who,
        "csrf": console.identity.csrf_token(who),
        "rows": rows,
        "problems": library.problems,
        "schedule_problems": schedule_problems,
        # Schedules of plain plans, or of processes this console's library does not hold: shown,
        # still Stratagem's to pause.
        "orphans": [*others, *(row for rows in schedules.values() for row in rows)],
        "folders": library.folders,
        "done": done,
        "error": error,
    }
    return console.templates.TemplateResponse(request, "processes.html", context, status_code=status_code)


@router.get("/processes", response_class=HTMLResponse, include_in_schema=False)
async def processes_page(request: Request, who: Person, console: Console, done: str = "", error: str = "") -> Response:
    return await render_processes(request, console, who, done=done, error=error)


def render_start(
    request: Request,
    console: ConsoleState,
    who: str,
    spec: ProcessSpec,
    draft: StartDraft | None = None,
    status_code: int = 200,
) -> Response:
    draft = draft or StartDraft()
    context = {
        "who": who,
        "csrf": console.identity.csrf_token(who),
        "spec": spec,
        "fields": start_fields(spec, draft),
        "error": draft.errors.get(WHOLE, ""),
        "plans_goal": not spec.steps,
        # A process without steps needs a planner model, which only the console's configuration gives.
        "no_planner": not spec.steps and not console.start_options.planner,
    }
    return console.templates.TemplateResponse(request, "start.html", context, status_code=status_code)


@router.get("/processes/{name}/start", response_class=HTMLResponse, include_in_schema=False)
async def start_page(request: Request, who: Person, console: Console, name: str, version: str = "") -> Response:
    spec = find(await library_of(console), name, version)
    return render_start(request, console, who, spec)


async def start_process(console: ConsoleState, who: str, spec: ProcessSpec, given: dict[str, Any]) -> RunHandle:
    """Start a run of `spec` with checked inputs, recorded as started by `who`. ValueError (the
    run's own refusal, e.g. a process that plans its goal and no planner) or StratagemError."""
    try:
        handle = await start_process_run(
            console.client, spec, given, task_queue=console.task_queue, options=console.start_options, started_by=who
        )
    except ValidationError as exc:
        raise ValueError(str(exc.errors()[0]["msg"]).removeprefix("Value error, ")) from None
    handle.signer, handle.store = console.issuer, console.store
    return handle


def _now() -> datetime:
    return datetime.now(UTC)  # a run started by hand is for now (docs/processes.md, nominal time)


@router.post("/processes/{name}/start", include_in_schema=False)
async def start_form(request: Request, post: CheckedForm, console: Console, name: str) -> Response:
    form = post.form
    spec = find(await library_of(console), name, str(form.get("version") or ""))
    shown_digest = str(form.get("digest") or "")
    if shown_digest and shown_digest != spec.digest:
        draft = StartDraft(values=_typed(form))
        draft.errors[WHOLE] = (
            f"{spec.label} changed since this form was shown (its file was edited): check it and start again"
        )
        return render_start(request, console, post.who, spec, draft, status_code=409)
    given, draft = read_start(spec, form, _now())
    status = 422
    if not draft.errors:
        try:
            run = await start_process(console, post.who, spec, given)
        except ValueError as exc:
            draft.errors[WHOLE] = str(exc)
        except (StratagemError, RPCError) as exc:  # the server, not the form: as typed, to send again
            draft.errors[WHOLE], status = f"the run could not be started: {one_line(exc)}", 503
        else:
            return RedirectResponse(f"/runs/{quote(run.id, safe='')}", status_code=303)
    return render_start(request, console, post.who, spec, draft, status_code=status)


def _typed(form: dict[str, Any]) -> dict[str, str]:
    return {key.removeprefix(FIELD_PREFIX): str(raw) for key, raw in form.items() if key.startswith(FIELD_PREFIX)}


@router.post("/schedules/{schedule_id}/{action}", include_in_schema=False)
async def schedule_form(
    request: Request, post: CheckedForm, console: Console, schedule_id: str, action: str
) -> Response:
    try:
        done = await act(console.client, schedule_id, action, post.who)
    except NotOurs as exc:
        return await render_processes(request, console, post.who, error=str(exc), status_code=404)
    except ValueError as exc:
        return await render_processes(request, console, post.who, error=str(exc), status_code=400)
    except StratagemError as exc:
        return await render_processes(request, console, post.who, error=str(exc), status_code=409)
    except RPCError as exc:
        return await render_processes(request, console, post.who, error=exc.message, status_code=503)
    return RedirectResponse(f"/processes?{urlencode({'done': done})}", status_code=303)


# ------------------------------------------------------------------ REST


class StartBody(BaseModel):
    version: str | None = Field(default=None, max_length=64, description="The version to run (default: the latest).")
    inputs: dict[str, Any] = Field(default_factory=dict, description="The inputs, typed as the process declares.")
    digest: str | None = Field(
        default=None, max_length=64, description="The process's digest you checked: refused if it changed since."
    )


@router.get("/api/processes", tags=["processes"])
async def api_processes(console: Console) -> dict[str, Any]:
    """Every process of the console's library, each version with its digest and inputs schema, the
    schedules of each, and the files that did not load."""
    library = await library_of(console)
    schedules, _, schedule_problems = await process_schedules(console.client)
    processes = [
        {
            "name": name,
            "versions": [
                {
                    "version": spec.version,
                    "digest": spec.digest,
                    "description": spec.description,
                    "inputs": inputs_schema(spec),
                }
                for spec in reversed(library.versions(name))
            ],
            "schedules": [
                {**row.__dict__, "next_times": [t.isoformat() for t in row.next_times]}
                for row in schedules.get(name, [])
            ],
        }
        for name in library.names()
    ]
    return {"processes": processes, "problems": [*library.problems, *schedule_problems]}


@router.post("/api/processes/{name}/start", tags=["processes"], status_code=201)
async def api_start(who: Decider, console: Console, name: str, body: Annotated[StartBody, Body()]) -> dict[str, Any]:
    """Start a run of a process, as you: its inputs checked as the run checks them (every problem
    at once, HTTP 422); nothing starts unless all of them fit."""
    spec = find(await library_of(console), name, body.version)
    if body.digest and body.digest != spec.digest:
        raise HTTPException(409, f"{spec.label} changed since its digest {body.digest[:16]}… was read")
    _, problems = run_values(spec, body.inputs, _now())
    if problems:
        raise HTTPException(422, "; ".join(problems))
    try:
        run = await start_process(console, who, spec, body.inputs)
    except ValueError as exc:
        raise HTTPException(422, str(exc)) from None
    except (StratagemError, RPCError) as exc:
        raise HTTPException(503, f"the run could not be started: {one_line(exc)}") from None
    return {"run_id": run.id, "process": spec.name, "version": spec.version, "digest": spec.digest}


@router.post("/api/schedules/{schedule_id}/{action}", tags=["processes"])
async def api_schedule(who: Decider, console: Console, schedule_id: str, action: str) -> dict[str, str]:
    """Pause, resume or trigger one of Stratagem's schedules (`action`: pause, resume, trigger).
    Any other schedule in the namespace is refused (404)."""
    try:
        done = await act(console.client, schedule_id, action, who)
    except NotOurs as exc:
        raise HTTPException(404, str(exc)) from None
    except ValueError as exc:
        raise HTTPException(400, str(exc)) from None
    except StratagemError as exc:
        raise HTTPException(409, str(exc)) from None
    except RPCError as exc:
        raise HTTPException(503, exc.message) from None
    return {"schedule_id": schedule_id, "message": done}


__all__ = ["router", "start_process"]
