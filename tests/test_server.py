"""The embedded server and the background worker (stratagem.server), the client's errors for a run
nobody serves, the CLI's lost-connection line, and the phase in the memo."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from support import FIXTURE_TOOLS
from support.plans import SIDE_EFFECT, awaiting, step
from support.ports import free_port_pair
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client, Interceptor, OutboundInterceptor, QueryWorkflowInput, WorkflowFailureError
from temporalio.service import RPCError, RPCStatusCode

from stratagem.client import connect, get_run, has_status_attribute, quiet_runtime, start_run
from stratagem.common.config import Settings
from stratagem.common.errors import ConfigError, RunUnresponsiveError
from stratagem.domain.plan import Author, AuthorKind, PlanDraft
from stratagem.domain.run_types import ApproveInput, Phase, RejectInput, RunInput, RunOptions
from stratagem.io.payloads import stratagem_data_converter
from stratagem.io.store import FileStore
from stratagem.server import (
    WORKER_ENV,
    BackgroundWorker,
    EmbeddedServer,
    code_fingerprint,
    is_listening,
    marked_home,
    owns_server,
    split_address,
    worker_settings_fingerprint,
)
from stratagem.tools import ToolRegistry
from stratagem.worker import build_worker

# ---------------------------------------------------------------------------- addresses


@pytest.mark.parametrize("port", ["0", "65536", "99999"])
@pytest.mark.unit
def test_a_port_outside_1_to_65535_is_refused(port):
    with pytest.raises(ConfigError, match=f"has port {int(port)}; a port is a number from 1 to 65535"):
        split_address(f"localhost:{port}")


@pytest.mark.unit
def test_ports_at_the_edges_are_accepted():
    assert split_address("localhost:1") == ("localhost", 1)
    assert split_address("[::1]:65535") == ("::1", 65535)


@pytest.mark.unit
def test_the_ui_port_must_be_valid_too(tmp_path):
    server = EmbeddedServer("127.0.0.1:65000", tmp_path / "home")
    with pytest.raises(ConfigError, match="66000 is above 65535; use a port of at most 64535"):
        server.check()
    EmbeddedServer("127.0.0.1:64535", tmp_path / "home").check()


@pytest.mark.unit
def test_a_remote_address_is_not_started(tmp_path):
    with pytest.raises(ConfigError, match="not a local address"):
        EmbeddedServer("temporal.example.com:7233", tmp_path / "home").check()


# ---------------------------------------------------------------------------- STRATAGEM_HOME


@pytest.mark.unit
def test_a_home_that_is_a_file_is_one_clear_error(tmp_path):
    home = tmp_path / "home"
    home.write_text("not a folder")
    with pytest.raises(ConfigError, match=r"STRATAGEM_HOME .*home is a file, not a folder"):
        EmbeddedServer("127.0.0.1:7233", home).check()
    with pytest.raises(ConfigError, match="is a file, not a folder"):
        EmbeddedServer("127.0.0.1:7233", home).start_detached()
    with pytest.raises(ConfigError, match="is a file, not a folder"):
        BackgroundWorker(home, "q", tmp_path / "ws").ensure([])
    # Below a file, the home cannot be created.
    with pytest.raises(ConfigError, match=r"cannot create STRATAGEM_HOME .*home/inner"):
        EmbeddedServer("127.0.0.1:7233", home / "inner").check()


@pytest.mark.unit
def test_check_creates_a_missing_home_and_starts_nothing(tmp_path):
    home = tmp_path / "a" / "b"
    EmbeddedServer("127.0.0.1:7233", home).check()
    assert home.is_dir() and list(home.iterdir()) == []


# ---------------------------------------------------------------------------- namespaces


def _namespaces(command: list[str]) -> list[str]:
    return [command[i + 1] for i, arg in enumerate(command) if arg == "--namespace"]


@pytest.mark.unit
def test_the_server_creates_the_configured_namespace(tmp_path):
    assert EmbeddedServer("127.0.0.1:7233", tmp_path).namespace == "default"
    assert _namespaces(EmbeddedServer("127.0.0.1:7233", tmp_path).command()) == ["default"]
    assert _namespaces(EmbeddedServer("127.0.0.1:7233", tmp_path, "ops").command()) == ["default", "ops"]
    assert _namespaces(EmbeddedServer("127.0.0.1:7233", tmp_path, namespace="default").command()) == ["default"]


# ---------------------------------------------------------------------------- a real embedded server


def _kill(pid: int | None) -> None:
    if pid is None:
        return
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    for _ in range(100):  # reap it if it is our child, so it does not linger as a zombie
        try:
            if os.waitpid(pid, os.WNOHANG)[0]:
                return
        except ChildProcessError:
            return
        time.sleep(0.05)


async def _namespace_exists(address: str, namespace: str) -> bool:
    # A server that has just started listens a moment before its frontend serves; the CLI waits
    # for it (cli/session.open_client), and so does this check.
    deadline = time.monotonic() + 30
    while True:
        try:
            client = await Client.connect(address, namespace=namespace, data_converter=stratagem_data_converter)
            break
        except RuntimeError as exc:
            if "not healthy yet" not in str(exc) or time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.25)
    try:
        await client.workflow_service.describe_namespace(DescribeNamespaceRequest(namespace=namespace))
        return True
    except RPCError as exc:
        if exc.status is RPCStatusCode.NOT_FOUND:
            return False
        raise


@pytest.mark.unit
async def test_a_failed_start_never_overwrites_the_pid_of_a_live_server(tmp_path, monkeypatch):
    home = tmp_path / "home"
    port = free_port_pair()
    server = EmbeddedServer(f"127.0.0.1:{port}", home, namespace="ops")
    # Meant for Stratagem's workers; the Temporal server would refuse it and not start.
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    pid = None
    try:
        pid = server.start_detached()
        assert server.pid_file.read_text() == str(pid)
        assert server.running_pid() == pid and owns_server(server)
        assert await _namespace_exists(server.address, "ops")
        # The approval inbox's search attribute is registered in every namespace it serves.
        for namespace in ("ops", "default"):
            client = await Client.connect(server.address, namespace=namespace)
            assert await has_status_attribute(client)

        # The same home on an impossible port: refused before anything starts.
        with pytest.raises(ConfigError, match="has port 99999"):
            EmbeddedServer("127.0.0.1:99999", home).start_detached()
        assert server.pid_file.read_text() == str(pid)

        # The same home on another free port: refused, two servers must not share the database.
        other = free_port_pair()
        with pytest.raises(
            ConfigError, match=rf"the embedded server of .* already runs \(pid {pid}, at 127.0.0.1:{port}\)"
        ):
            EmbeddedServer(f"127.0.0.1:{other}", home).start_detached()
        assert server.pid_file.read_text() == str(pid)
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", other)) != 0  # nothing was started there

        # Another home on the taken port: refused, and that home records no pid.
        taken = EmbeddedServer(server.address, tmp_path / "other-home")
        with pytest.raises(ConfigError, match="something already listens there"):
            taken.start_detached()
        assert not taken.pid_file.exists()
        assert server.pid_file.read_text() == str(pid)

        # The server stops (a crash, a reboot): the same database comes back with a namespace
        # it did not have before.
        _kill(pid)
        pid = None
        assert server.running_pid() is None and not owns_server(server)
        again = EmbeddedServer(server.address, home, namespace="billing")
        pid = again.start_detached()
        assert again.pid_file.read_text() == str(pid)
        assert await _namespace_exists(again.address, "billing")
        assert await _namespace_exists(again.address, "ops")
    finally:
        _kill(pid)


@pytest.mark.unit
def test_a_server_that_exits_at_start_leaves_the_pid_file_alone(tmp_path):
    """The pid is written only once the server listens: a start that fails (here its UI port is
    taken) keeps whatever the file said."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "server.pid").write_text("12345678")  # a stale pid: no such process
    port = free_port_pair()
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", port + 1000))
    blocker.listen()
    server = EmbeddedServer(f"127.0.0.1:{port}", home)
    try:
        with pytest.raises(ConfigError, match=r"exited at start \(status \d+\)"):
            server.start_detached(wait_seconds=30)
        assert (home / "server.pid").read_text() == "12345678"
    finally:
        blocker.close()
        running = server.running_pid()
        if running is not None:
            _kill(running)


# ---------------------------------------------------------------------------- the background worker


def _fake_worker() -> subprocess.Popen[bytes]:
    """A process whose command line looks like the background worker's, standing in for it."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "stratagem.cli", "worker"])
    cmdline = Path(f"/proc/{process.pid}/cmdline")
    for _ in range(200):  # until it has exec'd: before that, it still looks like this process
        if not cmdline.exists() or b"stratagem.cli\0worker" in cmdline.read_bytes():
            break
        time.sleep(0.01)
    return process


def _write_state(worker: BackgroundWorker, pid: int, tools: list[str], **setup: str) -> None:
    state = {
        "pid": pid,
        "tools": tools,
        "task_queue": worker.task_queue,
        "workspace": str(worker.workspace.resolve()),
        "namespace": "default",
        "address": "127.0.0.1:1",
        "worker_settings": worker_settings_fingerprint(),
        "code": code_fingerprint(),
        **setup,
    }
    worker.state_file.write_text(json.dumps(state))


# Tool modules the background worker is told to serve: real ones, since it loads them before a
# (re)start (two tools of one name are refused there, not left to kill the worker).
A_TOOLS, B_TOOLS = "support.fixture_tools", "support.crash_tools"


@pytest.fixture
def worker_env(monkeypatch):
    # Nothing listens on port 1: a worker the tests start exits at once with a clear error.
    monkeypatch.setenv("TEMPORAL_ADDRESS", "127.0.0.1:1")
    monkeypatch.setenv("TEMPORAL_NAMESPACE", "default")
    # A user's shell: the suite's own scripted folders would be passed on to the worker.
    monkeypatch.delenv("STRATAGEM_SCRIPTED_DIRS", raising=False)
    for name in WORKER_ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.mark.system
def test_recorded_tools_are_the_background_workers(tmp_path, worker_env):
    home = tmp_path / "home"
    home.mkdir()
    worker = BackgroundWorker(home, "q", tmp_path / "ws")
    assert worker.recorded_tools() == []
    fake = _fake_worker()
    try:
        _write_state(worker, fake.pid, ["my_company.tools"])
        assert worker.recorded_tools() == ["my_company.tools"]
        assert worker.running_pid() == fake.pid
        # A stopped worker's tools are still what its runs need.
        _kill(fake.pid)
        assert worker.running_pid() is None
        assert worker.recorded_tools() == ["my_company.tools"]
    finally:
        _kill(fake.pid)


@pytest.mark.system
def test_a_worker_left_by_other_code_is_replaced(tmp_path, worker_env):
    """A background worker started by an older Stratagem would not serve what new runs ask of it
    (the role task queues, say): a change of the installed code restarts it, keeping its tools."""
    home = tmp_path / "home"
    home.mkdir()
    worker = BackgroundWorker(home, "q", tmp_path / "ws")
    fake = _fake_worker()
    try:
        _write_state(worker, fake.pid, [A_TOOLS], code="0123456789abcdef")
        done = worker.ensure([A_TOOLS])
        assert done is not None and done.startswith("restarted (new code)") and f"tools: {A_TOOLS}" in done
        assert json.loads(worker.state_file.read_text())["code"] == code_fingerprint()
    finally:
        _kill(fake.pid)
        _kill(worker.running_pid())


@pytest.mark.system
def test_ensure_keeps_a_worker_that_already_has_the_tools_and_the_workspace(tmp_path, worker_env):
    home = tmp_path / "home"
    home.mkdir()
    worker = BackgroundWorker(home, "q", tmp_path / "ws")
    fake = _fake_worker()
    try:
        _write_state(worker, fake.pid, sorted([A_TOOLS, B_TOOLS]))
        assert worker.ensure([A_TOOLS]) is None
        assert worker.ensure([]) is None
        assert fake.poll() is None
    finally:
        _kill(fake.pid)


@pytest.mark.system
def test_a_new_api_key_restarts_the_worker_without_writing_the_key_down(tmp_path, worker_env, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    worker = BackgroundWorker(home, "q", tmp_path / "ws")
    fake = _fake_worker()
    started = None
    try:
        _write_state(worker, fake.pid, [A_TOOLS])
        monkeypatch.setenv("OPENAI_API_KEY", "sk-rotated-0123456789")
        done = worker.ensure([])
        assert done is not None and done.startswith("restarted (new worker settings) a background worker")
        assert fake.wait(timeout=20) is not None
        text = worker.state_file.read_text()
        started = json.loads(text)["pid"]
        assert "sk-rotated" not in text
        assert json.loads(text)["worker_settings"] == worker_settings_fingerprint()
    finally:
        _kill(fake.pid)
        if started:
            _kill(started)


@pytest.mark.system
def test_a_shell_without_keys_keeps_a_worker_that_has_them(tmp_path, worker_env, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    worker = BackgroundWorker(home, "q", tmp_path / "ws")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-kept-0123456789")
    keyed = worker_settings_fingerprint()
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    fake = _fake_worker()
    try:
        _write_state(worker, fake.pid, [A_TOOLS], worker_settings=keyed)
        assert worker.ensure([A_TOOLS]) is None
        # A new tool module does restart it, without the keys: say so.
        done = worker.ensure([B_TOOLS])
        assert done is not None and "warning: the worker had settings" in done
    finally:
        _kill(fake.pid)
        state = json.loads(worker.state_file.read_text())
        _kill(state["pid"])


@pytest.mark.system
def test_ensure_restarts_the_worker_for_a_new_workspace_keeping_its_tools(tmp_path, worker_env):
    home = tmp_path / "home"
    home.mkdir()
    old = BackgroundWorker(home, "q", tmp_path / "ws-one")
    fake = _fake_worker()
    started = None
    try:
        _write_state(old, fake.pid, [A_TOOLS])
        moved = BackgroundWorker(home, "q", tmp_path / "ws-two")
        done = moved.ensure([])
        assert done is not None and done.startswith("restarted (new workspace) a background worker")
        assert fake.wait(timeout=20) is not None  # the old worker was stopped
        state = json.loads(moved.state_file.read_text())
        started = state["pid"]
        assert state["workspace"] == str((tmp_path / "ws-two").resolve())
        # Runs from the first folder keep writing there: the worker now allows both.
        assert state["workspaces"] == sorted(str((tmp_path / w).resolve()) for w in ("ws-one", "ws-two"))
        assert state["tools"] == [A_TOOLS]
        assert started != fake.pid
    finally:
        _kill(fake.pid)
        _kill(started)


@pytest.mark.system
def test_a_workspace_the_worker_already_allows_needs_no_restart(tmp_path, worker_env):
    home = tmp_path / "home"
    home.mkdir()
    worker = BackgroundWorker(home, "q", tmp_path / "ws-two")
    fake = _fake_worker()
    try:
        both = sorted(str((tmp_path / w).resolve()) for w in ("ws-one", "ws-two"))
        _write_state(worker, fake.pid, [A_TOOLS], workspaces=both)  # type: ignore[arg-type]
        # Back in the first folder: its runs carry their workspace, which the worker allows.
        assert BackgroundWorker(home, "q", tmp_path / "ws-one").ensure([A_TOOLS]) is None
        assert fake.poll() is None  # still the same worker
    finally:
        _kill(fake.pid)


@pytest.mark.system
def test_ensure_restarts_the_worker_for_a_new_tool_or_namespace(tmp_path, worker_env, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    worker = BackgroundWorker(home, "q", tmp_path / "ws")
    pids: list[int] = []
    try:
        fake = _fake_worker()
        pids.append(fake.pid)
        _write_state(worker, fake.pid, [A_TOOLS])
        done = worker.ensure([B_TOOLS])
        assert done is not None and done.startswith("restarted (new tools)")
        state = json.loads(worker.state_file.read_text())
        pids.append(state["pid"])
        assert state["tools"] == sorted([A_TOOLS, B_TOOLS])

        fake = _fake_worker()
        pids.append(fake.pid)
        _write_state(worker, fake.pid, [A_TOOLS])
        monkeypatch.setenv("TEMPORAL_NAMESPACE", "ops")
        done = worker.ensure([])
        assert done is not None and done.startswith("restarted (new namespace)")
        state = json.loads(worker.state_file.read_text())
        pids.append(state["pid"])
        assert state["namespace"] == "ops"
    finally:
        for pid in pids:
            _kill(pid)


@pytest.mark.unit
def test_a_stopped_worker_comes_back_with_its_recorded_tools(tmp_path, worker_env):
    home = tmp_path / "home"
    home.mkdir()
    tool_file = tmp_path / "tools.py"
    tool_file.write_text("from stratagem.tools import tool\n\n\n@tool\ndef own_tool() -> str:\n    return 'ok'\n")
    worker = BackgroundWorker(home, "q", tmp_path / "ws")
    _write_state(worker, 2**22 + 12345, [str(tool_file), str(tmp_path / "deleted.py"), B_TOOLS])  # no such pid
    started = None
    try:
        done = worker.ensure([])
        assert done is not None and done.startswith("started a background worker")
        state = json.loads(worker.state_file.read_text())
        started = state["pid"]
        assert state["tools"] == sorted([str(tool_file), B_TOOLS])  # a deleted tool file is dropped
    finally:
        _kill(started)


def _quote_module(folder: Path) -> str:
    folder.mkdir()
    module = folder / "tools.py"
    module.write_text("from stratagem.tools import tool\n\n\n@tool\ndef get_quote(item: str) -> int:\n    return 1\n")
    return str(module)


@pytest.mark.system
def test_tools_that_clash_are_refused_before_the_worker_is_touched(tmp_path, worker_env):
    """Two plan folders whose tools share a name: started with both, the worker died at once. The
    refusal names both modules, and the running worker and worker.json stay as they were."""
    home = tmp_path / "home"
    home.mkdir()
    first, second = _quote_module(tmp_path / "one"), _quote_module(tmp_path / "two")
    worker = BackgroundWorker(home, "q", tmp_path / "ws")
    fake = _fake_worker()
    try:
        _write_state(worker, fake.pid, [first])
        before = worker.state_file.read_text()
        with pytest.raises(ConfigError, match=rf"two tools are named 'get_quote' \({first} and {second}\)"):
            worker.ensure([second])
        assert fake.poll() is None and worker.state_file.read_text() == before
        # A recorded module that no longer loads (edited since; the machine restarted): named as
        # such, not as a clash, and no worker is started to die of it.
        _kill(fake.pid)
        broken = tmp_path / "three" / "tools.py"
        broken.parent.mkdir()
        broken.write_text("this is not python")
        _write_state(worker, fake.pid, [str(broken)])
        with pytest.raises(ConfigError, match="cannot load the tools its runs use: tool module .* failed to import"):
            worker.ensure([], models=False)
        assert json.loads(worker.state_file.read_text())["pid"] == fake.pid
    finally:
        _kill(fake.pid)


@pytest.mark.system
def test_how_the_worker_ended_is_read_from_its_own_log(tmp_path, worker_env):
    home = tmp_path / "home"
    home.mkdir()
    worker = BackgroundWorker(home, "q", tmp_path / "ws")
    worker.log_file.write_text("error: an earlier worker's line\n")
    offset = worker.log_file.stat().st_size
    fake = _fake_worker()
    try:
        _write_state(worker, fake.pid, [], log_offset=offset)  # type: ignore[arg-type]
        assert worker.exited() is None  # it runs
        with worker.log_file.open("a") as log:
            log.write("worker on 127.0.0.1:1, namespace default\nerror: cannot start the metrics exporter: taken\n")
        _kill(fake.pid)
        ended = worker.exited()
        assert ended is not None and not ended.stopped
        assert ended.describe() == (
            f"this home's background worker (pid {fake.pid}) exited: error: cannot start the metrics exporter: taken"
        )
        # Killed without a word: its own lines hold no error, and an earlier worker's are not its.
        worker.log_file.write_text("error: an earlier worker's line\nworker on 127.0.0.1:1\n")
        ended = worker.exited()
        assert ended is not None and ended.describe().endswith(
            "exited without an error in its log (killed, or the machine restarted)"
        )
    finally:
        _kill(fake.pid)


@pytest.mark.system
def test_a_worker_stopped_by_down_is_not_reported_as_exited(tmp_path, worker_env):
    home = tmp_path / "home"
    home.mkdir()
    worker = BackgroundWorker(home, "q", tmp_path / "ws")
    fake = _fake_worker()
    try:
        _write_state(worker, fake.pid, [A_TOOLS])
        assert worker.stop() == fake.pid
        ended = worker.exited()
        assert ended is not None and ended.stopped and "was stopped (stratagem down)" in ended.describe()
        assert worker.recorded_tools() == [A_TOOLS]  # what its runs need is kept
    finally:
        _kill(fake.pid)


@pytest.mark.system
def test_scripted_folders_grow_like_the_tools(tmp_path, worker_env, monkeypatch):
    """The folders of the scripted files `run` named are passed to the worker (STRATAGEM_SCRIPTED_DIRS)
    and kept; a folder already allowed (or inside one) needs no restart."""
    # What is checked is the environment the worker is started with. A real worker, pointed at no
    # server, may be gone before its /proc environ is read on a loaded machine (twice in CI dry
    # runs); the interpreter the worker is started by is replaced with one that writes its
    # environment down and waits, so what it was given is read whenever the test gets to it.
    seen = tmp_path / "worker.env"
    interpreter = tmp_path / "python"
    interpreter.write_text(f"#!/bin/sh\nenv -0 > {seen}.part && mv {seen}.part {seen}\nexec sleep 60\n")
    interpreter.chmod(0o755)
    monkeypatch.setenv("TEMPORAL_ADDRESS", "127.0.0.1:1")
    home = tmp_path / "home"
    home.mkdir()
    worker = BackgroundWorker(home, "q", tmp_path / "ws")
    examples = (tmp_path / "examples").resolve()
    fake = _fake_worker()
    monkeypatch.setattr(sys, "executable", str(interpreter))  # after the stand-in for the running worker
    started = None
    try:
        _write_state(worker, fake.pid, [A_TOOLS], scripted_dirs=[str(examples)], address=os.environ["TEMPORAL_ADDRESS"])  # type: ignore[arg-type]
        assert worker.ensure([A_TOOLS], scripted_dirs=[examples / "vendor_onboarding"]) is None
        done = worker.ensure([A_TOOLS], scripted_dirs=[tmp_path / "elsewhere"])
        assert done is not None and done.startswith("restarted (new scripted model folders)")
        state = json.loads(worker.state_file.read_text())
        started = state["pid"]
        assert state["scripted_dirs"] == sorted([str(examples), str((tmp_path / "elsewhere").resolve())])
        deadline = time.monotonic() + 30
        while not seen.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        environ = seen.read_bytes().split(b"\0")
        assert f"STRATAGEM_SCRIPTED_DIRS={os.pathsep.join(state['scripted_dirs'])}".encode() in environ
    finally:
        _kill(fake.pid)
        _kill(started)


@pytest.mark.unit
def test_wait_starts_the_server_only_where_this_home_last_served(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    assert not EmbeddedServer("127.0.0.1:7300", home).served_here()  # never served
    (home / "server.address").write_text("127.0.0.1:7300")
    assert EmbeddedServer("localhost:7300", home).served_here()
    assert not EmbeddedServer("127.0.0.1:7301", home).served_here()
    assert not EmbeddedServer("temporal.example.com:7300", home).served_here()


# ---------------------------------------------------------------------------- a run nobody serves


@pytest.mark.system
async def test_a_run_without_a_worker_is_reported_as_unresponsive(dev_env):
    draft = PlanDraft.model_validate(SIDE_EFFECT)
    run = await start_run(
        dev_env.client,
        RunInput(plan=draft, author=Author(kind=AuthorKind.human, name="ops"), options=RunOptions()),
        task_queue=f"nobody-{uuid.uuid4().hex[:8]}",
    )
    try:
        counting = QueryCount()
        unserved = get_run(counting.client(dev_env.client), run.id, rpc_timeout=timedelta(seconds=2))
        with pytest.raises(
            RunUnresponsiveError,
            match=rf"run {run.id} did not take the decision in time: no worker is running its workflow; start one with `stratagem worker` \(it may still take effect once one does; check the run before deciding again\)",
        ):
            await unserved.approve(ApproveInput(by="ops", revision=1))
        with pytest.raises(
            RunUnresponsiveError, match=rf"run {run.id} did not answer the status query in time: no worker"
        ):
            await unserved.status()
        assert counting.sent == 1  # a run still going is not asked twice: nobody serves it
        with pytest.raises(RunUnresponsiveError, match="did not answer the catalog query in time"):
            await unserved.catalog()  # not None, which says an old worker that has no such query
    finally:
        await run.handle.terminate(reason="test finished")


@pytest.mark.system
async def test_a_query_that_gets_no_answer_from_an_ended_run_is_asked_again(dev_env, tmp_path):
    # A query that reaches a worker just as the run ends can be dropped with the run's cached
    # state (the console once hung on one). Here the first query reaches nobody, as a dropped one
    # does; the run has ended, so it is asked again and answered by the worker that comes up.
    queue = f"ending-{uuid.uuid4().hex[:8]}"
    registry = ToolRegistry.from_modules([FIXTURE_TOOLS])

    def worker():
        return build_worker(
            dev_env.client,
            task_queue=queue,
            registry=registry,
            workspace=tmp_path / "ws",
            store=FileStore(tmp_path / "s"),
        )

    async with worker():
        run = await start_run(
            dev_env.client,
            RunInput(plan=PlanDraft.model_validate(SIDE_EFFECT), author=Author(kind=AuthorKind.human, name="ops")),
            task_queue=queue,
        )
        while not awaiting(await run.status()):
            await asyncio.sleep(0.05)
        await run.approve(ApproveInput(by="ops", revision=1))
        assert (await run.result()).status is Phase.succeeded
    counting = QueryCount(hold_second=True)
    ended = get_run(counting.client(dev_env.client), run.id, rpc_timeout=timedelta(seconds=2))
    asking = asyncio.create_task(ended.status())
    await asyncio.wait_for(counting.first_failed.wait(), 30)
    async with worker():
        counting.go.set()  # the second attempt goes out once a worker polls the run's queue
        status = await asking
    assert status.phase is Phase.succeeded and status.run_id == run.id
    assert counting.sent == 2


class QueryCount(Interceptor):
    """A client interceptor counting the queries sent; with `hold_second`, the second waits for `go`."""

    def __init__(self, hold_second: bool = False):
        self.sent = 0
        self.first_failed = asyncio.Event()
        self.go = asyncio.Event()
        if not hold_second:
            self.go.set()

    def client(self, base: Client) -> Client:
        return Client(
            base.service_client, namespace=base.namespace, data_converter=base.data_converter, interceptors=[self]
        )

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        count = self

        class Counting(OutboundInterceptor):
            async def query_workflow(self, input: QueryWorkflowInput) -> Any:
                count.sent += 1
                if count.sent > 1:
                    await count.go.wait()
                try:
                    return await super().query_workflow(input)
                except Exception:
                    count.first_failed.set()
                    raise

        return Counting(next)


@pytest.mark.system
async def test_connect_can_use_a_quiet_runtime(dev_env):
    assert quiet_runtime() is quiet_runtime()
    address = dev_env.client.service_client.config.target_host
    client = await connect(Settings(address=address), quiet=True)
    assert client.service_client.config.runtime is quiet_runtime()


# ---------------------------------------------------------------------------- the CLI


@pytest.mark.unit
def test_a_lost_connection_is_one_line(monkeypatch, capsys):
    from stratagem.cli import following, main
    from stratagem.cli.session import connection_lost

    monkeypatch.setenv("TEMPORAL_ADDRESS", "127.0.0.1:7999")

    async def lost(args):
        raise RPCError("tcp connect error", RPCStatusCode.UNAVAILABLE, b"")

    async def refused(args):
        raise RPCError("namespace ops is not found", RPCStatusCode.NOT_FOUND, b"")

    monkeypatch.setattr(following, "cmd_wait", lost)
    assert main(["wait", "report-oct"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "error: lost the connection to Temporal at 127.0.0.1:7999; runs are safe in the server's database: "
        "start it again (stratagem server) and follow with stratagem wait report-oct\n"
    )
    monkeypatch.setattr(following, "cmd_wait", refused)
    assert main(["wait", "report-oct"]) == 2
    assert capsys.readouterr().err == "error: Temporal refused the request: namespace ops is not found\n"

    wrapped = RuntimeError("Worker failed")
    wrapped.__cause__ = RPCError("tcp connect error", RPCStatusCode.UNKNOWN, b"")
    assert connection_lost(wrapped)
    assert not connection_lost(RuntimeError("something else"))


# ---------------------------------------------------------------------------- the phase in the memo


async def _memo_phase(run) -> str | None:
    return (await (await run.handle.describe()).memo()).get("phase")


@pytest.mark.system
async def test_the_memo_tells_how_a_run_ended(dev_harness):
    succeeded = await dev_harness.start(SIDE_EFFECT, auto_approve=True)
    await succeeded.result()
    assert await _memo_phase(succeeded) == "succeeded"

    rejected = await dev_harness.start(SIDE_EFFECT)
    await dev_harness.wait_for(rejected, awaiting)
    assert await _memo_phase(rejected) == "awaiting_approval"
    await rejected.reject(RejectInput(by="carol", reason="no"))
    await rejected.result()
    assert await _memo_phase(rejected) == "rejected"

    failed = await dev_harness.start({"goal": "fail", "steps": [step("b", "broken", reason="down")]}, auto_approve=True)
    with pytest.raises(WorkflowFailureError):
        await failed.result()
    assert await _memo_phase(failed) == "failed"

    cancelled = await dev_harness.start(SIDE_EFFECT)
    await dev_harness.wait_for(cancelled, awaiting)
    await cancelled.cancel()
    with pytest.raises(WorkflowFailureError):
        await cancelled.result()
    assert await _memo_phase(cancelled) == "cancelled"
    # The goal stays beside the phase.
    assert (await (await cancelled.handle.describe()).memo())["goal"] == SIDE_EFFECT["goal"]


@pytest.mark.system
async def test_the_memo_survives_continue_as_new(dev_harness):
    steps = [step(f"s{i}", "add", a=i, b=1) for i in range(10)]
    run = await dev_harness.start({"goal": "count", "steps": steps}, auto_approve=True, continue_as_new_after_events=30)
    await run.result()
    assert (await run.status()).continued >= 1
    memo = await (await run.handle.describe()).memo()
    assert memo == {"goal": "count", "phase": "succeeded"}


@pytest.mark.system
def test_down_stops_this_homes_server_and_worker_and_keeps_the_runs(tmp_path, worker_env, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    port = free_port_pair()
    server = EmbeddedServer(f"127.0.0.1:{port}", home)
    worker = BackgroundWorker(home, "q", tmp_path / "ws")
    fake = _fake_worker()
    try:
        server_pid = server.start_detached()
        _write_state(worker, fake.pid, [])
        env = {
            **os.environ,
            "STRATAGEM_HOME": str(home),
            "TEMPORAL_ADDRESS": f"127.0.0.1:{port}",
            "TEMPORAL_TASK_QUEUE": "q",
        }
        done = subprocess.run(
            [sys.executable, "-m", "stratagem.cli", "down", "--json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=90,
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == {"home": str(home), "worker_pid": fake.pid, "server_pid": server_pid}
        assert fake.wait(timeout=20) is not None and not is_listening(f"127.0.0.1:{port}")
        assert not (home / "server.pid").exists() and (home / "temporal.db").exists()
        again = subprocess.run(
            [sys.executable, "-m", "stratagem.cli", "down"], env=env, capture_output=True, text=True, timeout=60
        )
        assert again.returncode == 0 and "nothing of" in again.stdout
    finally:
        _kill(fake.pid)
        running = server.running_pid()
        if running is not None:
            _kill(running)


@pytest.mark.system
def test_a_killed_foreground_server_takes_its_temporal_child_along(tmp_path):
    home = tmp_path / "home"
    port = free_port_pair()
    env = {**os.environ, "STRATAGEM_HOME": str(home), "TEMPORAL_ADDRESS": f"127.0.0.1:{port}"}
    process = subprocess.Popen(
        [sys.executable, "-m", "stratagem.cli", "server"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        for _ in range(300):
            if is_listening(f"127.0.0.1:{port}"):
                break
            time.sleep(0.1)
        assert is_listening(f"127.0.0.1:{port}")
        process.terminate()  # what `kill` sends
        assert process.wait(timeout=30) != 0
        for _ in range(100):
            if not is_listening(f"127.0.0.1:{port}"):
                break
            time.sleep(0.1)
        assert not is_listening(f"127.0.0.1:{port}")  # the temporal child is gone too
    finally:
        if process.poll() is None:
            process.kill()
        running = EmbeddedServer(f"127.0.0.1:{port}", home).running_pid()
        if running is not None:
            _kill(running)


@pytest.mark.system
async def test_a_foreground_server_names_its_home_and_other_homes_keep_off_it(tmp_path):
    """`stratagem server` names its home in its namespace's data as soon as it serves, so that
    another home's command pointed at it is refused before this home's first command marks it."""
    home = tmp_path / "home"
    port = free_port_pair()
    address = f"127.0.0.1:{port}"
    env = {**os.environ, "STRATAGEM_HOME": str(home), "TEMPORAL_ADDRESS": address}
    process = subprocess.Popen(
        [sys.executable, "-m", "stratagem.cli", "server"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 60
        named = None
        while named is None and time.monotonic() < deadline:
            try:
                named = await marked_home(await Client.connect(address), "default")
            except RuntimeError:
                pass
            await asyncio.sleep(0.2)
        assert named == home.resolve()
        other = {**env, "STRATAGEM_HOME": str(tmp_path / "other-home")}
        refused = subprocess.run(
            [sys.executable, "-m", "stratagem.cli", "list"], env=other, capture_output=True, text=True, timeout=60
        )
        assert refused.returncode == 2 and refused.stderr.startswith(
            f"error: the Temporal server at {address} is the embedded server of another STRATAGEM_HOME ({home.resolve()})"
        )
    finally:
        process.terminate()
        process.wait(timeout=30)
        running = EmbeddedServer(address, home).running_pid()
        if running is not None:
            _kill(running)


@pytest.mark.system
async def test_a_burst_of_run_starts_asks_the_namespace_for_its_status_attribute_once(dev_env):
    """Every run start asks whether the namespace keeps run statuses (a search attribute). The
    answer is remembered, but starts that arrived while it was being asked each asked again: a
    burst of 100 starts sent 100 pairs of namespace RPCs. They now wait for the one question in
    flight, and a caller that gives up does not cancel it for the others."""
    client = await Client.connect(dev_env.client.service_client.config.target_host, namespace=dev_env.client.namespace)
    service = client.operator_service
    asked: list[Any] = []
    real = service.list_search_attributes

    async def counting(request, **kwargs):  # type: ignore[no-untyped-def]
        asked.append(request)
        await asyncio.sleep(0.05)  # a slow answer, so the burst arrives while it is asked
        return await real(request, **kwargs)

    service.list_search_attributes = counting  # type: ignore[method-assign]
    first = asyncio.create_task(has_status_attribute(client))
    await asyncio.sleep(0.01)
    others = [asyncio.create_task(has_status_attribute(client)) for _ in range(20)]
    first.cancel()
    assert await asyncio.gather(*others) == [True] * 20
    assert len(asked) == 1
    assert await has_status_attribute(client) and len(asked) == 1  # remembered
