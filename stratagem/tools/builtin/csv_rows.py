"""The `append_csv_row` tool: one row appended to a CSV file in the workspace, once per step
however often the step is retried, with cells a spreadsheet shows rather than runs."""

import contextlib
import csv
import hashlib
import io
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from stratagem.common.errors import ToolError
from stratagem.tools.builtin.workspace import RESERVED_DIR, atomic_write, relative, workspace_path, workspace_root
from stratagem.tools.definition import ToolContext, tool

try:
    import fcntl
except ImportError:  # Windows: the in-process lock below is all there is
    fcntl = None  # type: ignore[assignment]


@tool
def append_csv_row(path: str, row: dict[str, str | int | float | bool | None], *, ctx: ToolContext) -> dict[str, Any]:
    """Append one row to a CSV file in the run's workspace.

    `row` maps column names to values. A new file gets a header made of the row's keys, in order.
    For an existing file the columns follow its header: a column missing from `row` is left empty
    and a key that is not in the header is refused. A retried step does not append its row twice.
    Returns {"path": the relative path, "rows": the number of data rows now in the file,
    "repeated": true when this step had already appended its row}.
    """
    if not row:
        raise ToolError("append_csv_row: 'row' has no columns", retryable=False)
    target = workspace_path(ctx, path, writing=True)
    if target.is_dir():
        raise ToolError(f"append_csv_row: '{path}' is a folder, not a file", retryable=False)
    target.parent.mkdir(parents=True, exist_ok=True)
    record_path = _idempotency_record_path(ctx)

    with _locked_for_append(target) as handle:
        handle.seek(0)
        existing = handle.read()
        record = _read_record(record_path)
        if record is not None and record["state"] == "done":
            return {**record["result"], "repeated": True}
        if record is not None and _pending_append_landed(record, existing):
            # The worker died after appending but before recording it; the row is already there.
            result = {"path": relative(ctx, target), "rows": _count_data_rows(existing), "repeated": False}
            _write_record(record_path, {"state": "done", "result": result})
            return {**result, "repeated": True}

        text = existing.decode("utf-8-sig")
        header = next(csv.reader(io.StringIO(text)), None)
        if header is None:
            header = [_inert(name) for name in row]
            row = dict(zip(header, row.values(), strict=False))
            addition = _csv_line(header) + _csv_line([_csv_cell(row[name]) for name in header])
        else:
            unknown = [name for name in row if name not in header]
            if unknown:
                raise ToolError(
                    f"append_csv_row: {', '.join(repr(n) for n in unknown)} not in the header of '{path}' "
                    f"(columns: {', '.join(header)})",
                    retryable=False,
                )
            addition = _csv_line([_csv_cell(row.get(name)) for name in header])
            if not text.endswith(("\n", "\r")):
                addition = "\n" + addition
        appended = addition.encode("utf-8")

        # Record the intent first, so a crash between the append and the final record can be
        # told apart from a crash before the append.
        _write_record(record_path, {"state": "pending", "offset": len(existing), "appended": addition})
        handle.write(appended)
        handle.flush()
        os.fsync(handle.fileno())
        result = {"path": relative(ctx, target), "rows": _count_data_rows(existing + appended)}
        _write_record(record_path, {"state": "done", "result": result})
    return {**result, "repeated": False}


_append_locks: dict[Path, threading.Lock] = {}
_append_locks_guard = threading.Lock()


@contextlib.contextmanager
def _locked_for_append(target: Path) -> Iterator[io.BufferedRandom]:
    """Open a file for appending, holding it exclusively against other threads and processes."""
    with _append_locks_guard:
        lock = _append_locks.setdefault(target, threading.Lock())
    with lock, open(target, "a+b") as handle:
        if fcntl is not None:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        yield handle  # closing the file releases the flock


def _idempotency_record_path(ctx: ToolContext) -> Path:
    # A hash, not an escaped key: every key maps to a distinct, filesystem-safe name.
    digest = hashlib.sha256(ctx.idempotency_key.encode("utf-8")).hexdigest()
    return workspace_root(ctx) / RESERVED_DIR / "idempotency" / f"{digest}.json"


def _read_record(record_path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(record_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None


def _write_record(record_path: Path, record: dict[str, Any]) -> None:
    record_path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(record_path, json.dumps(record).encode("utf-8"))


def _pending_append_landed(record: dict[str, Any], existing: bytes) -> bool:
    appended = record["appended"].encode("utf-8")
    offset = record["offset"]
    return existing[offset : offset + len(appended)] == appended


# A cell starting with one of these is a formula to Excel, LibreOffice and Sheets, which would
# run "=HYPERLINK(...)" or "=cmd|..." written by a model or taken from a web page.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _csv_cell(value: str | int | float | bool | None) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)  # a negative number is a number, not a formula
    return _inert(str(value))


def _inert(text: str) -> str:
    """Text a spreadsheet shows instead of evaluating: a leading quote, as OWASP advises."""
    return "'" + text if text.startswith(_FORMULA_START) else text


def _csv_line(cells: list[str]) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerow(cells)
    return out.getvalue()


def _count_data_rows(data: bytes) -> int:
    rows = [r for r in csv.reader(io.StringIO(data.decode("utf-8-sig"))) if r]
    return max(len(rows) - 1, 0)
