"""Processes this home started, recognised by pid and command line: a pid in a state file may
since have been reused by an unrelated process."""

from __future__ import annotations

import os
from pathlib import Path


def cmdline(pid: int) -> list[str] | None:
    """The process's arguments where /proc tells, else None."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return raw.decode(errors="replace").split("\0")


def alive(pid: int, marker: str) -> bool:
    """True if `pid` runs and (where /proc tells) its command line contains `marker`."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    if Path("/proc/self/cmdline").exists():
        args = cmdline(pid)
        return args is not None and marker in " ".join(args)
    return True
