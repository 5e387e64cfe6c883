"""Following a run until it ends: its progress as it happens, the decisions it waits on (asked
at a terminal, else printed as commands), and its result as the exit status. `run` follows the
run it starts; `wait` and `watch` follow one that exists."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from rich.text import Text
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError, CancelledError, TerminatedError

from stratagem.cli import render, show
from stratagem.cli.arguments import Commands
from stratagem.cli.attempts import LostAttempts
from stratagem.cli.decisions import reviewer
from stratagem.cli.errors import CliError, run_exit_status
from stratagem.cli.prompting import Prompter, question, respond
from stratagem.cli.session import (
    background_worker,
    connection_lost,
    embedded,
    find_run,
    open_client,
    settings,
    watching_worker,
    workflow_host,
)
from stratagem.client import RunHandle
from stratagem.domain.catalog import ToolCatalog
from stratagem.domain.ledger import EventKind
from stratagem.domain.quorum import same_person
from stratagem.domain.run_types import PendingDecision, Phase, RunResult
from stratagem.server import owns_server


def at_terminal(args: argparse.Namespace) -> bool:
    """Whether a person sits at this command: it may ask them (stdin and stdout a terminal, not --json)."""
    return sys.stdin.isatty() and sys.stdout.isatty() and not args.json


async def follow_attached(run: RunHandle, args: argparse.Namespace, by: str) -> int:
    """Follow a run as `run` and `wait` do: asking for its decisions at a terminal, printing
    the commands that take them otherwise. Ctrl-C stops following, never the run."""
    try:
        return await follow(run, interactive=at_terminal(args), json_mode=args.json, by=by)
    except (KeyboardInterrupt, asyncio.CancelledError):
        render.note(
            f"\nstopped following; run {run.id} goes on. Follow it again (at a terminal, it asks what is still open) "
            f"with: stratagem wait {run.id}",
            json_mode=args.json,
        )
        return 130


def _may_approve(pending: PendingDecision, by: str) -> bool:
    """Whether to ask `by` about it: not after they approved it (a quorum waits for others), nor
    when four eyes bars them; they get its hint, which says who is still wanted."""
    return not any(same_person(by, name) for name in [*pending.approved_by, *pending.barred])


def _key(pending: PendingDecision) -> tuple[str, int, str | None, str | None]:
    return (pending.kind.value, pending.revision, pending.step_id, pending.call.call_id if pending.call else None)


async def follow(run: RunHandle, *, interactive: bool, json_mode: bool, by: str) -> int:
    """Print progress until the run ends; in a terminal, ask for the decisions it waits on."""
    # A worker that died mid-step says nothing itself: asked apart from the run's queries, which
    # wait out the dead worker's sticky queue (seconds) before another host answers them.
    lost = asyncio.create_task(LostAttempts(run.handle).report(json_mode=json_mode))
    try:
        return await _follow(run, interactive=interactive, json_mode=json_mode, by=by)
    finally:
        lost.cancel()


async def _follow(run: RunHandle, *, interactive: bool, json_mode: bool, by: str) -> int:
    seen = 0
    hinted: set[tuple[str, int, str | None, str | None]] = set()
    later: set[tuple[str, int, str | None, str | None]] = set()
    catalog: ToolCatalog | None = None
    drafts: dict[int, Path] = {}
    asking: PendingDecision | None = None
    prompter = Prompter() if interactive else None

    def kept() -> dict[str, Any] | None:
        return prompter.kept.get(asking.step_id or "") if prompter is not None and asking is not None else None

    while True:
        status = await run.status()
        ledger = await run.ledger()
        fresh = ledger.events[seen:]
        if not json_mode:
            for event in fresh:
                # A human step's question is printed once: by the prompt, or the hint, that follows.
                asked = event.kind is EventKind.step_awaiting_answer
                render.console.print(render.event_line(event, message=not asked))
                if event.kind is EventKind.plan_proposed and event.revision is not None:
                    plan = ledger.revision(event.revision)
                    catalog = catalog or await run.catalog()
                    title = f"Plan revision {plan.revision}: {plan.goal}"
                    render.console.print(render.plan_table(plan, title=title, catalog=catalog))
                    if plan.revision > 1:  # what a reviewer of a revision needs first: what changed
                        previous = ledger.revision(plan.revision - 1)
                        for line in show.diff_lines(show.diff_revisions(previous, plan)):
                            render.console.print(line)
        seen = len(ledger.events)
        pending = {_key(p): p for p in status.pending}
        if asking is not None and _key(asking) not in pending:
            render.console.print("(decided elsewhere)")
            asking = None
        if status.phase.finished:
            break
        if prompter is not None and not prompter.closed:
            if asking is None:
                asking = next((p for k, p in pending.items() if k not in later and _may_approve(p, by)), None)
                if asking is not None:
                    render.console.print(
                        question(asking, render.answer_schema_of(ledger, asking), kept()), end="", markup=False
                    )
            elif fresh:
                render.console.print(
                    question(asking, render.answer_schema_of(ledger, asking), kept()), end="", markup=False
                )
            if asking is not None:
                reply = await prompter.line(timeout=0.3)
                if reply is not None:
                    schema = render.answer_schema_of(ledger, asking)
                    if await respond(run, asking, reply, by, prompter, drafts, schema) == "later":
                        later.add(_key(asking))
                        render.console.print(
                            f"later: still following run {run.id}; decide with the command below from any terminal, "
                            f"or press Ctrl-C and run `stratagem wait {run.id}` to be asked again",
                            markup=False,
                        )
                    asking = None
                continue
        for key, waiting in pending.items():
            if key not in hinted:
                render.note(
                    render.decision_hint(run.id, waiting, render.answer_schema_of(ledger, waiting)), json_mode=json_mode
                )
                hinted.add(key)
        await asyncio.sleep(0.3)
    return await finish(run, json_mode=json_mode)


async def finish(run: RunHandle, *, json_mode: bool) -> int:
    try:
        result = await run.result()
    except WorkflowFailureError as exc:
        cause = exc.cause
        status = await run.status()
        revision = status.revision
        if isinstance(cause, CancelledError):
            result = RunResult(run_id=run.id, status=Phase.cancelled, revision=revision, reason="cancelled")
        elif isinstance(cause, TerminatedError):
            result = RunResult(
                run_id=run.id, status=Phase.failed, revision=revision, reason=f"terminated: {cause.message}"
            )
        else:
            reason = cause.message if isinstance(cause, ApplicationError) else str(cause)
            # A run whose compensation failed ends as a failed workflow too: its status tells them apart.
            phase = Phase.compensation_failed if status.phase is Phase.compensation_failed else Phase.failed
            result = RunResult(run_id=run.id, status=phase, revision=revision, reason=reason)
    if json_mode:
        render.emit_json(result.model_dump(mode="json"))
    else:
        render.result_view(result)
        if result.status in (Phase.compensated, Phase.compensation_failed):
            await _compensation(run)
    return run_exit_status(result.status)


async def _compensation(run: RunHandle) -> None:
    """A run that gave up on its goal ends saying what undid its effects and which stay."""
    status = await run.status()
    if status.compensation is not None:
        render.console.print("\n".join(render.compensation_lines(status.compensation, await run.ledger())))


def add_following(commands: Commands) -> None:
    wait = commands.add(
        "wait",
        cmd_wait,
        "follow a run until it ends, exiting like `run`; at a terminal, ask for its decisions as `run` does",
    )
    wait.add_argument("run_id")
    wait.add_argument("--by", metavar="NAME", help="your name, recorded with the decisions you take here")

    watch = commands.add(
        "watch",
        cmd_watch,
        "stream a run's progress events from an offset until it ends; reconnects after a disconnect",
    )
    watch.add_argument("run_id")
    watch.add_argument(
        "--from",
        dest="after",
        type=int,
        default=0,
        metavar="SEQ",
        help="start after this event number (default: from the start)",
    )


async def cmd_wait(args: argparse.Namespace) -> int:
    config = settings()
    server = embedded(config)
    # After `stratagem down` or a reboot, the home's server comes back where it last listened, as `run` starts it.
    client = await open_client(config, start_server=server.served_here(), json_mode=args.json)
    run, task_queue = await find_run(client, args.run_id)
    ensured = owns_server(server)
    if ensured:
        # After a restart, the background worker may be gone: bring it back with its tools.
        done = await asyncio.to_thread(background_worker(config, task_queue).ensure, [], models=False)
        if done:
            render.note(done, json_mode=args.json)
    host = workflow_host(client, task_queue, beside_a_worker=ensured)
    async with host, watching_worker(config, run.id, json_mode=args.json):
        # At a terminal, the same questions as `run` asks: after a Ctrl-C or an `l`, this is how
        # a person gets them back.
        return await follow_attached(run, args, reviewer(args) if at_terminal(args) else "")


async def cmd_watch(args: argparse.Namespace) -> int:
    """Print the run's events after `--from`, following it to its end. A lost connection is
    retried from the last event printed, so nothing is missed or repeated; `--json` prints one
    event per line with its `seq`, the offset to resume from."""
    if args.after < 0:
        raise CliError("--from takes an event number, 0 or more")
    config = settings()
    client = await open_client(config)
    run, task_queue = await find_run(client, args.run_id)
    after, delay = args.after, 0.5
    async with workflow_host(client, task_queue):
        while True:
            try:
                page = await run.events(after)
            except Exception as exc:
                if not connection_lost(exc):
                    raise
                render.note(
                    f"lost the connection to Temporal at {config.address}; retrying from event {after + 1}",
                    json_mode=True,
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10)
                continue
            delay = 0.5
            for event in page.events:
                if args.json:
                    print(json.dumps(event.model_dump(mode="json"), sort_keys=True), flush=True)
                else:
                    render.console.print(Text.assemble(f"{event.seq:>5} ", render.event_line(event)))
                after = event.seq
            if page.phase.finished and after >= page.last_seq:
                return run_exit_status(page.phase)
            if after >= page.last_seq:
                await asyncio.sleep(0.3)
