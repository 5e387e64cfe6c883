"""`stratagem list`: the runs in the namespace, newest first; with `--status awaiting-approval`,
the approval inbox, every run waiting for a person, the longest waiting first."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError

from stratagem import inbox
from stratagem.cli import render
from stratagem.cli.arguments import Commands, positive
from stratagem.cli.errors import CliError
from stratagem.cli.session import open_client, settings
from stratagem.client import REGISTER_STATUS_HINT, has_process_attribute, has_status_attribute
from stratagem.common.config import Settings
from stratagem.domain.process import PROCESS_NAME_PATTERN, PROCESS_SEARCH_ATTRIBUTE
from stratagem.domain.run_types import STATUS_SEARCH_ATTRIBUTE, WORKFLOW_NAME, DecisionKind, Phase
from stratagem.status_attribute import REGISTER_PROCESS_HINT

LIST_STATUSES = {
    "running": "Running",
    "completed": "Completed",
    "failed": "Failed",
    "cancelled": "Canceled",
    "terminated": "Terminated",
    "timed-out": "TimedOut",
}
EXECUTION_STATUS = {
    WorkflowExecutionStatus.RUNNING: "running",
    WorkflowExecutionStatus.COMPLETED: "completed",
    WorkflowExecutionStatus.FAILED: "failed",
    WorkflowExecutionStatus.CANCELED: "cancelled",
    WorkflowExecutionStatus.TERMINATED: "terminated",
    WorkflowExecutionStatus.TIMED_OUT: "timed-out",
}


UNREADABLE_MEMO = {"goal": "(unreadable: encrypted with a key this shell lacks)"}


async def _memo(execution: Any) -> dict[str, Any]:
    """A listed run's memo; a run whose memo this shell cannot decode (encrypted with another
    key) is still listed, saying so, rather than ending the listing with a traceback."""
    try:
        return await execution.memo()
    except Exception:
        return dict(UNREADABLE_MEMO)


AWAITING = "awaiting-approval"
DEFAULT_LIMIT = 50


async def _has_pending_activities(client: Client, run_id: str) -> bool:
    try:
        description = await client.get_workflow_handle(run_id).describe()
    except RPCError:
        return False
    return bool(description.raw_description.pending_activities)


def add_list(commands: Commands) -> None:
    list_runs = commands.add("list", cmd_list, "list runs, newest first; or the approval inbox")
    list_runs.add_argument(
        "--status",
        choices=sorted([*LIST_STATUSES, AWAITING]),
        help=f"only runs in this state; {AWAITING}: every run waiting for a person, oldest first",
    )
    list_runs.add_argument("--process", metavar="NAME", help="only the runs of this process, every version")
    list_runs.add_argument(
        "--limit",
        type=positive(int),
        default=None,
        metavar="N",
        help="show at most N runs: the newest (default: 50), or in the inbox the longest waiting (default: all)",
    )
    inbox = list_runs.add_argument_group(f"the inbox (--status {AWAITING})")
    inbox.add_argument(
        "--waiting",
        action="append",
        choices=[kind.value for kind in DecisionKind],
        metavar="KIND",
        help="only runs waiting for this (repeat for several): " + ", ".join(kind.value for kind in DecisionKind),
    )
    inbox.add_argument("--can-decide", metavar="NAME", help="only runs NAME may decide (as far as the listing tells)")
    inbox.add_argument(
        "--older-than", type=positive(float), metavar="SECONDS", help="only runs waiting longer than this"
    )


async def cmd_list(args: argparse.Namespace) -> int:
    config = settings()
    client = await open_client(config)
    if args.status == AWAITING:
        if args.process:
            raise CliError(f"--process lists a process's runs; it does not filter the inbox (--status {AWAITING})")
        return await _inbox(client, config, args)
    if args.waiting or args.can_decide or args.older_than:
        raise CliError(f"--waiting, --can-decide and --older-than filter the inbox: add --status {AWAITING}")
    # A run that continued as new leaves closed executions behind; list each run once.
    query = f"WorkflowType = '{WORKFLOW_NAME}' AND ExecutionStatus != 'ContinuedAsNew'"
    if args.status:
        query += f" AND ExecutionStatus = '{LIST_STATUSES[args.status]}'"
    process = await _process_filter(client, config, args)
    if process and process[1]:
        query += f" AND {PROCESS_SEARCH_ATTRIBUTE} = '{process[0]}'"
    limit = args.limit or DEFAULT_LIMIT
    rows: list[dict[str, Any]] = []
    # Without the attribute, a process's runs are found by their memos: read until enough are.
    async for execution in client.list_workflows(query, limit=None if process and not process[1] else limit):
        if len(rows) >= limit:
            break
        memo = await _memo(execution)
        recorded = memo.get("process") if isinstance(memo.get("process"), dict) else None
        if process and (recorded is None or recorded.get("name") != process[0]):
            continue
        status = EXECUTION_STATUS.get(execution.status, "unknown") if execution.status else "unknown"
        phase = memo.get("phase", status)
        if (
            status == "running"
            and phase == Phase.awaiting_approval.value
            and await _has_pending_activities(client, execution.id)
        ):
            # A run writes "running" into its memo one workflow task after the approval (so the
            # first step starts sooner); its steps already in flight say it is running.
            phase = Phase.running.value
        rows.append(
            {
                "run_id": execution.id,
                "status": status,
                # The run's own outcome (succeeded, rejected, ...): a rejected run is a completed
                # workflow. A terminated or timed-out run never recorded its end, so say that.
                "phase": status if status in ("terminated", "timed-out") else phase,
                "started_at": execution.start_time.isoformat() if execution.start_time else None,
                "closed_at": execution.close_time.isoformat() if execution.close_time else None,
                "goal": memo.get("goal", ""),
                "process": recorded,
            }
        )
    if process:
        return _emit_rows(
            rows,
            json_mode=args.json,
            empty=f"no runs of process {process[0]}",
            cells=lambda row: [
                row["run_id"],
                row["phase"],
                _when(row["started_at"]),
                f"v{(row['process'] or {}).get('version', '?')}",
                row["goal"],
            ],
        )
    return _emit_rows(
        rows,
        json_mode=args.json,
        empty="no runs",
        cells=lambda row: [row["run_id"], row["phase"], _when(row["started_at"]), row["goal"]],
    )


async def _process_filter(client: Client, config: Settings, args: argparse.Namespace) -> tuple[str, bool] | None:
    """`--process NAME`: the name, and whether visibility can find its runs (the StratagemProcess
    search attribute); without it each run's memo says, which is slower, so the listing says so."""
    name = args.process
    if name is None:
        return None
    if re.fullmatch(PROCESS_NAME_PATTERN, name) is None:
        raise CliError(f"--process '{name[:64]}' is not a process name (lower-case letters, digits, '-', '_', '.')")
    if await has_process_attribute(client):
        return name, True
    render.note(
        f"note: namespace {config.namespace} has no {PROCESS_SEARCH_ATTRIBUTE} search attribute; reading every "
        f"run's memo instead (register it with `{REGISTER_PROCESS_HINT} --namespace {config.namespace}`)",
        json_mode=True,
    )
    return name, False


def _when(moment: str | None) -> str:
    return (moment or "")[:19].replace("T", " ")


def _emit_rows(
    rows: list[dict[str, Any]], *, json_mode: bool, empty: str, cells: Callable[[dict[str, Any]], list[str]]
) -> int:
    """A listing: the rows as one JSON document, or for people a line each (or `empty`), in
    columns as wide as their widest cell; the last column (the goal) is left as it is."""
    if json_mode:
        render.emit_json(rows)
        return 0
    if not rows:
        render.console.print(empty)
    table = [[render.plain(str(cell)) for cell in cells(row)] for row in rows]
    widths = [max(render.cell_width(line[i]) for line in table) for i in range(len(table[0]) - 1)] if table else []
    for line in table:
        padded = [cell + " " * (width - render.cell_width(cell)) for cell, width in zip(line, widths, strict=False)]
        render.console.print("  ".join([*padded, line[-1]]).rstrip(), markup=False)
    return 0


async def _inbox(client: Client, config: Settings, args: argparse.Namespace) -> int:
    """Every run in the namespace a person must act on, the longest waiting first: read from
    visibility (the StratagemStatus search attribute and each run's memo), page after page, with
    no query to any run (stratagem.inbox)."""
    if not await has_status_attribute(client):
        raise CliError(
            f"the approval inbox needs the {STATUS_SEARCH_ATTRIBUTE} search attribute in namespace {config.namespace}; "
            f"register it with `{REGISTER_STATUS_HINT} --namespace {config.namespace}` (runs started afterwards appear)"
        )
    older = timedelta(seconds=args.older_than) if args.older_than else None
    chosen = inbox.Filter.of(args.waiting or (), args.can_decide, older)
    try:
        rows = [row async for row in inbox.every(client, chosen, who=args.can_decide)]
    except inbox.InboxError as exc:
        raise CliError(str(exc)) from None
    # Oldest first. Visibility keeps the newest started first, so the order is made here.
    rows.sort(key=lambda row: row["since"] or "")
    shown = rows[: args.limit] if args.limit else rows
    _emit_rows(
        shown,
        json_mode=args.json,
        empty="no run is waiting for a person",
        cells=lambda row: [row["run_id"], f"since {_when(row['since'])}", "; ".join(row["waiting_for"]), row["goal"]],
    )
    if len(shown) < len(rows) and not args.json:
        render.console.print(f"{len(rows) - len(shown)} more waiting, not shown (--limit {args.limit})", markup=False)
    return 0
