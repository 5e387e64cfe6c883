"""What the background worker's log says about how it ended: the last error line it wrote."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# Enough for the end of a traceback; a log that grew for weeks is not read whole.
_TAIL_BYTES = 64 * 1024


@dataclass(frozen=True)
class WorkerExit:
    """A background worker of this home that is not running: stopped by `stratagem down`, or
    exited, with the last error line of its own log (None if it wrote none)."""

    pid: int
    stopped: bool
    last_line: str | None
    log: Path

    def describe(self) -> str:
        if self.stopped:
            return f"this home's background worker (pid {self.pid}) was stopped (stratagem down)"
        why = (
            f": {self.last_line}"
            if self.last_line
            else " without an error in its log (killed, or the machine restarted)"
        )
        return f"this home's background worker (pid {self.pid}) exited{why}"


def last_words(log: Path, offset: int | None) -> str | None:
    """The last error line a worker wrote to `log` from `offset` on (where its own output begins):
    its one-line `error: ...`, else the last line of a traceback, else None."""
    try:
        with log.open("rb") as file:
            size = file.seek(0, 2)
            start = max(offset or 0, size - _TAIL_BYTES)
            file.seek(start)
            text = file.read().decode(errors="replace")
    except OSError:
        return None
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    if errors:
        return errors[-1][:300]
    if any(line.startswith("Traceback") for line in lines):
        return lines[-1][:300]
    return None
