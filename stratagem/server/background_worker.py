"""The embedded setup's background worker: one `stratagem worker` process per STRATAGEM_HOME,
started, restarted with the union of the tools runs asked for, and stopped; worker.json records
what it serves."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stratagem.common.config import WORKSPACE_ROOTS_ENV, Settings
from stratagem.common.errors import ConfigError, StratagemError
from stratagem.common.signing import DecisionPolicy
from stratagem.common.telemetry import TELEMETRY_ENV
from stratagem.models.scripted import SCRIPTED_DIRS_ENV
from stratagem.server.home import prepare_home, write_atomically
from stratagem.server.processes import alive
from stratagem.server.worker_log import WorkerExit, last_words
from stratagem.tools import ToolRegistry, canonical_tool_source
from stratagem.tools.mcp_sources import is_mcp_source

_WORKER_MARKER = "stratagem.cli worker"


# The worker reads these (model keys and endpoints, the encryption keys, the output store);
# a change must reach the background worker.
WORKER_ENV = (
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    "STRATAGEM_REQUEST_TIMEOUT",
    "STRATAGEM_ENCRYPTION_KEY",
    "STRATAGEM_ENCRYPTION_OLD_KEYS",
    "STRATAGEM_STORE",
    "STRATAGEM_INLINE_LIMIT",
    # Which decisions count (stratagem.common.signing): the keys the operator lists, and unsigned ones.
    "STRATAGEM_APPROVER_KEYS",
    "STRATAGEM_ISSUER_KEYS",
    "STRATAGEM_ALLOW_UNSIGNED",
    *TELEMETRY_ENV,
)


def code_fingerprint() -> str:
    """A digest of the installed Stratagem code (stratagem, workflows, activities: names, sizes,
    modification times). worker.json keeps it, so a background worker left running by an older
    version, which would not serve what new runs ask of it (a new task queue, say), is replaced."""
    import stratagem
    from stratagem import activities, workflows

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


def _scripted_dirs(state: dict[str, Any] | None) -> list[str]:
    listed = state.get("scripted_dirs") if state else None
    return [str(d) for d in listed] if isinstance(listed, list) else []


def _within(folder: str, folders: list[str]) -> bool:
    return any(Path(folder).is_relative_to(other) for other in folders)


def _explicit_scripted_dirs() -> list[str]:
    """STRATAGEM_SCRIPTED_DIRS as this shell sets it, if it does: the background worker keeps it."""
    listed = os.environ.get(SCRIPTED_DIRS_ENV, "").split(os.pathsep)
    return [str(Path(d).expanduser().resolve()) for d in listed if d.strip()]


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
        state["tools"] = (
            [str(t) for t in tools if is_mcp_source(str(t)) or not str(t).endswith(".py") or Path(str(t)).is_file()]
            if isinstance(tools, list)
            else []
        )
        return state

    def _state(self) -> dict[str, Any] | None:
        """worker.json if the worker it names is alive, else None."""
        state = self._recorded()
        if state is None:
            return None
        pid = state.get("pid")
        if not isinstance(pid, int) or not alive(pid, _WORKER_MARKER):
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

    def ensure(self, tools: list[str], *, models: bool = True, scripted_dirs: Sequence[Path] = ()) -> str | None:
        """Make sure a worker runs with this setup and at least `tools` plus every tool module
        recorded before (a restarted worker keeps what runs asked for). Returns what was done,
        or None if nothing.

        `scripted_dirs`: folders of scripted model files the command that asks named itself (an
        example's models.yaml beside its plan). The worker reads scripted files from those, from
        every such folder recorded before, and from STRATAGEM_SCRIPTED_DIRS if this shell sets it;
        a worker started by hand reads them only where STRATAGEM_SCRIPTED_DIRS (or its folder) says.

        New worker settings (keys, base URLs, the store) restart the worker only when `models` is true and
        this environment sets some: a shell without keys must not replace a worker that has them.

        Before a running worker is stopped, the tools it is to serve are loaded here: modules that
        cannot be loaded together (two tools of one name) are a ConfigError, and the running
        worker keeps serving; started anyway, the new worker died at once, and every run of the
        home waited on it without a word."""
        wanted = sorted({canonical_tool_source(t) for t in tools})
        asked = sorted({str(Path(d).expanduser().resolve()) for d in scripted_dirs} | set(_explicit_scripted_dirs()))
        setup = self._setup()
        state = self._state()
        current = sorted(state["tools"]) if state else []
        # Each run carries its own workspace (RunOptions.workspace); the worker may write only in
        # the workspaces runs from this home asked for, which grow like its tools.
        known = _workspaces(state) if state else []
        changed = [
            key.replace("_", " ")
            for key, value in setup.items()
            if state is not None
            and key != "workspace"
            and state.get(key) != value
            and (key != "worker_settings" or (models and worker_settings_given()))
        ]
        if state is not None and setup["workspace"] not in known:
            changed.append("workspace")
        if state is not None and not all(_within(d, _scripted_dirs(state)) for d in asked):
            changed.append("scripted model folders")
        if state is not None and not changed and set(wanted) <= set(current):
            return None
        recorded = self._recorded()
        workspaces = sorted(set(_workspaces(recorded) if recorded else []) | {setup["workspace"]})
        scripted = sorted(set(_scripted_dirs(recorded)) | set(asked))
        prepare_home(self.home)
        union = sorted(set(self.recorded_tools()) | set(wanted))
        self._check_loadable(union, self.recorded_tools())
        if state is not None:
            self._stop(int(state["pid"]))
        command = [sys.executable, "-m", "stratagem.cli", "worker"]
        for module in union:
            command += ["--tools", module]
        try:
            log = self.log_file.open("ab")
        except OSError as exc:
            raise ConfigError(f"cannot write the worker log {self.log_file}: {exc.strerror or exc}") from None
        env = {
            **os.environ,
            "TEMPORAL_ADDRESS": setup["address"],
            "TEMPORAL_NAMESPACE": setup["namespace"],
            "TEMPORAL_TASK_QUEUE": setup["task_queue"],
            "STRATAGEM_WORKSPACE": setup["workspace"],
            WORKSPACE_ROOTS_ENV: os.pathsep.join(workspaces),
        }
        if scripted:
            env[SCRIPTED_DIRS_ENV] = os.pathsep.join(scripted)
        with log:
            offset = log.seek(0, os.SEEK_END)  # where this worker's own lines begin (last_words)
            process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=env,
            )
        state_text = {
            "pid": process.pid,
            "tools": union,
            **setup,
            "workspaces": workspaces,
            "scripted_dirs": scripted,
            "log_offset": offset,
        }
        write_atomically(self.state_file, json.dumps(state_text))
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
        if (
            state is not None
            and not worker_settings_given()
            and state.get("worker_settings") != setup["worker_settings"]
        ):
            done += (
                "\nwarning: the worker had settings (API keys, encryption keys, the store) that this shell lacks, and now runs "
                "without them; export them and run again so runs calling OpenAI or Anthropic models can"
            )
        return done

    def _check_loadable(self, union: list[str], recorded: list[str]) -> None:
        """Load `union` here, as the worker will, and refuse now what would kill it at its start."""
        try:
            DecisionPolicy.from_env()  # a malformed key list (STRATAGEM_APPROVER_KEYS) the worker would refuse
            ToolRegistry.from_modules(union)
        except StratagemError as exc:
            try:
                ToolRegistry.from_modules(recorded)
            except StratagemError:
                raise ConfigError(
                    f"this home's background worker cannot load the tools its runs use: {exc}; fix that, and run again"
                ) from None
            # What the runs of this home use already loads: this run's tools clash with them.
            raise ConfigError(
                f"this home's background worker cannot serve this run's tools beside those of its other runs: {exc}; "
                f"or run this plan from a home of its own (STRATAGEM_HOME=DIR and TEMPORAL_ADDRESS=localhost:PORT, "
                f"a free port). The worker of {self.home} goes on serving its runs"
            ) from None

    def stop(self) -> int | None:
        """Stop this home's background worker if it runs. Returns the pid it stopped. worker.json
        says it was stopped, so that it is not reported as having exited (`exited`)."""
        state = self._state()
        if state is None:
            return None
        pid = int(state["pid"])
        self._stop(pid)
        write_atomically(self.state_file, json.dumps({**state, "stopped": True}))
        return pid

    def exited(self) -> WorkerExit | None:
        """How this home's background worker ended, if one was started here and is not running:
        stopped (`stratagem down`), or exited, with the last error line of its own log."""
        state = self._recorded()
        pid = state.get("pid") if state else None
        if state is None or not isinstance(pid, int) or alive(pid, _WORKER_MARKER):
            return None
        offset = state.get("log_offset")
        words = last_words(self.log_file, offset if isinstance(offset, int) else None)
        return WorkerExit(pid=pid, stopped=bool(state.get("stopped")), last_line=words, log=self.log_file)

    def _stop(self, pid: int, wait_seconds: float = 15) -> None:
        # SIGTERM lets the worker finish its current activities' bookkeeping and leave cleanly.
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait_seconds
        while time.monotonic() < deadline and alive(pid, _WORKER_MARKER):
            time.sleep(0.1)
        if alive(pid, _WORKER_MARKER):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
