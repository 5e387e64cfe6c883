"""What the bench reads from /proc (Linux): a process's memory, and the CPU seconds of this
process, of its workflow task threads and of the dev server it started."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path


def read_proc_status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak RSS) of a process, in KiB."""
    out: dict[str, int] = {}
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return out
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            out[name] = int(value.split()[0])
    return out


def _proc_stat(pid: int | str, thread: int | None = None) -> list[str]:
    """The fields of /proc/<pid>/stat (or of one of its threads') after the command's closing
    parenthesis (state first)."""
    path = f"/proc/{pid}/task/{thread}/stat" if thread is not None else f"/proc/{pid}/stat"
    return Path(path).read_text().rsplit(")", 1)[1].split()


def _proc_cpu_seconds(pid: int | str, thread: int | None = None) -> float:
    """User plus system CPU time a process (or one of its threads) has used (0 if it is gone)."""
    try:
        fields = _proc_stat(pid, thread)
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def server_pids() -> list[int]:
    """The dev servers this process started (children running `temporal server start-dev`)."""
    me, found = str(os.getpid()), []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = _proc_stat(int(entry.name))[1]
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if ppid == me and b"server" in cmdline and b"start-dev" in cmdline:
            found.append(int(entry.name))
    return found


# The SDK's pool of threads that run workflow tasks (temporalio.worker._workflow) names them so.
WORKFLOW_THREAD_PREFIX = "temporal_workflow_"


def _workflow_threads_cpu_seconds() -> float:
    """CPU time used so far by this process's workflow task threads (the ones alive now)."""
    threads = {t.native_id for t in threading.enumerate() if t.name.startswith(WORKFLOW_THREAD_PREFIX)}
    return sum(_proc_cpu_seconds("self", tid) for tid in threads if tid is not None)


@dataclass
class CpuMeter:
    """CPU seconds spent by this process (the bench's client and in-process workers, every thread),
    the part of it its workflow task threads spent (workflow code and the SDK's work around it),
    and the dev server's, summed over the blocks measured with `with meter:`. Throughput on a
    shared 2-core machine follows the process and the server together, so they say which side a
    gap comes from; the server's figure moves from burst to burst about as much as the
    throughput does."""

    process_s: float = 0.0
    workflow_threads_s: float = 0.0
    server_s: float = 0.0
    _pids: list[int] = field(default_factory=list)
    _at: tuple[float, float, float] = (0.0, 0.0, 0.0)

    def _read(self) -> tuple[float, float, float]:
        server = sum(_proc_cpu_seconds(pid) for pid in self._pids)
        return time.process_time(), _workflow_threads_cpu_seconds(), server

    def __enter__(self) -> CpuMeter:
        self._pids = self._pids or server_pids()
        self._at = self._read()
        return self

    def __exit__(self, *exc: object) -> None:
        process, threads, server = self._read()
        self.process_s += process - self._at[0]
        # A pool thread that ended meanwhile takes its CPU with it; the SDK's pool keeps its threads.
        self.workflow_threads_s += max(0.0, threads - self._at[1])
        self.server_s += server - self._at[2]
