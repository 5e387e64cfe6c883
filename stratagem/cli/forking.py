"""`stratagem fork`: a new run from a revision of another, carrying over what succeeded there
(stratagem.domain.forks decides what), following it as `run` does."""

from __future__ import annotations

import argparse
import asyncio

from stratagem.cli import render
from stratagem.cli.arguments import Commands
from stratagem.cli.decisions import reviewer
from stratagem.cli.errors import CliError
from stratagem.cli.following import follow_attached
from stratagem.cli.session import (
    RUN_TIMEOUT,
    background_worker,
    embedded,
    find_run,
    open_client,
    settings,
    workflow_host,
)
from stratagem.cli.start import detached
from stratagem.client import run_input_of, start_run
from stratagem.domain.forks import fork_carry
from stratagem.domain.plan import Author, AuthorKind
from stratagem.domain.run_types import RUN_LEVEL, Fork, RunInput
from stratagem.domain.scheduling import reconcile
from stratagem.domain.validation import plan_problems
from stratagem.io.plan_files import load_plan_file
from stratagem.server import owns_server


def add_fork(commands: Commands) -> None:
    fork = commands.add("fork", cmd_fork, "start a new run from a revision of another, carrying what succeeded")
    fork.add_argument("run_id")
    fork.add_argument("--revision", type=int, help="the revision to start from (default: the latest)")
    fork.add_argument("--plan", metavar="FILE", help="start from this edited plan instead; changed steps run again")
    fork.add_argument("--id", metavar="RUN_ID", help="the new run's id")
    fork.add_argument("--detach", action="store_true", help="print the new run's id and return at once")
    fork.add_argument("--by", metavar="NAME")


async def cmd_fork(args: argparse.Namespace) -> int:
    config = settings()
    client = await open_client(config)
    source, task_queue = await find_run(client, args.run_id)
    async with workflow_host(client, task_queue):
        ledger = await source.ledger()
        catalog = await source.catalog()
    if not ledger.revisions:
        raise CliError(f"run {source.id} has no plan yet; there is nothing to fork")
    latest = ledger.revisions[-1].revision
    revision = latest if args.revision is None else args.revision
    if not 1 <= revision <= latest:
        raise CliError(f"run {source.id} has revisions 1 to {latest}; there is no revision {revision}")
    plan = ledger.revision(revision)
    draft = load_plan_file(args.plan) if args.plan else plan.draft()
    started = await run_input_of(client, source)
    options = started.state.options if started.state is not None else started.options
    problems = reconcile(None, draft, {}).problems
    if catalog is not None:
        problems += plan_problems(draft, catalog, **options.plan_rules())
    if problems:
        raise CliError("the fork's plan is invalid: " + "; ".join(problems))
    carry = fork_carry(ledger, revision, draft)
    by = reviewer(args)
    reason = f"forked from run {source.id} at revision {revision}" + (f" and edited ({args.plan})" if args.plan else "")
    draft = draft.model_copy(update={"reason": draft.reason or reason})
    # What it carries is read from the source run by the fork itself (a start cannot bring its own).
    fork = Fork(run_id=source.id, revision=revision)
    run_input = RunInput(
        goal=draft.goal,
        plan=draft,
        author=Author(kind=AuthorKind.human, name=by),
        started_by=by,
        options=options.model_copy(update={"status_search_attribute": False}),
        fork=fork,
        level=RUN_LEVEL,
    )
    if owns_server(embedded(config)):
        done = await asyncio.to_thread(background_worker(config, task_queue).ensure, [], models=False)
        if done:
            render.note(done, json_mode=args.json)
    memo = {"forked_from": source.id, "forked_revision": revision}
    run = await start_run(client, run_input, task_queue=task_queue, run_id=args.id, memo=memo, rpc_timeout=RUN_TIMEOUT)
    carried = ", ".join(carry.outputs) or "none"
    rerun = ", ".join(carry.rerun) or "none"
    render.note(
        f"run {run.id} forked from {source.id} revision {revision}: carries {carried}; runs again: {rerun}",
        json_mode=args.json,
    )
    if args.detach:
        return detached(run, json_mode=args.json)
    async with workflow_host(client, task_queue):
        return await follow_attached(run, args, by)
