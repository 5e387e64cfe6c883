"""The review console: the decisions a run waits on, in a browser and over HTTP.

Pages (server-rendered; Jinja2 escapes everything, so a step title or an output written by a
model stays text) and a REST API over the same client calls the command line makes. `create_app`
only assembles: the routes live in one module per area (`inbox`, `run_list`, `runs`, `stream`,
`decisions`, `sessions`, `email_links`, `slack`), reach what they share through `state.Console`, and
learn who is asking through the dependencies in `access`; the Host and Origin rules (`guard`) and the
security headers wrap them.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Iterable
from datetime import timedelta
from importlib.resources import files
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from temporalio.client import Client

from stratagem.common.config import DEFAULT_TASK_QUEUE
from stratagem.common.errors import RunUnresponsiveError
from stratagem.common.signing import Keyring, Signer
from stratagem.console import decisions, email_links, inbox, processes, run_list, runs, sessions, slack, stream
from stratagem.console.access import NotSignedIn, not_signed_in
from stratagem.console.guard import Guard, Site
from stratagem.console.identity import IdentityConfig
from stratagem.console.slack_app import SlackApp
from stratagem.console.state import ConsoleState
from stratagem.console.views import page_templates
from stratagem.domain.run_options import RunOptions
from stratagem.io.store import OutputStore

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
# A run page or a decision waits this long for a run, then says nobody serves it.
RUN_TIMEOUT = timedelta(seconds=10)


def create_app(
    client: Client,
    identity: IdentityConfig,
    *,
    signer: Signer | None = None,
    store: OutputStore | None = None,
    run_timeout: timedelta = RUN_TIMEOUT,
    site: Site | None = None,
    slack_app: SlackApp | None = None,
    task_queue: str | None = None,
    process_folders: Iterable[str | Path] = (),
    start_options: RunOptions | None = None,
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
    app.state.console = ConsoleState(
        client=client,
        identity=identity,
        issuer=issuer,
        store=store,
        run_timeout=run_timeout,
        templates=page_templates(),
        slack=slack_app if slack_app is not None else SlackApp.from_env(),
        task_queue=task_queue or os.environ.get("TEMPORAL_TASK_QUEUE") or DEFAULT_TASK_QUEUE,
        process_folders=tuple(Path(folder).expanduser() for folder in process_folders),
        start_options=start_options or RunOptions(),
    )
    app.mount("/static", StaticFiles(directory=str(files("stratagem.console") / "static")), name="static")
    app.add_middleware(Guard, site=site or Site())  # inside the one below, so its refusals carry the headers
    app.middleware("http")(security_headers)
    app.add_exception_handler(NotSignedIn, not_signed_in)
    app.add_exception_handler(RunUnresponsiveError, unresponsive)
    # In this order the API's paths are listed in /openapi.json as they always were (the new ones after).
    for area in (inbox, runs, stream, decisions, sessions, email_links, slack, run_list, processes):
        app.include_router(area.router)
    return app


async def security_headers(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
    response = await call_next(request)
    response.headers["Content-Security-Policy"] = CSP
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "same-origin"
    response.headers["X-Frame-Options"] = "DENY"
    return response


async def unresponsive(_request: Request, exc: Exception) -> Response:
    # A run no worker answers within `run_timeout`, wherever a route asked it something.
    return JSONResponse({"detail": str(exc)}, status_code=503)


__all__ = ["create_app"]
