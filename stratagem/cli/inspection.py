"""The commands that look at a run without changing it: status, audit, show and output."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from ..store import default_store, is_stored, load_value
from . import render, show
from .errors import CliError
from .session import hosted_run


async def cmd_status(args: argparse.Namespace) -> int:
    async with hosted_run(args.run_id) as run:
        status = await run.status()
        if args.json:
            render.emit_json(status.model_dump(mode="json"))
            return 0
        ledger = await run.ledger()
        plan = await run.plan()
    render.status_view(status, ledger, plan)
    return 0


async def cmd_audit(args: argparse.Namespace) -> int:
    async with hosted_run(args.run_id) as run:
        ledger = await run.ledger()
    for record in ledger.audit_records():
        print(json.dumps(record, default=str, sort_keys=True))
    return 0


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
    if args.mermaid:
        print(show.mermaid(plan, ledger), end="")
    elif args.json:
        render.emit_json(show.plan_json(plan, ledger))
    else:
        render.console.print(show.plan_view(plan, ledger, phase=status.phase.value if status else None))
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
