"""The one tool of the peers bench, `fetch_record`, and its effect log.

Every call appends a line to the file PEERS_EFFECT_LOG names (`index<TAB>key<TAB>pid`) before it
waits `ms` milliseconds and returns `size` characters: the log is the world the job changes, so a
call that ran twice shows up as an index logged twice. The key is Stratagem's idempotency key
where there is one, else `-`.

`fetch_record` is the plain function the peers register (as an activity or an agent tool);
Stratagem's worker loads this module with `--tools bench.peers.tools` and registers the decorated
`stratagem_fetch_record` under the same name, with a reconcile check that reads the log by key.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from stratagem.tools import tool
from stratagem.tools.definition import ToolContext

EFFECT_LOG_ENV = "PEERS_EFFECT_LOG"
_LINE = "record {index}: " + "abcdefghijklmnopqrstuvwxyz0123456789 " * 4 + "\n"


def record_text(index: int, size: int) -> str:
    """`size` characters, the same for every framework."""
    line = _LINE.format(index=index)
    return (line * (size // len(line) + 1))[:size]


def _log(index: int, key: str) -> None:
    path = os.environ.get(EFFECT_LOG_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(f"{index}\t{key}\t{os.getpid()}\n")
            out.flush()
            os.fsync(out.fileno())


def logged(path: Path) -> list[tuple[int, str]]:
    """The effects in a log: (index, key) per call, in order."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        index, key, _pid = line.split("\t")
        out.append((int(index), key))
    return out


def fetch_record(index: int, size: int, ms: int = 0) -> str:
    """Fetch record `index`: `size` characters."""
    _log(index, "-")
    if ms:
        time.sleep(ms / 1000)
    return record_text(index, size)


def _check(index: int, size: int, ms: int, ctx: ToolContext) -> str | None:
    """Did a call with this key happen? Then its output, else None."""
    path = os.environ.get(EFFECT_LOG_ENV)
    if path and any(key == ctx.idempotency_key for _, key in logged(Path(path))):
        return record_text(index, size)
    return None


@tool(name="fetch_record", reconcile=_check)
def stratagem_fetch_record(index: int, size: int, ms: int, ctx: ToolContext) -> str:
    """Fetch record `index`: `size` characters."""
    _log(index, ctx.idempotency_key)
    if ms:
        time.sleep(ms / 1000)
    return record_text(index, size)
