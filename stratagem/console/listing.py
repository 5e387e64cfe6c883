"""Runs read from visibility and their memos only: the console's Runs page and `/api/runs`.

One visibility query per page of runs, never a query to each run: a run's memo already carries
its goal, its phase (written as it changes) and what it waits for (`waiting`, with the
StratagemStatus attribute). The query is built from fixed parts only; what a person types (the
search text) and every filter the memo answers are applied here, in Python, to the memo's
values, so no input ever becomes visibility-query syntax. Paging follows visibility's own
cursor (its next_page_token) with the position reached inside that page, so a page that stops
half way through a visibility page resumes at the next run, not at the next visibility page. The
cursor is signed with the console's secret: visibility's token goes back to the server only as
the server gave it (a made-up one made the dev server fail, and the client retry, for seconds).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.client import Client, WorkflowExecution, WorkflowExecutionStatus

from stratagem.client import has_status_attribute
from stratagem.domain.decisions import listed
from stratagem.domain.run_types import AWAITING_APPROVAL, STATUS_SEARCH_ATTRIBUTE, WORKFLOW_NAME, DecisionKind, Phase

EXECUTION_STATUS = {
    WorkflowExecutionStatus.RUNNING: "running",
    WorkflowExecutionStatus.COMPLETED: "completed",
    WorkflowExecutionStatus.FAILED: "failed",
    WorkflowExecutionStatus.CANCELED: "cancelled",
    WorkflowExecutionStatus.TERMINATED: "terminated",
    WorkflowExecutionStatus.TIMED_OUT: "timed-out",
}
# A run ended from outside (terminated, timed out) never wrote its end into its memo: its phase is that.
ENDED_OUTSIDE = ("terminated", "timed-out")
PHASES = [p.value for p in Phase] + list(ENDED_OUTSIDE)
WAITING_KINDS = [k.value for k in DecisionKind]
WAITING_ANY = "any"
UNREADABLE_GOAL = "(unreadable: encrypted with a key this console lacks)"

PAGE_SIZE = 25
MAX_PAGE_SIZE = 200
VISIBILITY_PAGE = 200  # runs read per visibility call
SCAN_LIMIT = 2000  # runs looked at per request at most: a narrow filter answers with a cursor to go on, not a long wait
LIST_TIMEOUT = timedelta(seconds=10)

_BASE = f"WorkflowType = '{WORKFLOW_NAME}' AND ExecutionStatus != 'ContinuedAsNew'"
_LIVE = {Phase.planning, Phase.awaiting_approval, Phase.running, Phase.replanning, Phase.awaiting_repair}


class FilterError(ValueError):
    """A filter or cursor this console does not know: one line, for a 400 or the page's error."""


@dataclass(frozen=True)
class RunFilter:
    """What a person asked for. Every field is checked against a fixed list (`checked`); `text`
    is matched here against the goal and the run id, never sent to the server."""

    phase: str = ""
    waiting: str = ""  # a DecisionKind, or WAITING_ANY
    mine: bool = False  # only runs the person may decide something on
    text: str = ""

    def checked(self) -> RunFilter:
        if self.phase and self.phase not in PHASES:
            raise FilterError(f"unknown phase '{self.phase[:40]}': one of {', '.join(PHASES)}")
        if self.waiting and self.waiting not in (*WAITING_KINDS, WAITING_ANY):
            raise FilterError(
                f"unknown waiting kind '{self.waiting[:40]}': one of {WAITING_ANY}, {', '.join(WAITING_KINDS)}"
            )
        return RunFilter(self.phase, self.waiting, self.mine, self.text.strip()[:200])

    def fingerprint(self) -> str:
        return hashlib.sha256(json.dumps([self.phase, self.waiting, self.mine, self.text]).encode()).hexdigest()[:16]


def visibility_query(wanted: RunFilter, *, status_attribute: bool) -> str:
    """The visibility query for a filter: the narrowest one built from constants. The phase and the
    waits are then checked on each memo; this only keeps the server from sending runs that cannot match."""
    parts = [_BASE]
    if wanted.waiting or wanted.mine:
        parts.append("ExecutionStatus = 'Running'")
        if status_attribute:
            parts.append(f"{STATUS_SEARCH_ATTRIBUTE} = '{AWAITING_APPROVAL}'")
    elif wanted.phase in ENDED_OUTSIDE:
        parts.append(
            "ExecutionStatus = 'Terminated'" if wanted.phase == "terminated" else "ExecutionStatus = 'TimedOut'"
        )
    elif wanted.phase:
        parts.append("ExecutionStatus = 'Running'" if Phase(wanted.phase) in _LIVE else "ExecutionStatus != 'Running'")
    return " AND ".join(parts)


def may_decide(who: str, memo: dict[str, Any], wait: dict[str, Any]) -> bool:
    """Whether `who` may decide one wait, as far as visibility knows: as the run wrote it in the
    wait (its deciders, four eyes and escalation: stratagem.domain.decisions.listed, the inbox's
    rule), else, for a memo written before waits said so, the run's approver list from its start
    (`approvers`; none: anyone may, as the run itself rules). The run still refuses anyone its
    rules exclude."""
    if _written(wait):
        return listed.may_decide(wait, who, datetime.now(UTC))
    names = memo.get("approvers")
    return who in names if isinstance(names, list) else True


def deciders(memo: dict[str, Any], wait: dict[str, Any]) -> list[str] | None:
    """Who may decide a wait, where visibility knows (None: not known, or anyone)."""
    names = wait.get("deciders") if _written(wait) else memo.get("approvers")
    return [str(n) for n in names] if isinstance(names, list) else None


def _written(wait: dict[str, Any]) -> bool:
    """Whether the run wrote who may decide this wait into it (memos from issue #39 on)."""
    return "deciders" in wait


@dataclass
class RunsPage:
    runs: list[dict[str, Any]]
    next: str | None = None
    scanned: int = 0
    filters: RunFilter = field(default_factory=RunFilter)


async def list_runs(
    client: Client,
    who: str,
    wanted: RunFilter,
    *,
    limit: int = PAGE_SIZE,
    cursor: str | None = None,
    secret: bytes,
    scan_limit: int = SCAN_LIMIT,
) -> RunsPage:
    """One page of runs that match `wanted`, in visibility's order (runs still going, newest
    first, then ended runs, latest ended first), and the cursor to the rest (None: no more).
    `secret` signs the cursor."""
    wanted = wanted.checked()
    limit = max(1, min(limit, MAX_PAGE_SIZE))
    token, skip = _read_cursor(cursor, wanted, secret) if cursor else (None, 0)
    query = visibility_query(wanted, status_attribute=await has_status_attribute(client))
    rows: list[dict[str, Any]] = []
    scanned = 0
    while True:
        listing = client.list_workflows(
            query, page_size=VISIBILITY_PAGE, next_page_token=token, rpc_timeout=LIST_TIMEOUT
        )
        await listing.fetch_next_page()
        page, after = listing.current_page or [], listing.next_page_token or None
        for index in range(skip, len(page)):
            scanned += 1
            row = await run_row(page[index], who)
            if matches(row, wanted):
                rows.append(row)
            if len(rows) == limit or scanned >= scan_limit:
                more = index + 1 < len(page) or after is not None
                return RunsPage(rows, _cursor(token, index + 1, wanted, secret) if more else None, scanned, wanted)
        if after is None:
            return RunsPage(rows, None, scanned, wanted)
        token, skip = after, 0


async def run_row(execution: WorkflowExecution, who: str) -> dict[str, Any]:
    """A listed run as the page shows it, from its visibility record and memo alone."""
    try:
        memo = dict(await execution.memo())
    except Exception:
        memo = {"goal": UNREADABLE_GOAL}  # encrypted with another key: still listed, saying so
    status = EXECUTION_STATUS.get(execution.status, "unknown") if execution.status else "unknown"
    phase = status if status in ENDED_OUTSIDE else str(memo.get("phase") or status)
    running = status == "running"
    waits = [w for w in memo.get("waiting") or [] if isinstance(w, dict)] if running else []
    started = execution.start_time
    since = [str(w["since"]) for w in waits if w.get("since")]
    updated = execution.close_time.isoformat() if execution.close_time else max(since, default=_iso(started))
    return {
        "run_id": execution.id,
        "goal": str(memo.get("goal") or ""),
        "phase": phase,
        "status": status,
        "started": _iso(started),
        "updated": updated,
        "closed": _iso(execution.close_time),
        "waiting": [
            {
                "kind": str(w.get("kind")),
                "step_id": w.get("step_id"),
                "revision": w.get("revision"),
                "since": w.get("since"),
                "deciders": deciders(memo, w),
                "you_may_decide": may_decide(who, memo, w),
            }
            for w in waits
        ],
        "can_decide": any(may_decide(who, memo, w) for w in waits),
    }


def matches(row: dict[str, Any], wanted: RunFilter) -> bool:
    if wanted.phase and row["phase"] != wanted.phase:
        return False
    if wanted.waiting == WAITING_ANY and not row["waiting"]:
        return False
    if wanted.waiting and wanted.waiting != WAITING_ANY and all(w["kind"] != wanted.waiting for w in row["waiting"]):
        return False
    if wanted.mine and not row["can_decide"]:
        return False
    text = wanted.text.casefold()
    return not text or text in row["goal"].casefold() or text in row["run_id"].casefold()


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment else None


def _sign(body: bytes, secret: bytes) -> str:
    return hmac.new(secret, b"stratagem-runs-cursor\0" + body, hashlib.sha256).hexdigest()[:32]


def _cursor(token: bytes | None, skip: int, wanted: RunFilter, secret: bytes) -> str:
    body = {"t": base64.b64encode(token).decode() if token else None, "s": skip, "f": wanted.fingerprint()}
    raw = json.dumps(body, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=") + "." + _sign(raw, secret)


def _read_cursor(cursor: str, wanted: RunFilter, secret: bytes) -> tuple[bytes | None, int]:
    """A cursor this console gave, for these filters; FilterError for anything else (a cursor is
    the client's to send back, so it is read as untrusted)."""
    encoded, _, signature = cursor.partition(".")
    try:
        raw = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
    except (ValueError, binascii.Error):
        raise FilterError("the cursor is not one this console gave: start from the first page") from None
    if not hmac.compare_digest(signature, _sign(raw, secret)):
        raise FilterError("the cursor is not one this console gave: start from the first page")
    try:
        body = json.loads(raw)
        token = base64.b64decode(body["t"], validate=True) if body["t"] is not None else None
        skip, fingerprint = body["s"], body["f"]
    except (ValueError, KeyError, TypeError, binascii.Error):
        raise FilterError("the cursor is not one this console gave: start from the first page") from None
    if not isinstance(skip, int) or isinstance(skip, bool) or not 0 <= skip <= VISIBILITY_PAGE:
        raise FilterError("the cursor is not one this console gave: start from the first page")
    if fingerprint != wanted.fingerprint():
        raise FilterError("the cursor belongs to other filters: start from the first page")
    return token, skip


__all__ = [
    "PAGE_SIZE",
    "PHASES",
    "WAITING_ANY",
    "WAITING_KINDS",
    "FilterError",
    "RunFilter",
    "RunsPage",
    "deciders",
    "list_runs",
    "matches",
    "may_decide",
    "run_row",
    "visibility_query",
]
