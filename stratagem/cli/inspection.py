"""The commands that look at a run without changing it: status, audit, show and output."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from stratagem.cli import render, show
from stratagem.cli.arguments import Commands
from stratagem.cli.errors import CliError
from stratagem.cli.session import hosted_run, open_client, settings, worker_gone
from stratagem.domain.run_types import WORKFLOW_NAME
from stratagem.io.store import default_store, is_stored, load_value


def add_status(commands: Commands) -> None:
    status = commands.add("status", cmd_status, "show a run's phase, plan, steps and pending decisions")
    status.add_argument("run_id")


async def cmd_status(args: argparse.Namespace) -> int:
    async with hosted_run(args.run_id) as run:
        status = await run.status()
        if args.json:
            render.emit_json(status.model_dump(mode="json"))
            return 0
        ledger = await run.ledger()
        plan = await run.plan()
        catalog = await run.catalog()
    render.status_view(status, ledger, plan, catalog)
    if not status.phase.finished and (gone := worker_gone(settings(), status.run_id)):
        render.note(f"note: {gone}")
    return 0


def add_views(commands: Commands) -> None:
    """`audit`, `show` and `output`: a run's record, its plan and a step's output."""
    audit = commands.add("audit", cmd_audit, "print every plan revision, decision and event as JSON Lines", json=False)
    audit.add_argument("run_id")

    show = commands.add(
        "show", cmd_show, "show a plan revision as a graph, as Mermaid, or what changed between revisions"
    )
    show.add_argument("run_id")
    show.add_argument("--revision", type=int, metavar="N", help="this revision instead of the newest")
    shape = show.add_mutually_exclusive_group()
    shape.add_argument("--mermaid", action="store_true", help="print a Mermaid flowchart")
    shape.add_argument("--diff", nargs=2, type=int, metavar=("A", "B"), help="what changed from revision A to B")

    output = commands.add(
        "output",
        cmd_output,
        "print a step's output (loaded from the output store if it is there): text as it is, other values as indented JSON",
    )
    output.add_argument("run_id")
    output.add_argument("step_id")
    output.add_argument(
        "--transcript", action="store_true", help="print an llm step's conversation instead, one message per block"
    )


async def cmd_audit(args: argparse.Namespace) -> int:
    async with hosted_run(args.run_id) as run:
        ledger = await run.ledger()
    for record in ledger.audit_records():
        print(json.dumps(record, default=str, sort_keys=True))
    # The lineage the other way: runs forked from this one (a fork's own ledger names its source).
    for fork in await forks_of(args.run_id):
        print(json.dumps(fork, default=str, sort_keys=True))
    return 0


async def forks_of(run_id: str, scan: int = 2000) -> list[dict[str, object]]:
    """Runs started by `stratagem fork` from `run_id`, found by their memo among the newest `scan` runs."""
    client = await open_client(settings())
    found: list[dict[str, object]] = []
    async for execution in client.list_workflows(f'WorkflowType = "{WORKFLOW_NAME}"', limit=scan):
        try:
            memo = await execution.memo()
        except Exception:
            continue  # a memo this shell cannot decode (another encryption key) names no fork of ours
        if memo.get("forked_from") == run_id:
            found.append(
                {
                    "type": "fork",
                    "run_id": execution.id,
                    "revision": memo.get("forked_revision"),
                    "at": execution.start_time,
                }
            )
    return sorted(found, key=lambda f: str(f["at"]))


async def cmd_show(args: argparse.Namespace) -> int:
    async with hosted_run(args.run_id) as run:
        ledger = await run.ledger()
        status = None if args.json or args.mermaid or args.diff else await run.status()
    if args.diff:
        old, new = (show.pick_revision(ledger, n) for n in args.diff)
        diff = show.diff_revisions(old, new)
        if args.json:
            render.emit_json(diff)
        else:
            for line in show.diff_lines(diff):
                render.console.print(line, markup=False)
        return 0
    plan = show.pick_revision(ledger, args.revision)
    ledger = show.as_of(ledger, plan)  # a superseded revision shows what ran under it, not since
    if args.mermaid:
        print(show.mermaid(plan, ledger), end="")
    elif args.json:
        render.emit_json(show.plan_json(plan, ledger))
    else:
        render.console.print(show.plan_view(plan, ledger, phase=status.phase.value if status else None))
        if status is not None and status.compensation is not None:  # what undoes the run's effects, what stays
            render.console.print("\n".join(render.compensation_lines(status.compensation, ledger)), markup=False)
        for pending in status.pending if status is not None else []:
            if pending.standing:  # why the run's standing approval did not approve this plan, and what differs
                render.console.print(render.plain(pending.standing), markup=False)
    return 0


async def cmd_output(args: argparse.Namespace) -> int:
    async with hosted_run(args.run_id) as run:
        ledger = await run.ledger()
    record = ledger.steps.get(args.step_id)
    if record is None:
        known = ", ".join(ledger.steps) or "none"
        raise CliError(f"run {run.id} has no step '{args.step_id}' (steps: {known})")
    value = record.transcript if args.transcript else record.output
    if args.transcript and value is None:
        raise CliError(f"step '{args.step_id}' has no transcript (only llm steps that ran have one)")
    if not args.transcript and record.status.value != "succeeded":
        raise CliError(f"step '{args.step_id}' has no output: it is {record.status.value}")
    if is_stored(value):
        value = await asyncio.to_thread(load_value, default_store(), value)
    if args.json:
        render.emit_json(value)
    else:
        text = render.transcript_text(value) if args.transcript and isinstance(value, list) else render.readable(value)
        if sys.stdout.isatty():
            render.console.print(text, markup=False)  # what a model wrote: control characters shown, not obeyed
        else:
            print(text)  # the value itself, for a file or a pipe
    return 0
