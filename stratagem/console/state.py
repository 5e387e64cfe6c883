"""What every route of the console works with, reached through a FastAPI dependency (`Console`).

One `ConsoleState` per app, kept on `app.state` by `create_app`: the Temporal client, how people
sign in, the issuer key decisions are signed with, the output store, the page templates, its
Slack app, and where it finds processes and starts their runs. The
routes are plain functions in modules of their own, so two apps (a test's, say) share nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Request
from fastapi.templating import Jinja2Templates
from temporalio.client import Client

from stratagem.client import RunHandle, get_run
from stratagem.common.config import DEFAULT_TASK_QUEUE
from stratagem.common.errors import StratagemError
from stratagem.common.signing import Signer
from stratagem.console.identity import IdentityConfig
from stratagem.console.slack_app import SlackApp
from stratagem.domain.ledger import Ledger
from stratagem.domain.run_options import RunOptions
from stratagem.io.process_library import ProcessLibrary
from stratagem.io.store import OutputStore


@dataclass
class ConsoleState:
    client: Client
    identity: IdentityConfig
    issuer: Signer  # signs what people decide, for workers that list it in STRATAGEM_ISSUER_KEYS
    store: OutputStore | None
    run_timeout: timedelta  # how long a page or a decision waits for a run before saying nobody serves it
    templates: Jinja2Templates
    slack: SlackApp | None = None  # its Slack app, for /slack/interactions (None: not set up)
    task_queue: str = DEFAULT_TASK_QUEUE  # where the runs it starts (the Start form) are served
    # The console's own configuration, trusted (a request never names a folder): process folders
    # read before the library's usual places, and the options every run it starts takes.
    process_folders: tuple[Path, ...] = ()
    start_options: RunOptions = field(default_factory=RunOptions)

    def library(self) -> ProcessLibrary:
        """The process library as it is on disk now: a file added or fixed shows at the next page."""
        return ProcessLibrary.from_env(extra=self.process_folders)

    def run(self, run_id: str) -> RunHandle:
        run = get_run(self.client, run_id, rpc_timeout=self.run_timeout)
        run.signer = self.issuer
        run.store = self.store
        return run

    async def read(self, run_id: str) -> tuple[RunHandle, Any, Ledger]:
        """A run's status and ledger: a 404 for a run that does not exist, a 503 for one nobody serves."""
        run = self.run(run_id)
        try:
            # The page's live stream starts after the ledger's last event, so the status must not
            # be older than the ledger: a run that moved on between the two queries would show its
            # old status with no event left to bring the new one. Read again until the status is
            # the same on both sides of the ledger (a run rarely moves twice in a few ms).
            for _ in range(3):
                status = await run.status()
                ledger = await run.ledger()
                if await run.status() == status:
                    break
        except StratagemError as exc:
            raise HTTPException(503, str(exc)) from None
        except Exception as exc:
            if "not found" in str(exc).lower():
                raise HTTPException(404, f"there is no run {run_id}") from None
            raise
        return run, status, ledger


async def console_state(request: Request) -> ConsoleState:
    # async: FastAPI runs a plain function dependency in a thread, for every request.
    state: ConsoleState = request.app.state.console
    return state


Console = Annotated[ConsoleState, Depends(console_state)]

__all__ = ["Console", "ConsoleState", "console_state"]
