"""A home's embedded setup as a new user meets it: the `stratagem` command run as a real process
from a folder outside the checkout, each home with a fresh STRATAGEM_HOME, its own embedded
server on its own port and its own background worker.

- Every example runs from another folder (issue #36, item 1): the background worker reads the
  scripted model files the command named (models.yaml beside the plan, --planner scripted:FILE);
  a worker started by hand keeps to STRATAGEM_SCRIPTED_DIRS.
- Two plan folders whose tools share a name are refused up front, and the running worker keeps
  serving; a background worker that exits is reported, with why, by `status` and `wait` (item 2).
- A home refuses another home's server, on any port (item 3).
- `wait` after `stratagem down` starts the server and the worker again, as `run` does (item 4).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.cli import ROOT, acli, one_line_error, write_plan
from support.ports import free_port_pair
from temporalio.client import Client

from stratagem.client import get_run
from stratagem.domain.run_types import DecisionKind
from stratagem.io.payloads import stratagem_data_converter
from stratagem.server import BackgroundWorker, EmbeddedServer
from stratagem.server.processes import alive

pytestmark = pytest.mark.system

EXAMPLES = ROOT / "examples"
SHIPPING_GOAL = "Ship order SO-1042 to Bergblick Hotels in Graz by 14 November 2025"


def _fresh_environment() -> dict[str, str]:
    """The test process's environment without what the suite sets for its own workers: a new
    user's shell has no STRATAGEM_SCRIPTED_DIRS, workspace, store or Temporal address."""
    dropped = ("STRATAGEM_SCRIPTED_DIRS", "STRATAGEM_WORKSPACE", "STRATAGEM_STORE", "TEMPORAL_TASK_QUEUE")
    return {k: v for k, v in os.environ.items() if k not in dropped and not k.startswith("TEMPORAL_ADDRESS")}


class Home:
    """A STRATAGEM_HOME, the port its embedded server is to listen on, and the folder (outside the
    checkout) its commands run from."""

    def __init__(self, root: Path, name: str):
        self.path = root / name
        self.port = free_port_pair()
        self.address = f"127.0.0.1:{self.port}"
        self.cwd = root / f"{name}-shell"
        self.cwd.mkdir(parents=True)
        self.env = {
            **_fresh_environment(),
            "STRATAGEM_HOME": str(self.path),
            "TEMPORAL_ADDRESS": self.address,
            "CLI_CWD": str(self.cwd),
        }

    async def cli(self, *args: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess[str]:
        return await acli(*args, env={**self.env, **env}, timeout=timeout)

    def worker_state(self) -> dict[str, Any]:
        return json.loads((self.path / "worker.json").read_text())

    def worker_pid(self) -> int:
        return int(self.worker_state()["pid"])

    async def client(self, seconds: float = 60) -> Client:
        """A client of the home's server, once it serves (a command may be starting it)."""
        deadline = time.monotonic() + seconds
        while True:
            try:
                return await Client.connect(self.address, data_converter=stratagem_data_converter)
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.25)

    async def waiting_on(self, run_id: str, kind: DecisionKind, step: str | None = None, seconds: float = 60) -> None:
        """Until the run waits for `kind` (of `step`): what a person sees before deciding."""
        run = get_run(await self.client(), run_id)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            status = await run.status()
            if any(p.kind is kind and (step is None or p.step_id == step) for p in status.pending):
                return
            assert not status.phase.finished, status
            await asyncio.sleep(0.3)
        raise AssertionError(f"run {run_id} never waited for {kind.value} {step or ''}")

    def stop(self) -> None:
        BackgroundWorker(self.path, "stratagem", self.cwd).stop()
        EmbeddedServer(self.address, self.path).stop()


@pytest.fixture
def homes(tmp_path):
    made: list[Home] = []

    def make(name: str) -> Home:
        made.append(Home(tmp_path, name))
        return made[-1]

    yield make
    for home in made:
        home.stop()


def _answer(example: str, step: str) -> str:
    return json.dumps(yaml.safe_load((EXAMPLES / example / "answers.yaml").read_text())[step])


def _succeeded(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    assert "Traceback" not in done.stderr


# ---------------------------------------------------------------------------- item 1 and item 4


async def test_every_example_runs_from_another_folder_and_wait_brings_the_home_back(homes):
    """As in the issue: `cd /tmp/x && stratagem run --plan .../examples/vendor_onboarding/plan.yaml
    --auto-approve` on a fresh home stopped with "scripted model file '.../models.yaml' is outside
    the folders scripted files are read from (/tmp/x)". Each example runs here from a folder
    outside the checkout, to its end, on one server; then `stratagem down`, and `wait` starts the
    server and the worker again, as `run` does."""
    home = homes("home")
    assert not str(home.cwd).startswith(str(ROOT))

    vendor = await home.cli(
        "run", "--plan", str(EXAMPLES / "vendor_onboarding" / "plan.yaml"),
        "--inputs", str(EXAMPLES / "vendor_onboarding" / "inputs.yaml"), "--auto-approve",
    )  # fmt: skip
    _succeeded(vendor)
    assert "started the embedded Temporal server" in vendor.stdout
    assert "succeeded (revision 1" in vendor.stdout
    assert home.worker_state()["scripted_dirs"] == [str(EXAMPLES / "vendor_onboarding")]

    # A scripted file named on the command line: its folder is read too (the worker restarts for it).
    shipping = await home.cli(
        "run", SHIPPING_GOAL,
        "--planner", f"scripted:{EXAMPLES / 'order_shipping' / 'models.yaml'}",
        "--tools", str(EXAMPLES / "order_shipping" / "tools.py"),
        "--auto-approve",
    )  # fmt: skip
    _succeeded(shipping)
    assert "succeeded (revision 2, 1 replan)" in shipping.stdout
    assert "restarted (new scripted model folders) a background worker" in shipping.stdout
    assert set(home.worker_state()["scripted_dirs"]) == {
        str(EXAMPLES / "vendor_onboarding"),
        str(EXAMPLES / "order_shipping"),
    }

    # The examples with people in them: started detached, answered as answers.yaml says.
    started = {}
    for name, extra in (
        ("employee_onboarding", []),
        ("expense_claim", ["--on-failure", "repair"]),
        ("monthly_report", ["--input", "month=2025-10"]),  # the month its data holds
    ):
        done = await home.cli(
            "run", "--plan", str(EXAMPLES / name / "plan.yaml"), "--auto-approve", "--detach", "--id", name, *extra
        )
        _succeeded(done)
        started[name] = done
    assert "scripted responses in" in started["monthly_report"].stdout  # past the model check

    await home.waiting_on("employee_onboarding", DecisionKind.human_answer, "buddy")
    answered = await home.cli(
        "answer", "employee_onboarding", "buddy", _answer("employee_onboarding", "buddy"), "--json-value"
    )
    _succeeded(answered)

    await home.waiting_on("expense_claim", DecisionKind.human_answer, "finance_review")
    tries = yaml.safe_load((EXAMPLES / "expense_claim" / "answers.yaml").read_text())["finance_review"]["tries"]
    refused = await home.cli("answer", "expense_claim", "finance_review", json.dumps(tries[0]), "--json-value")
    one_line_error(refused, "refused the answer")
    _succeeded(await home.cli("answer", "expense_claim", "finance_review", json.dumps(tries[1]), "--json-value"))
    await home.waiting_on("expense_claim", DecisionKind.repair)
    retry = yaml.safe_load((EXAMPLES / "expense_claim" / "repairs.yaml").read_text())["post"]["retry"]["args"]
    _succeeded(await home.cli("retry", "expense_claim", "post", "--args", json.dumps(retry)))

    for name in ("employee_onboarding", "expense_claim"):
        done = await home.cli("wait", name)
        _succeeded(done)
        assert "succeeded" in done.stdout

    # Stop everything while the report waits for the finance lead.
    await home.waiting_on("monthly_report", DecisionKind.human_answer, "finance_review")
    _succeeded(await home.cli("down"))
    assert not (home.path / "server.pid").exists()

    # `wait` starts the server and the worker again where they were, and follows the run.
    waiting = subprocess.Popen(
        [sys.executable, "-m", "stratagem.cli", "wait", "monthly_report"],
        cwd=home.cwd,
        env=home.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        await home.waiting_on("monthly_report", DecisionKind.human_answer, "finance_review", seconds=90)
        _succeeded(
            await home.cli(
                "answer",
                "monthly_report",
                "finance_review",
                _answer("monthly_report", "finance_review"),
                "--json-value",
            )
        )
        out, err = await asyncio.to_thread(waiting.communicate, timeout=120)
    finally:
        if waiting.poll() is None:
            waiting.kill()
    assert waiting.returncode == 0, (out[-3000:], err[-3000:])
    assert "started the embedded Temporal server" in out
    assert "started a background worker" in out
    assert "succeeded" in out


async def test_a_worker_started_by_hand_keeps_to_its_scripted_folders(dev_env, homes, tmp_path):
    """On a server no home started (docker compose, here the suite's dev server) named by
    TEMPORAL_ADDRESS, `run --detach` works as before and says what a worker of one's own needs:
    a worker started by hand reads scripted files only where STRATAGEM_SCRIPTED_DIRS says."""
    home = homes("compose")
    queue = f"compose-{os.getpid()}-{time.monotonic_ns()}"
    env = {"TEMPORAL_ADDRESS": dev_env.client.service_client.config.target_host, "TEMPORAL_TASK_QUEUE": queue}
    plan = str(EXAMPLES / "vendor_onboarding" / "plan.yaml")
    inputs = str(EXAMPLES / "vendor_onboarding" / "inputs.yaml")
    tools = str(EXAMPLES / "vendor_onboarding" / "tools.py")

    def worker(**extra: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "stratagem.cli", "worker", "--tools", tools],
            cwd=home.cwd,
            env={**home.env, **env, **extra},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
        )

    strict = await home.cli(
        "run", "--plan", plan, "--inputs", inputs, "--auto-approve", "--detach", "--id", "strict", **env
    )
    _succeeded(strict)
    hint = f"STRATAGEM_SCRIPTED_DIRS={EXAMPLES / 'vendor_onboarding'} stratagem worker --tools"
    assert hint in strict.stdout
    assert not (home.path / "worker.json").exists()  # no background worker on a server this home did not start

    by_hand = worker()
    try:
        failed = await home.cli("wait", "strict", **env)
    finally:
        by_hand.terminate()
        by_hand.wait(timeout=30)
    assert failed.returncode == 1, failed
    assert "is outside the folders scripted files are read from" in failed.stdout + failed.stderr

    told = worker(STRATAGEM_SCRIPTED_DIRS=str(EXAMPLES / "vendor_onboarding"))
    try:
        _succeeded(
            await home.cli(
                "run", "--plan", plan, "--inputs", inputs, "--auto-approve", "--detach", "--id", "told", **env
            )
        )
        done = await home.cli("wait", "told", **env)
    finally:
        told.terminate()
        told.wait(timeout=30)
    _succeeded(done)


# ---------------------------------------------------------------------------- item 2

QUOTE_TOOLS = '''
from stratagem.tools import tool


@tool
def get_quote(item: str) -> dict:
    """A price for an item."""
    return {{"item": item, "price": {price}}}
'''


def _quote_folder(root: Path, name: str, price: int) -> str:
    folder = root / name
    folder.mkdir()
    (folder / "tools.py").write_text(QUOTE_TOOLS.format(price=price))
    plan = {
        "goal": f"a quote from {name}",
        "steps": [{"id": "quote", "title": "quote", "tool": "get_quote", "args": {"item": "linen"}}],
    }
    return write_plan(folder / "plan.yaml", plan)


async def test_tools_that_clash_are_refused_and_a_worker_that_exits_is_reported(homes, tmp_path):
    """As in the issue: a second plan folder whose tools.py also defines get_quote made `run` print
    "restarted (new tools) a background worker" and exit 0; the worker died at once and every
    run of the home waited without a word. Now the clash is one line, naming both modules, and
    the worker goes on; and when the worker does exit (here: a metrics port that is taken),
    `status` and `wait` say so, and why, from its log."""
    home = homes("home")
    first = _quote_folder(tmp_path, "carrier_a", 10)
    second = _quote_folder(tmp_path, "carrier_b", 20)
    _succeeded(await home.cli("run", "--plan", first, "--auto-approve"))
    pid = home.worker_pid()

    clash = await home.cli("run", "--plan", second, "--auto-approve", "--detach")
    one_line_error(clash, "two tools are named 'get_quote'")
    assert str(Path(first).with_name("tools.py")) in clash.stderr
    assert str(Path(second).with_name("tools.py")) in clash.stderr
    assert clash.stderr.count("\n") == 1
    assert home.worker_pid() == pid and alive(pid, "stratagem.cli worker")
    assert home.worker_state()["tools"] == [str(Path(first).with_name("tools.py"))]
    again = await home.cli("run", "--plan", first, "--auto-approve")  # the same worker serves it
    _succeeded(again)
    assert home.worker_pid() == pid

    # A worker that dies at its start: the metrics port it is told to serve on is taken.
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    metrics = {
        "OTEL_METRICS_EXPORTER": "prometheus",
        "OTEL_EXPORTER_PROMETHEUS_HOST": "127.0.0.1",
        "OTEL_EXPORTER_PROMETHEUS_PORT": str(taken.getsockname()[1]),
    }
    try:
        late = await home.cli("run", "--plan", first, "--auto-approve", "--detach", "--id", "late", **metrics)
        _succeeded(late)
        dead = home.worker_pid()
        deadline = time.monotonic() + 30
        while alive(dead, "stratagem.cli worker") and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        assert not alive(dead, "stratagem.cli worker")

        status = await home.cli("status", "late")
        _succeeded(status)
        assert (
            f"this home's background worker (pid {dead}) exited: error: cannot start the metrics exporter"
            in status.stdout
        )
        assert "`stratagem wait late` starts it again" in status.stdout

        # `wait` from the same shell starts it again, it dies again: `wait` says so instead of hanging.
        waiting = subprocess.Popen(
            [sys.executable, "-m", "stratagem.cli", "wait", "late"],
            cwd=home.cwd,
            env={**home.env, **metrics},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            lines = await asyncio.to_thread(_read_until, waiting, "exited: error: cannot start the metrics exporter")
        finally:
            waiting.send_signal(signal.SIGINT)
            waiting.wait(timeout=30)
        assert any(line.startswith("warning: this home's background worker") for line in lines), lines
    finally:
        taken.close()

    # Fixed (the shell no longer asks for the taken port): `wait` brings the worker back and the run ends.
    done = await home.cli("wait", "late")
    _succeeded(done)
    assert "started a background worker" in done.stdout
    assert "succeeded" in done.stdout


def _read_until(process: subprocess.Popen[str], text: str, seconds: float = 60) -> list[str]:
    assert process.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        lines.append(line.rstrip("\n"))
        if text in line:
            return lines
    raise AssertionError(f"never printed {text!r}: {lines}")


# ---------------------------------------------------------------------------- item 3


async def test_a_home_refuses_the_server_of_another_home_on_any_port(homes, tmp_path):
    """As in the issue: with TEMPORAL_ADDRESS at the port another home's embedded server owns,
    `run` started a worker with this home's tools on that server, and runs failed with "unknown
    tool". Two homes, each with its own server: the second home pointed at the first's port is
    refused in one line, starts nothing there, and goes on using its own."""
    first, second = homes("first"), homes("second")
    a_plan = _quote_folder(tmp_path, "first_tools", 10)
    b_plan = _quote_folder(tmp_path, "second_tools", 20)
    _succeeded(await first.cli("run", "--plan", a_plan, "--auto-approve"))
    _succeeded(await second.cli("run", "--plan", b_plan, "--auto-approve"))
    first_worker, second_worker = first.worker_state(), second.worker_state()
    client = await first.client()
    runs_before = (await client.count_workflows()).count

    for args in (("run", "--plan", b_plan, "--auto-approve"), ("list",), ("status", "anything")):
        refused = await second.cli(*args, TEMPORAL_ADDRESS=first.address)
        one_line_error(
            refused,
            f"the Temporal server at {first.address} is the embedded server of another STRATAGEM_HOME ({first.path.resolve()})",
        )
        assert f"set STRATAGEM_HOME={first.path.resolve()}" in refused.stderr
        assert "set TEMPORAL_ADDRESS=localhost:PORT with a free port" in refused.stderr

    assert (await client.count_workflows()).count == runs_before  # no run of the second home there
    assert first.worker_state() == first_worker  # the first home's worker serves its own tools only
    assert second.worker_state() == second_worker  # and the second's was not moved to the first's server

    # Told (that home, named as STRATAGEM_HOME), the same server is used; the second home still has its own.
    _succeeded(
        await second.cli(
            "run", "--plan", a_plan, "--auto-approve", STRATAGEM_HOME=str(first.path), TEMPORAL_ADDRESS=first.address
        )
    )
    _succeeded(await second.cli("run", "--plan", b_plan, "--auto-approve"))
