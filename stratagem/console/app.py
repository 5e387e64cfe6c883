"""The review console: the decisions a run waits on, in a browser and over HTTP.

Pages (server-rendered; Jinja2 escapes everything, so a step title or an output written by a
model stays text) and a REST API over the same client calls the command line makes. A decision
goes through the run's update validators: a stale or refused one is an HTTP 409 with the run's
message, never a half-applied change. Who decided is the identity the console authenticated
(stratagem.console.identity), never a name the request carries; with a signing key, the console
signs what it forwards, so workers that list it in STRATAGEM_ISSUER_KEYS can verify it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from datetime import timedelta
from importlib.resources import files
from typing import Any
from urllib.parse import quote, urlencode

import yaml
from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from markupsafe import Markup
from pydantic import BaseModel, Field, ValidationError
from temporalio.client import Client

from ..answers import answer_fields, coerce
from ..client import AWAITING_QUERY, RunHandle, get_run, has_status_attribute
from ..decisions import waiting_for
from ..errors import DecisionRefusedError, PlanFileError, RunUnresponsiveError, StratagemError
from ..ledger import Ledger
from ..notify import link_valid
from ..plan import Plan
from ..plan_diff import diff_lines, diff_revisions
from ..plan_files import dump_plan, parse_plan_data
from ..risk import risk_label
from ..run_types import (
    WORKFLOW_NAME,
    AnswerInput,
    ApproveInput,
    BudgetInput,
    DecisionKind,
    PendingDecision,
    RejectInput,
    RepairAction,
    RepairInput,
    ReviseInput,
)
from ..signing import Keyring, Signer
from ..store import OutputStore, default_store, load_value
from ..stored import is_stored
from ..visible_text import written_out
from .guard import Guard, Site
from .identity import SESSION_COOKIE, AuthMode, IdentityConfig
from .stream import event_offset, ledger_events

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
CSRF_FIELD = "csrf"
CSRF_HEADER = "X-Stratagem-CSRF"
INBOX_SCAN = 500
INBOX_SCAN_UNFILTERED = 100  # without the attribute every running run is a candidate: the newest only
INBOX_QUERIES = 16
INBOX_QUERY_TIMEOUT = timedelta(seconds=1)  # a hosted run answers in milliseconds
# A run page or a decision waits this long for a run, then says nobody serves it.
RUN_TIMEOUT = timedelta(seconds=10)


class NotSignedIn(Exception):
    pass


# ------------------------------------------------------------------ REST bodies (no `by`: identity decides)


class ApproveBody(BaseModel):
    revision: int | None = None
    step_id: str | None = None
    call_id: str | None = None
    digest: str | None = Field(default=None, max_length=64, description="A call's: the digest of its arguments shown.")
    comment: str = Field(default="", max_length=4000)


class RejectBody(BaseModel):
    reason: str = Field(min_length=1, max_length=4000)
    revision: int | None = None
    step_id: str | None = None
    call_id: str | None = None


class AnswerBody(BaseModel):
    step_id: str
    answer: Any


class ReviseBody(BaseModel):
    plan: dict[str, Any]
    reason: str = Field(default="", max_length=4000)
    revision: int | None = None


class RepairBody(BaseModel):
    action: RepairAction
    step_id: str | None = None
    args: dict[str, Any] | None = None
    output: Any = None
    reason: str = Field(default="", max_length=4000)


class BudgetBody(BaseModel):
    tokens: int | None = Field(default=None, ge=1)
    cost_usd: float | None = Field(default=None, gt=0)
    model_calls: int | None = Field(default=None, ge=1)
    wall_clock_seconds: float | None = Field(default=None, gt=0)
    stop: bool = False
    reason: str = Field(default="", max_length=4000)


def create_app(
    client: Client,
    identity: IdentityConfig,
    *,
    signer: Signer | None = None,
    store: OutputStore | None = None,
    run_timeout: timedelta = RUN_TIMEOUT,
    site: Site | None = None,
) -> FastAPI:
    """The console as an ASGI app over a connected Temporal client. `run_timeout` bounds each
    query and decision a page or a request sends a run; `site` names the addresses it answers to
    (default: listening on 127.0.0.1, no public URL). `signer`: the issuer key it signs people's
    decisions with (default: its home's, `Keyring.issuer`, made on first use)."""
    issuer = signer if signer is not None else Keyring.of_home().issuer()
    app = FastAPI(
        title="Stratagem review console",
        description="The decisions runs wait on: the inbox, runs, and one endpoint per decision.",
        docs_url=None,  # the interactive docs load their scripts from a CDN; /openapi.json is served
        redoc_url=None,
    )
    templates = Jinja2Templates(directory=str(files("stratagem.console") / "templates"))
    # Every value a page shows is written out where it would reorder or hide text (bidi controls,
    # C0/C1 controls), as the CLI does: autoescaping stops markup, not a right-to-left override.
    templates.env.finalize = _written_out
    app.mount("/static", StaticFiles(directory=str(files("stratagem.console") / "static")), name="static")
    app.add_middleware(Guard, site=site or Site())  # inside the one below, so its refusals carry the headers

    @app.middleware("http")
    async def security_headers(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        response = await call_next(request)
        response.headers["Content-Security-Policy"] = CSP
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "same-origin"
        response.headers["X-Frame-Options"] = "DENY"
        return response

    @app.exception_handler(NotSignedIn)
    async def not_signed_in(request: Request, _exc: NotSignedIn) -> Response:
        if request.url.path.startswith("/api/") or identity.mode is not AuthMode.users:
            return JSONResponse({"detail": "not signed in"}, status_code=401)
        return RedirectResponse(f"/login?next={request.url.path}", status_code=303)

    @app.exception_handler(RunUnresponsiveError)
    async def unresponsive(_request: Request, exc: RunUnresponsiveError) -> Response:
        # A run no worker answers within `run_timeout`, wherever a route asked it something.
        return JSONResponse({"detail": str(exc)}, status_code=503)

    # ------------------------------------------------------------------ identity

    def person(request: Request) -> str:
        """The authenticated person, or NotSignedIn. A bearer token wins over ambient credentials."""
        auth = request.headers.get("authorization", "")
        if auth.lower().startswith("bearer "):
            user = identity.token_user(auth[7:].strip())
            if user is None:
                raise NotSignedIn()
            return user
        if identity.mode is AuthMode.local:
            return identity.local_user
        if identity.mode is AuthMode.header:
            peer = request.client.host if request.client else None
            name = request.headers.get(identity.header, "").strip()
            if name and identity.from_proxy(peer):
                return name
            raise NotSignedIn()
        user = identity.session_user(request.cookies.get(SESSION_COOKIE))
        if user is None:
            raise NotSignedIn()
        return user

    def ambient(request: Request) -> bool:
        """Whether the browser sent the credentials by itself (cookie, proxy header, the local user):
        such a request changes state only with the person's CSRF token."""
        return not request.headers.get("authorization", "").lower().startswith("bearer ")

    async def checked_form(request: Request) -> tuple[str, dict[str, Any]]:
        who = person(request)
        form = dict(await request.form())
        if not identity.csrf_ok(who, str(form.get(CSRF_FIELD) or "")):
            raise HTTPException(403, "the form's CSRF token is missing or wrong; reload the page and try again")
        return who, form

    def checked_api(request: Request) -> str:
        who = person(request)
        if ambient(request) and not identity.csrf_ok(who, request.headers.get(CSRF_HEADER)):
            raise HTTPException(403, f"use a bearer token, or send the {CSRF_HEADER} header a console page gives")
        return who

    def run_of(run_id: str) -> RunHandle:
        run = get_run(client, run_id, rpc_timeout=run_timeout)
        run.signer = issuer
        run.store = store
        return run

    async def decide(run: RunHandle, call: Awaitable[Any]) -> dict[str, Any]:
        try:
            outcome = await call
        except DecisionRefusedError as exc:
            text = str(exc)
            raise HTTPException(409, text.split(": ", 1)[-1] if "refused the decision" in text else text) from None
        except StratagemError as exc:
            raise HTTPException(503, str(exc)) from None
        return {"run_id": run.id, **outcome.model_dump(mode="json")}

    # ------------------------------------------------------------------ reading runs

    async def inbox() -> list[dict[str, Any]]:
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

    async def read(run_id: str) -> tuple[RunHandle, Any, Ledger]:
        run = run_of(run_id)
        try:
            status = await run.status()
            ledger = await run.ledger()
        except StratagemError as exc:
            raise HTTPException(503, str(exc)) from None
        except Exception as exc:
            if "not found" in str(exc).lower():
                raise HTTPException(404, f"there is no run {run_id}") from None
            raise
        return run, status, ledger

    # ------------------------------------------------------------------ pages

    @app.get("/login", response_class=HTMLResponse, include_in_schema=False)
    async def login_page(request: Request, next: str = "/", error: str = "") -> Response:
        return templates.TemplateResponse(request, "login.html", {"next": safe_next(next), "error": error})

    @app.post("/login", include_in_schema=False)
    async def login(request: Request) -> Response:
        form = await request.form()
        user = identity.users.login(str(form.get("name", "")), str(form.get("password", "")))
        target = safe_next(str(form.get("next", "/")))
        if user is None or identity.mode is not AuthMode.users:
            return RedirectResponse(f"/login?error=wrong+name+or+password&next={target}", status_code=303)
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(
            SESSION_COOKIE,
            identity.session_cookie(user),
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        return response

    @app.post("/logout", include_in_schema=False)
    async def logout(request: Request) -> Response:
        who, _ = await checked_form(request)
        try:
            identity.end_sessions(who)  # every session of theirs, not only this browser's cookie
        except StratagemError as exc:
            raise HTTPException(503, str(exc)) from None
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(SESSION_COOKIE)
        return response

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def inbox_page(request: Request) -> Response:
        who = person(request)
        return templates.TemplateResponse(
            request, "inbox.html", {"who": who, "csrf": identity.csrf_token(who), "rows": await inbox()}
        )

    async def render_run(
        request: Request,
        who: str,
        run_id: str,
        *,
        error: str = "",
        done: str = "",
        edit: str | None = None,
        problems: list[str] | None = None,
        status_code: int = 200,
    ) -> Response:
        """The run page: `edit` and `problems` bring back a refused plan edit beside its problems."""
        run, status, ledger = await read(run_id)
        catalog = await run.catalog()
        plan = ledger.revisions[-1] if ledger.revisions else None
        approved = next((p for p in ledger.revisions if p.revision == status.approved_revision), None)
        context = {
            "who": who,
            "csrf": identity.csrf_token(who),
            "status": status,
            "ledger": ledger,
            "plan": plan,
            "columns": graph_columns(plan, ledger) if plan else [],
            "risks": {s.id: risk_label(s, catalog) for s in plan.steps} if plan else {},
            "diff": diff_text(approved, plan) if plan and approved and approved.revision != plan.revision else [],
            "pending": [decision_view(p, plan) for p in status.pending],
            "plan_yaml": edit if edit is not None else (dump_plan(plan.draft()) if plan else ""),
            "plan_problems": problems or [],
            "events": ledger.events[-200:],
            "error": error,
            "done": done,
        }
        return templates.TemplateResponse(request, "run.html", context, status_code=status_code)

    @app.get("/runs/{run_id}", response_class=HTMLResponse, include_in_schema=False)
    async def run_page(
        request: Request, run_id: str, error: str = "", done: str = "", exp: str = "", sig: str = ""
    ) -> Response:
        who = person(request)
        if exp or sig:  # a link from a notification: say so if it was altered or is out of date
            if not link_valid(identity.secret, f"/runs/{quote(run_id, safe='')}", exp, sig):
                error = error or "this link has expired or was altered; the page below shows the run as it is now"
        return await render_run(request, who, run_id, error=error, done=done)

    @app.get("/runs/{run_id}/audit.jsonl", include_in_schema=False)
    async def audit(request: Request, run_id: str) -> Response:
        person(request)
        _, _, ledger = await read(run_id)
        lines = "".join(json.dumps(r, default=str, sort_keys=True) + "\n" for r in ledger.audit_records())
        headers = {"Content-Disposition": f'attachment; filename="{run_id}-audit.jsonl"'}
        return PlainTextResponse(lines, media_type="application/x-ndjson", headers=headers)

    @app.get("/runs/{run_id}/steps/{step_id}/output", response_class=PlainTextResponse, include_in_schema=False)
    async def output(request: Request, run_id: str, step_id: str, transcript: bool = False) -> Response:
        person(request)
        _, _, ledger = await read(run_id)
        record = ledger.steps.get(step_id)
        if record is None:
            raise HTTPException(404, f"run {run_id} has no step '{step_id}'")
        value = record.transcript if transcript else record.output
        if is_stored(value):
            value = await asyncio.to_thread(load_value, store or default_store(), value)
        text = value if isinstance(value, str) else json.dumps(value, indent=2, default=str, ensure_ascii=False)
        return PlainTextResponse(text)  # text/plain: whatever a tool or a model wrote is never markup here

    @app.get("/runs/{run_id}/steps/{step_id}/calls/{call_id}/arguments.json", include_in_schema=False)
    async def call_arguments(request: Request, run_id: str, step_id: str, call_id: str) -> Response:
        """A waiting tool call's arguments, every one, as the download its approval is about."""
        person(request)
        _, status, _ = await read(run_id)
        waiting = next(
            (p.call for p in status.pending if p.step_id == step_id and p.call and p.call.call_id == call_id), None
        )
        if waiting is None:
            raise HTTPException(404, f"step '{step_id}' of run {run_id} has no call {call_id} waiting")
        name = f"{run_id}-{step_id}-call-{call_id}.json"
        headers = {"Content-Disposition": f'attachment; filename="{name}"', "X-Stratagem-Digest": waiting.digest}
        return PlainTextResponse(waiting.arguments, media_type="application/json", headers=headers)

    # ------------------------------------------------------------------ decisions from forms

    def back(run_id: str, *, error: str = "", done: str = "") -> Response:
        query = urlencode({k: v for k, v in {"error": error, "done": done}.items() if v})
        return RedirectResponse(f"/runs/{run_id}" + (f"?{query}" if query else ""), status_code=303)

    async def form_decision(run_id: str, make: Callable[[], Awaitable[Any]]) -> Response:
        try:
            outcome = await make()
        except HTTPException as exc:
            return back(run_id, error=str(exc.detail))
        except (ValidationError, ValueError) as exc:
            return back(run_id, error=one_line(exc))
        except StratagemError as exc:
            return back(run_id, error=str(exc))
        return back(run_id, done=outcome["message"])

    @app.post("/runs/{run_id}/decide", include_in_schema=False)
    async def decide_form(request: Request, run_id: str) -> Response:
        who, form = await checked_form(request)
        run = run_of(run_id)
        kind = str(form.get("kind", ""))
        verdict = str(form.get("verdict", "approve"))
        step = str(form.get("step_id") or "") or None
        call = str(form.get("call_id") or "") or None
        revision = int(form["revision"]) if str(form.get("revision") or "").isdigit() else None
        comment = str(form.get("comment", ""))

        async def make() -> dict[str, Any]:
            if kind in ("plan_approval", "step_approval", "tool_call_approval"):
                if verdict == "reject":
                    reason = comment or "rejected in the console"
                    return await decide(
                        run,
                        run.reject(RejectInput(by=who, reason=reason, revision=revision, step_id=step, call_id=call)),
                    )
                digest = str(form.get("digest") or "") or None  # the arguments the page showed
                approval = ApproveInput(
                    by=who, revision=revision, step_id=step, call_id=call, digest=digest, comment=comment
                )
                return await decide(run, run.approve(approval))
            if kind == "human_answer":
                schema = answer_schema(await run.plan(), step)
                answer = answer_from(form, schema)
                return await decide(run, run.answer(AnswerInput(step_id=step or "", answer=answer, by=who)))
            if kind == "repair":
                # Asking a human step again names that step, not the failed one the form is about.
                asked = str(form.get("ask") or "") or None
                action = RepairAction.ask_again if asked else RepairAction(str(form.get("action", "retry")))
                args = parse_json(form.get("args"), "arguments") if form.get("args") and not asked else None
                out = parse_json(form.get("output"), "output") if action is RepairAction.skip else None
                target = asked or step
                repair = RepairInput(by=who, action=action, step_id=target, args=args, output=out, reason=comment)
                return await decide(run, run.repair(repair))
            if kind == "budget":
                if verdict == "stop":
                    return await decide(run, run.budget(BudgetInput(by=who, stop=True, reason=comment)))
                limits = {
                    k: form[k] for k in ("tokens", "cost_usd", "model_calls", "wall_clock_seconds") if form.get(k)
                }
                return await decide(
                    run, run.budget(BudgetInput.model_validate({"by": who, "reason": comment, **limits}))
                )
            raise HTTPException(400, f"unknown decision kind '{kind[:40]}'")

        return await form_decision(run_id, make)

    @app.post("/runs/{run_id}/revise", include_in_schema=False)
    async def revise_form(request: Request, run_id: str) -> Response:
        who, form = await checked_form(request)
        run = run_of(run_id)
        text = str(form.get("plan", ""))
        revision = int(form["revision"]) if str(form.get("revision") or "").isdigit() else None
        try:
            draft = parse_plan_data(yaml.safe_load(text), source="the edited plan")
            reason = str(form.get("reason", ""))
            outcome = await decide(run, run.revise(ReviseInput(by=who, plan=draft, revision=revision, reason=reason)))
        except (yaml.YAMLError, PlanFileError, HTTPException) as exc:
            if isinstance(exc, yaml.YAMLError):
                problem = f"the plan is not YAML: {one_line(exc)}"
            else:
                problem = str(exc.detail) if isinstance(exc, HTTPException) else str(exc)
            # Nothing is lost: the edit comes back with the problem beside it.
            return await render_run(request, who, run_id, edit=text, problems=[problem], status_code=422)
        return back(run_id, done=outcome["message"])

    # ------------------------------------------------------------------ REST

    @app.get("/api/inbox", tags=["runs"])
    async def api_inbox(request: Request) -> list[dict[str, Any]]:
        """Every run waiting for a person, the longest waiting first."""
        person(request)
        return await inbox()

    @app.get("/api/runs/{run_id}", tags=["runs"])
    async def api_run(request: Request, run_id: str) -> dict[str, Any]:
        """A run's status, its current plan and its pending decisions."""
        person(request)
        run, status, ledger = await read(run_id)
        plan = ledger.revisions[-1] if ledger.revisions else None
        return {"status": status.model_dump(mode="json"), "plan": plan.model_dump(mode="json") if plan else None}

    @app.get("/api/runs/{run_id}/events", tags=["runs"])
    async def api_events(request: Request, run_id: str, after: str = "0") -> dict[str, Any]:
        """The run's ledger events after an offset (`seq`, a whole number), archived ones included."""
        person(request)
        page = await run_of(run_id).events(event_offset(after, "after"))
        return page.model_dump(mode="json")

    @app.get("/api/runs/{run_id}/stream", tags=["runs"])
    async def api_stream(request: Request, run_id: str, after: str = "0") -> Response:
        """Server-Sent Events: one `ledger` event per ledger event, `id` its seq. A reconnect sends
        Last-Event-ID and misses and repeats nothing."""
        person(request)
        header = request.headers.get("last-event-id")
        start = event_offset(header, "Last-Event-ID") if header else event_offset(after, "after")
        events = ledger_events(request, run_of(run_id), start)
        return StreamingResponse(events, media_type="text/event-stream", headers={"Cache-Control": "no-store"})

    @app.post("/api/runs/{run_id}/approve", tags=["decisions"])
    async def api_approve(request: Request, run_id: str, body: ApproveBody) -> dict[str, Any]:
        """Approve the plan under review, a gated step, or one tool call of a step."""
        who = checked_api(request)
        run = run_of(run_id)
        return await decide(run, run.approve(ApproveInput(by=who, **body.model_dump())))

    @app.post("/api/runs/{run_id}/reject", tags=["decisions"])
    async def api_reject(request: Request, run_id: str, body: RejectBody) -> dict[str, Any]:
        """Reject the plan (ending the run), a gated step, or a tool call."""
        who = checked_api(request)
        run = run_of(run_id)
        return await decide(run, run.reject(RejectInput(by=who, **body.model_dump())))

    @app.post("/api/runs/{run_id}/answer", tags=["decisions"])
    async def api_answer(request: Request, run_id: str, body: AnswerBody) -> dict[str, Any]:
        """Answer a human step (checked against its answer schema)."""
        who = checked_api(request)
        run = run_of(run_id)
        return await decide(run, run.answer(AnswerInput(by=who, step_id=body.step_id, answer=body.answer)))

    @app.post("/api/runs/{run_id}/revise", tags=["decisions"])
    async def api_revise(request: Request, run_id: str, body: ReviseBody) -> dict[str, Any]:
        """Replace the plan with an edited one (under review, while it runs, or as a repair)."""
        who = checked_api(request)
        run = run_of(run_id)
        try:
            draft = parse_plan_data(body.plan, source="the plan")
        except PlanFileError as exc:
            raise HTTPException(422, str(exc)) from None
        return await decide(
            run, run.revise(ReviseInput(by=who, plan=draft, reason=body.reason, revision=body.revision))
        )

    @app.post("/api/runs/{run_id}/repair", tags=["decisions"])
    async def api_repair(request: Request, run_id: str, body: RepairBody) -> dict[str, Any]:
        """Retry a failed step (with new arguments), skip it with an output, or stop the run."""
        who = checked_api(request)
        run = run_of(run_id)
        return await decide(run, run.repair(RepairInput(by=who, **body.model_dump())))

    @app.post("/api/runs/{run_id}/budget", tags=["decisions"])
    async def api_budget(request: Request, run_id: str, body: BudgetBody) -> dict[str, Any]:
        """Raise a run's budget, or stop a run waiting on it."""
        who = checked_api(request)
        run = run_of(run_id)
        return await decide(run, run.budget(BudgetInput(by=who, **body.model_dump())))

    @app.get("/api/whoami", tags=["runs"])
    async def whoami(request: Request) -> dict[str, str]:
        """Who the console takes you for, and the CSRF token your ambient credentials need."""
        who = person(request)
        return {"user": who, "csrf": identity.csrf_token(who)}

    return app


# ------------------------------------------------------------------ views


def _written_out(value: Any) -> Any:
    """A page's value with reordering characters written out; already-escaped markup stays markup."""
    if isinstance(value, Markup):
        return Markup(written_out(str(value)))
    return written_out(value) if isinstance(value, str) else value


def safe_next(target: str) -> str:
    """Only a path on this console: a login must not redirect elsewhere."""
    return target if target.startswith("/") and not target.startswith("//") else "/"


def one_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


def parse_json(raw: Any, what: str) -> Any:
    try:
        return json.loads(str(raw))
    except json.JSONDecodeError as exc:
        raise ValueError(f"the {what} are not JSON: {exc.msg} at column {exc.colno}") from None


def answer_schema(plan: Plan | None, step_id: str | None) -> dict[str, Any] | None:
    try:
        return plan.step(step_id).answer_schema if plan is not None and step_id else None
    except KeyError:
        return None


def decision_view(pending: PendingDecision, plan: Plan | None) -> dict[str, Any]:
    """What a pending decision's form needs: for a typed answer, one input per field of its schema."""
    schema = answer_schema(plan, pending.step_id) if pending.kind is DecisionKind.human_answer else None
    fields = [
        {
            "name": name,
            "type": sub.get("type", "string"),
            "choices": [c for c in sub.get("enum", []) if isinstance(c, str | int | float | bool)],
            "required": required,
            "description": sub.get("description", ""),
        }
        for name, sub, required in answer_fields(schema)
    ]
    return {"pending": pending, "what": waiting_for(pending), "fields": fields}


def answer_from(form: dict[str, Any], schema: dict[str, Any] | None) -> Any:
    """The answer a form carries: one input per field of the step's schema (`field.NAME`, each
    converted as its schema says, as the terminal does), or one value, JSON or text."""
    fields = answer_fields(schema)
    if not fields:
        text = str(form.get("answer", ""))
        return parse_json(text, "answer") if text.strip().startswith(("{", "[")) else text
    answer: dict[str, Any] = {}
    for name, sub, _ in fields:
        text = str(form.get(f"field.{name}", "")).strip()
        if text:
            try:
                answer[name] = coerce(text, sub)
            except ValueError as exc:
                raise ValueError(f"{name}: {exc}") from None
    return answer


def graph_columns(plan: Plan, ledger: Ledger) -> list[list[dict[str, Any]]]:
    """The plan as columns by depth (a step sits right of everything it waits for), each step with its status."""
    depth: dict[str, int] = {}
    by_id = {s.id: s for s in plan.steps}

    def level(step_id: str, seen: frozenset[str] = frozenset()) -> int:
        if step_id in depth:
            return depth[step_id]
        step = by_id.get(step_id)
        if step is None or step_id in seen:
            return 0
        value = 1 + max((level(d, seen | {step_id}) for d in step.depends_on), default=-1)
        depth[step_id] = value
        return value

    columns: dict[int, list[dict[str, Any]]] = {}
    for step in plan.steps:
        record = ledger.steps.get(step.id)
        # What a reviewer approves, in full: the tool and its exact arguments, or what a model may call.
        does = (
            f"{step.tool}({', '.join(f'{k}={json.dumps(v, ensure_ascii=False)}' for k, v in step.args.items())})"
            if step.tool
            else f"{step.kind.value}" + (f" · may call {', '.join(step.tools)}" if step.tools else "")
        )
        columns.setdefault(level(step.id), []).append(
            {"step": step, "status": record.status.value if record else "pending", "record": record, "does": does}
        )
    return [columns[k] for k in sorted(columns)]


def diff_text(approved: Plan, plan: Plan) -> list[str]:
    return diff_lines(diff_revisions(approved, plan))


__all__ = ["create_app"]
