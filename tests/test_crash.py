"""Nothing is lost when worker processes or the embedded server die with SIGKILL mid-run.

Real processes, real servers: workers are `python worker.py` processes killed with SIGKILL at
seeded random moments while a dozen runs execute parallel slow steps with side effects; the
embedded server is killed while runs wait for a plan approval, run a step and wait for a person.
Reconcilable payments are made while workers and the embedded server are both killed at random moments.
Set CRASH_SEED to replay a particular kill schedule; every assertion message names the seed.
"""

from __future__ import annotations

import asyncio
import csv
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
from conftest import harness_for
from support import CRASH_TOOLS, PAGE_TOOLS, PAYMENT_TOOLS
from support.cli import cli, one_line_error, write_plan
from support.page_tools import fetches
from support.payment_tools import payments
from support.ports import free_port_pair, wait_listening
from support.wire_servers import FakeOpenAI, Reply
from temporalio.api.enums.v1 import DescribeTaskQueueMode, TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client, WorkflowFailureError
from temporalio.worker import Replayer

from stratagem.client import RunHandle, start_run
from stratagem.domain.decisions import kinds
from stratagem.domain.ledger import EventKind, StepStatus
from stratagem.domain.plan import Author, AuthorKind, PlanDraft
from stratagem.domain.run_types import (
    ApproveInput,
    Phase,
    RepairAction,
    RepairInput,
    ResolveInput,
    RunInput,
    RunOptions,
)
from stratagem.io.payloads import stratagem_data_converter
from stratagem.server.embedded import EmbeddedServer
from stratagem.temporal.plugin import StratagemPlugin
from stratagem.tools import ToolRegistry
from stratagem.workflows import StratagemRun

pytestmark = pytest.mark.system

ROOT = Path(__file__).resolve().parent.parent
SEED = int(os.environ.get("CRASH_SEED", "20251121"))


def work(id: str, label: str, seconds: float, depends_on: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "id": id,
        "title": id.replace("_", " "),
        "tool": "crash_work",
        "args": {"label": label, "seconds": round(seconds, 2)},
        "depends_on": depends_on or [],
        **extra,
    }


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def effect_rows(workspace: Path, run_id: str) -> list[dict[str, str]]:
    path = workspace / "effects" / f"{run_id}.csv"
    if not path.exists():
        return []
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def kill(process: subprocess.Popen[Any]) -> None:
    if process.poll() is None:
        try:
            os.kill(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def kill_if_ours(pid: int, marker: str) -> None:
    """SIGKILL `pid` if it is still a process of this test: its command line or environment
    names `marker` (a folder of the test's own). A pid that died may have been reused since."""
    try:
        proc = Path(f"/proc/{pid}")
        seen = (proc / "cmdline").read_bytes() + (proc / "environ").read_bytes()
    except OSError:
        return
    if marker.encode() in seen:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


# ------------------------------------------------------------------------------------------------
# 1. Worker processes killed at random moments


RUNS = 12
BRANCHES = 3
KILL_MOMENTS = 4


def branching_plan(index: int, rng: random.Random) -> tuple[PlanDraft, dict[str, str]]:
    """prepare -> BRANCHES x (fetch_k -> check_k) -> publish; every step is slow and has a side
    effect. Returns the plan and every step's expected output."""

    def seconds() -> float:
        return rng.uniform(0.5, 2.0)

    expected = {"prepare": f"r{index}"}
    steps = [work("prepare", f"r{index}", seconds())]
    for k in range(1, BRANCHES + 1):
        steps.append(work(f"fetch_{k}", f"${{prepare}}-f{k}", seconds(), ["prepare"]))
        steps.append(work(f"check_{k}", f"${{fetch_{k}}}-ok", seconds(), [f"fetch_{k}"]))
        expected[f"fetch_{k}"] = f"r{index}-f{k}"
        expected[f"check_{k}"] = f"r{index}-f{k}-ok"
    checks = [f"check_{k}" for k in range(1, BRANCHES + 1)]
    steps.append(work("publish", "|".join(f"${{{c}}}" for c in checks), seconds(), checks))
    expected["publish"] = "|".join(expected[c] for c in checks)
    return PlanDraft.model_validate({"goal": f"crash run {index}", "steps": steps}), expected


class Workers:
    """`python worker.py` processes on one task queue, started and SIGKILLed by the test."""

    def __init__(self, env: dict[str, str], logs: Path, tools: str = CRASH_TOOLS):
        self.env = env
        self.logs = logs
        self.tools = tools
        self.alive: list[subprocess.Popen[bytes]] = []
        self.killed: list[subprocess.Popen[bytes]] = []
        self.started = 0

    def start(self) -> subprocess.Popen[bytes]:
        self.started += 1
        with (self.logs / f"worker-{self.started}.log").open("wb") as log:
            process = subprocess.Popen(
                [sys.executable, "worker.py", "--tools", self.tools],
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        self.alive.append(process)
        return process

    def sigkill(self, process: subprocess.Popen[bytes]) -> None:
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
        self.alive.remove(process)
        self.killed.append(process)

    @property
    def killed_pids(self) -> set[int]:
        return {p.pid for p in self.killed}

    def close(self) -> None:
        for process in self.alive + self.killed:
            kill(process)


async def wait_for_pollers(client: Any, task_queue: str, pids: set[int], seconds: float = 45) -> None:
    """Until a worker of each pid polls the queue for activities (the SDK's identity is pid@host).
    The enhanced description gathers the pollers of every partition of the queue; the legacy one
    only the root partition's."""
    deadline = time.monotonic() + seconds
    seen: set[int] = set()
    while time.monotonic() < deadline:
        activity = TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY
        queue = TaskQueue(name=task_queue)
        legacy = await client.workflow_service.describe_task_queue(
            DescribeTaskQueueRequest(namespace=client.namespace, task_queue=queue, task_queue_type=activity)
        )
        enhanced = await client.workflow_service.describe_task_queue(
            DescribeTaskQueueRequest(
                namespace=client.namespace,
                task_queue=queue,
                task_queue_types=[activity],
                report_pollers=True,
                api_mode=DescribeTaskQueueMode.DESCRIBE_TASK_QUEUE_MODE_ENHANCED,
            )
        )
        pollers = [
            *legacy.pollers,
            *(p for v in enhanced.versions_info.values() for t in v.types_info.values() for p in t.pollers),
        ]
        seen |= {int(p.identity.split("@")[0]) for p in pollers if p.identity.split("@")[0].isdigit()}
        if pids <= seen:
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"workers {sorted(pids - seen)} never polled {task_queue}")


async def test_runs_survive_workers_killed_at_random_moments(dev_env, tmp_path):
    rng = random.Random(SEED)
    why = f"(CRASH_SEED={SEED})"
    client = dev_env.client
    task_queue = f"crash-{uuid.uuid4().hex[:8]}"
    workspace = tmp_path / "ws"
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": client.service_client.config.target_host,
        "TEMPORAL_NAMESPACE": "default",
        "TEMPORAL_TASK_QUEUE": task_queue,
        "STRATAGEM_WORKSPACE": str(workspace),
    }
    plans = [branching_plan(i, rng) for i in range(RUNS)]
    # Seeded kill moments (seconds after the first run starts), 1.2 to 3.2 s apart, while runs are
    # still being started and all of them are in flight; at each, one or two workers die.
    moments = [round(2.0 + 2.2 * k + rng.uniform(0, 1.0), 2) for k in range(KILL_MOMENTS)]
    victims_per_moment = [rng.choice([1, 1, 2]) for _ in moments]
    options = RunOptions(auto_approve=True, step_timeout_seconds=6, step_max_attempts=10, max_parallel=4)

    workers = Workers(env, tmp_path)
    runs: list[RunHandle] = []
    kills: list[tuple[float, int]] = []
    try:
        booting = time.monotonic()
        await wait_for_pollers(client, task_queue, {workers.start().pid for _ in range(3)})
        began = time.monotonic()
        boot = began - booting

        async def start_runs() -> None:
            for index, (plan, _) in enumerate(plans):
                run_input = RunInput(plan=plan, author=Author(kind=AuthorKind.human, name="ops"), options=options)
                runs.append(
                    await start_run(
                        client, run_input, task_queue=task_queue, run_id=f"crash-{SEED}-{index}-{uuid.uuid4().hex[:6]}"
                    )
                )
                await asyncio.sleep(0.5)

        async def chaos() -> None:
            for moment, count in zip(moments, victims_per_moment, strict=False):
                await asyncio.sleep(max(0.0, began + moment - time.monotonic()))
                for victim in rng.sample(workers.alive, min(count, len(workers.alive))):
                    workers.sigkill(victim)
                    kills.append((round(time.monotonic() - began, 2), victim.pid))
                    workers.start()  # a replacement, as a supervisor would start one

        await asyncio.gather(start_runs(), chaos())
        finished: dict[str, float] = {}

        async def outcome(run: RunHandle) -> Any:
            try:
                result: Any = await run.result()
            except WorkflowFailureError as exc:  # a failed run; reported below with the seed
                result = exc
            finished[run.id] = round(time.monotonic() - began, 1)
            return result

        try:
            results = await asyncio.wait_for(asyncio.gather(*(outcome(r) for r in runs)), timeout=50)
        except TimeoutError:
            unfinished = [(r.id, (await r.status()).model_dump(mode="json")) for r in runs if r.id not in finished]
            raise AssertionError(
                f"{why} runs still open 50 s after the last kill: {unfinished}; kills {kills}"
            ) from None
        elapsed = time.monotonic() - began
        for run, result in zip(runs, results, strict=False):
            assert not isinstance(result, BaseException), f"{why} run {run.id} raised {result!r}; kills {kills}"
            assert result.status is Phase.succeeded, (
                f"{why} run {run.id}: {result.status} {result.reason}; kills {kills}"
            )
        ledgers = [await run.ledger() for run in runs]  # queried while healthy workers remain
    finally:
        workers.close()

    log = read_jsonl(workspace / "attempts.jsonl")
    by_step: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for record in log:
        by_step[(record["run_id"], record["step"])].append(record)
    killed = workers.killed_pids
    assert len(killed) >= KILL_MOMENTS, f"{why} {kills}"

    for run, ledger, (_, expected) in zip(runs, ledgers, plans, strict=False):
        execution_id = run.handle.first_execution_run_id
        assert execution_id, why
        # The ledger: every step succeeded once, with the output its inputs imply.
        assert {s: r.status for s, r in ledger.steps.items()} == {s: StepStatus.succeeded for s in expected}, (
            f"{why} {run.id}"
        )
        assert {s: r.output for s, r in ledger.steps.items()} == expected, f"{why} {run.id}"
        succeeded = Counter(e.step_id for e in ledger.events if e.kind is EventKind.step_succeeded)
        assert succeeded == Counter(expected.keys()), f"{why} {run.id}: step_succeeded events {succeeded}"
        assert [e.kind for e in ledger.events].count(EventKind.run_succeeded) == 1, f"{why} {run.id}"

        rows = effect_rows(workspace, run.id)
        effects = Counter(row["step"] for row in rows)
        assert effects == Counter(expected.keys()), (
            f"{why} {run.id}: side effects per step {effects} (once each expected)"
        )
        for step_id, record in ledger.steps.items():
            key = f"{run.id}/{execution_id}/{step_id}/r{record.revision}"
            assert record.revision == 1, f"{why} {run.id}/{step_id}"
            attempts = by_step[(run.id, step_id)]
            # Every attempt, on whichever process, used the one key of (run, step, revision).
            assert {a["key"] for a in attempts} == {key}, (
                f"{why} {run.id}/{step_id}: keys {sorted({a['key'] for a in attempts})}"
            )
            assert all(a["revision"] == 1 and a["execution_id"] == execution_id for a in attempts), (
                f"{why} {run.id}/{step_id}"
            )
            assert [row["key"] for row in rows if row["step"] == step_id] == [key], f"{why} {run.id}/{step_id}"
            # The attempt the ledger counts is the last one that ran, and it ran to its end.
            numbers = {a["attempt"] for a in attempts}
            assert max(numbers) == record.attempts, (
                f"{why} {run.id}/{step_id}: ran attempts {sorted(numbers)}, ledger says {record.attempts}"
            )
            assert any(a["event"] == "end" and a["attempt"] == record.attempts for a in attempts), (
                f"{why} {run.id}/{step_id}"
            )
            # An attempt cut short ran on a worker that was killed (no healthy attempt is lost).
            for attempt in numbers - {record.attempts}:
                pids = {a["pid"] for a in attempts if a["attempt"] == attempt}
                ended = any(a["event"] == "end" for a in attempts if a["attempt"] == attempt)
                assert ended or pids <= killed, (
                    f"{why} {run.id}/{step_id}: attempt {attempt} on {pids} stopped; killed {kills}"
                )

    # The crashes did hit steps mid-flight: some ran more than once, across processes, and some
    # were killed after their side effect, which the retry found done and did not repeat.
    retried = {s for s, attempts in by_step.items() if len({a["attempt"] for a in attempts}) > 1}
    interrupted = {
        s
        for s, attempts in by_step.items()
        if any(a["pid"] in killed for a in attempts) and len({a["pid"] for a in attempts}) > 1
    }
    repeated = {s for s, attempts in by_step.items() if any(a["event"] == "effect" and a["repeated"] for a in attempts)}
    assert retried and interrupted, f"{why} no step ran twice; kills {kills}: the test proved nothing"
    assert repeated, f"{why} no retried step found its side effect done; kills {kills}"
    print(
        f"\n{why} workers polled after {boot:.1f} s; {RUNS} runs done {elapsed:.1f} s after the first start; kills (s, pid) {kills}; "
        f"{len(retried)} steps retried, {len(interrupted)} moved to another worker, {len(repeated)} found their effect done; "
        f"runs finished at {sorted(finished.values())} s"
    )

    # The histories replay deterministically, crashes and all.
    replayer = Replayer(workflows=[StratagemRun], plugins=[StratagemPlugin(stratagem_data_converter)])
    for run in runs:
        await replayer.replay_workflow(await run.handle.fetch_history())


# ------------------------------------------------------------------------------------------------
# 2. The embedded server killed mid-run and started again on the same database

# How long the server stays down after the slow step has ended. Longer than the SDK keeps
# retrying to report the completion (about 10 s), so the report is lost and the server's own
# timeout must bring the step back: the retry must find the side effect done.
SERVER_DOWNTIME = 12.0


def pids_in(output: str) -> list[int]:
    return [int(p) for p in re.findall(r"pid (\d+)", output)]


def wait_until(what: str, check: Any, seconds: float = 60) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"never saw {what}")


def test_embedded_server_killed_with_runs_in_three_states(tmp_path):
    """Killed while one run waits for plan approval, one runs a slow step and one waits for a
    person; started again on the same file, all three finish, every side effect once."""
    port = free_port_pair()
    home = tmp_path / "home"
    workspace = tmp_path / "ws"
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": f"127.0.0.1:{port}",
        "STRATAGEM_HOME": str(home),
        "STRATAGEM_WORKSPACE": str(workspace),
        "TEMPORAL_TASK_QUEUE": "crash-embedded",
        "CLI_CWD": str(tmp_path),
    }
    tools = ("--tools", CRASH_TOOLS)
    plans = {
        "review": {"goal": "wait for a reviewer", "steps": [work("after_review", "approved", 0.2)]},
        "asking": {
            "goal": "wait for a person",
            "steps": [
                {
                    "id": "terms",
                    "title": "Terms",
                    "kind": "human",
                    "instructions": "Which payment terms?",
                    "answer_schema": {"type": "object", "properties": {"days": {"type": "integer"}}},
                },
                work("after_answer", "${terms.days} days", 0.2, ["terms"]),
            ],
        },
        "working": {
            "goal": "run a slow step",
            "steps": [
                work("slow_step", "slow done", 3.0, timeout_seconds=10),
                work("after_slow", "${slow_step}, then this", 0.2, ["slow_step"]),
            ],
        },
    }
    ids = {name: f"{name}-{uuid.uuid4().hex[:6]}" for name in plans}
    pids: set[int] = set()
    hiccups: list[str] = []  # commands that had to be repeated right after the restart
    server: subprocess.Popen[str] | None = None

    def start(name: str, *extra: str) -> None:
        plan = write_plan(tmp_path / f"{name}.yaml", plans[name])
        started = cli("run", *tools, "--plan", plan, "--detach", "--id", ids[name], *extra, env=env)
        assert started.returncode == 0, started.stdout + started.stderr
        pids.update(pids_in(started.stdout + started.stderr))

    def status(name: str) -> dict[str, Any] | None:
        done = cli("status", ids[name], "--json", env=env)
        if done.returncode != 0:
            hiccups.append(f"status {name}: {done.stderr.strip()}")
            return None
        return json.loads(done.stdout)

    def pending(name: str) -> list[str] | None:
        found = status(name)
        return None if found is None else [p["kind"] for p in found["pending"]]

    def decide(*args: str) -> None:
        for _ in range(5):
            done = cli(*args, env=env)
            if done.returncode == 0:
                return
            hiccups.append(f"{args[0]}: {done.stderr.strip()}")
            if "in time" not in done.stderr:
                break
        raise AssertionError(f"{args}: {done.stdout} {done.stderr}")

    def attempts(name: str, step_id: str) -> list[dict[str, Any]]:
        return [
            a for a in read_jsonl(workspace / "attempts.jsonl") if a["run_id"] == ids[name] and a["step"] == step_id
        ]

    try:
        start("review")  # starts the embedded server and the background worker
        assert (home / "temporal.db").exists() and (home / "server.pid").exists()
        start("asking", "--auto-approve")
        wait_until("the review gate", lambda: (status("review") or {}).get("phase") == "awaiting_approval")
        wait_until("the question", lambda: pending("asking") == ["human_answer"])
        start("working", "--auto-approve")
        wait_until("the slow step running", lambda: attempts("working", "slow_step"))

        os.kill(int((home / "server.pid").read_text()), signal.SIGKILL)  # the server dies mid-step
        time.sleep(0.5)
        one_line_error(cli("status", ids["review"], env=env), "no Temporal server is reachable")
        # The step does its work, its side effect included, while the server is down.
        wait_until("the slow step's end", lambda: any(a["event"] == "end" for a in attempts("working", "slow_step")))
        time.sleep(SERVER_DOWNTIME)

        server = subprocess.Popen(
            [sys.executable, "-m", "stratagem.cli", "server"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        wait_listening(port)
        hiccups.clear()
        # Nothing was lost: each waiting run still waits where it did.
        assert wait_until("the review gate again", lambda: status("review"), 30)["phase"] == "awaiting_approval"
        assert wait_until("the question again", lambda: pending("asking"), 30) == ["human_answer"]
        decide("approve", ids["review"], "--revision", "1", "--by", "ops")
        decide("answer", ids["asking"], "terms", '{"days": 30}', "--json-value", "--by", "dana")

        outputs = {}
        for name in plans:
            waited = cli("wait", ids[name], "--json", env=env, timeout=120)
            pids.update(pids_in(waited.stdout + waited.stderr))
            assert waited.returncode == 0, f"{name}: {waited.stdout} {waited.stderr}"
            result = json.loads(waited.stdout)
            assert result["status"] == "succeeded", result
            outputs[name] = result["outputs"]
        assert outputs == {
            "review": {"after_review": "approved"},
            "asking": {"after_answer": "30 days"},
            "working": {"after_slow": "slow done, then this"},
        }
        # Every tool step's side effect happened exactly once, the slow step's included.
        for name, plan in plans.items():
            effects = Counter(row["step"] for row in effect_rows(workspace, ids[name]))
            tool_steps = [s["id"] for s in plan["steps"] if s.get("tool")]
            assert effects == Counter(tool_steps), f"{name}: side effects {effects}"
        slow = attempts("working", "slow_step")
        assert {a["key"] for a in slow} == {f"{ids['working']}/{slow[0]['execution_id']}/slow_step/r1"}
        audit = cli("audit", ids["working"], env=env)
        events = [json.loads(line) for line in audit.stdout.splitlines()]
        succeeded = [e for e in events if e.get("kind") == "step_succeeded" and e.get("step_id") == "slow_step"]
        assert len(succeeded) == 1, succeeded
        assert succeeded[0]["data"]["attempt"] == max(a["attempt"] for a in slow)
        print(
            f"\nslow step attempts {sorted({a['attempt'] for a in slow})}, "
            f"effect repeated by {[a['attempt'] for a in slow if a['event'] == 'effect' and a['repeated']]}; "
            f"repeated commands after the restart: {hiccups}"
        )
    finally:
        if server is not None:
            server.send_signal(signal.SIGINT)
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                server.kill()
        try:
            pids.add(int((home / "server.pid").read_text()))
        except (OSError, ValueError):
            pass
        try:
            pids.add(int(json.loads((home / "worker.json").read_text())["pid"]))
        except (OSError, ValueError, KeyError):
            pass
        for pid in pids:
            kill_if_ours(pid, str(home))


# ------------------------------------------------------------------------------------------------
# 3. A worker killed while a tool-call approval and a repair wait for people


def _pending(kind: str):
    return lambda status: any(p.kind.value == kind for p in status.pending)


async def _until(run: RunHandle, check: Any, seconds: float = 60) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        status = await run.status()
        if check(status):
            return status
        await asyncio.sleep(0.2)
    raise AssertionError(f"run {run.id} never got there: {(await run.status()).model_dump(mode='json')}")


async def test_a_worker_killed_while_a_call_approval_and_a_repair_wait(dev_env, tmp_path):
    client = dev_env.client
    task_queue = f"crash-people-{uuid.uuid4().hex[:8]}"
    workspace = tmp_path / "ws"
    script = tmp_path / "wire.yaml"
    script.write_text(
        json.dumps(
            {"executor": {"settle": [{"call": {"tool": "crash_wire", "args": {"amount": 900}}}, {"text": "done"}]}}
        )
    )
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": client.service_client.config.target_host,
        "TEMPORAL_NAMESPACE": "default",
        "TEMPORAL_TASK_QUEUE": task_queue,
        "STRATAGEM_WORKSPACE": str(workspace),
    }
    llm_plan = PlanDraft.model_validate(
        {
            "goal": "settle",
            "steps": [
                {"id": "settle", "title": "settle", "kind": "llm", "instructions": "pay", "tools": ["crash_wire"]}
            ],
        }
    )
    failing_plan = PlanDraft.model_validate(
        {
            "goal": "check then publish",
            "steps": [
                {"id": "check", "title": "check", "tool": "crash_fails_once", "args": {"label": "ok"}},
                {
                    "id": "publish",
                    "title": "publish",
                    "tool": "crash_work",
                    "args": {"label": "${check}", "seconds": 0.1},
                    "depends_on": ["check"],
                },
            ],
        }
    )
    author = Author(kind=AuthorKind.human, name="ops")
    workers = Workers(env, tmp_path)
    try:
        await wait_for_pollers(client, task_queue, {workers.start().pid})
        wire = await start_run(
            client,
            RunInput(plan=llm_plan, author=author, options=RunOptions(executor=f"scripted:{script}")),
            task_queue=task_queue,
        )
        repair = await start_run(client, RunInput(plan=failing_plan, author=author), task_queue=task_queue)
        for run in (wire, repair):
            await _until(run, lambda s: s.phase is Phase.awaiting_approval)
            await run.approve(ApproveInput(by="ops", revision=1))
        waiting = await _until(wire, _pending("tool_call_approval"))
        await _until(repair, lambda s: s.phase is Phase.awaiting_repair)

        [victim] = workers.alive
        workers.sigkill(victim)
        await wait_for_pollers(client, task_queue, {workers.start().pid})
        # The new worker picks both runs up where they waited: nothing ran meanwhile.
        assert not effect_rows(workspace, wire.id)
        [call] = [p for p in waiting.pending if p.call is not None]
        await wire.approve(
            ApproveInput(by="dana", step_id="settle", call_id=call.call.call_id, digest=call.call.digest)
        )
        await repair.repair(RepairInput(by="ops", action=RepairAction.retry, step_id="check"))
        wired, repaired = await asyncio.wait_for(asyncio.gather(wire.result(), repair.result()), timeout=60)
    finally:
        workers.close()

    assert wired.outputs == {"settle": "done"} and repaired.outputs == {"publish": "ok"}
    [row] = effect_rows(workspace, wire.id)  # the approved call ran once
    assert row["amount"] == "900" and row["key"].endswith("/settle/r1/c0")
    replayer = Replayer(workflows=[StratagemRun], plugins=[StratagemPlugin(stratagem_data_converter)])
    for run in (wire, repair):
        await replayer.replay_workflow(await run.handle.fetch_history())


# ------------------------------------------------------------------------------------------------
# 4. A payment in flight when its worker is killed (issue #41): exactly once, or in doubt


def _payment_plan(tool: str) -> PlanDraft:
    return PlanDraft.model_validate(
        {
            "goal": "pay invoice INV-7",
            "steps": [
                {"id": "pay", "title": "Pay INV-7", "tool": tool, "args": {"invoice": "INV-7", "amount": 1200}},
                {
                    "id": "note",
                    "title": "Note",
                    "tool": "note",
                    "args": {"text": "paid ${pay.key}"},
                    "depends_on": ["pay"],
                },
            ],
        }
    )


async def _killed_mid_payment(dev_env: Any, tmp_path: Path, tool: str) -> tuple[RunHandle, Workers, Path]:
    """A run whose payment step is in flight (the payment made, no answer given) when its worker
    process is SIGKILLed; a new worker is started. The payment system keeps one line per payment."""
    client = dev_env.client
    task_queue = f"crash-pay-{uuid.uuid4().hex[:8]}"
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "payment_script").write_text("block")  # the first call pays, then hangs; later ones pay
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": client.service_client.config.target_host,
        "TEMPORAL_NAMESPACE": "default",
        "TEMPORAL_TASK_QUEUE": task_queue,
        "STRATAGEM_WORKSPACE": str(workspace),
    }
    workers = Workers(env, tmp_path, tools=PAYMENT_TOOLS)
    try:
        await wait_for_pollers(client, task_queue, {workers.start().pid})
        # A short time limit: the heartbeat timeout (never longer) notices the lost worker within it.
        options = RunOptions(auto_approve=True, step_timeout_seconds=6, approvers=["ops"])
        run = await start_run(
            client,
            RunInput(plan=_payment_plan(tool), author=Author(kind=AuthorKind.human, name="alice"), options=options),
            task_queue=task_queue,
        )
        wait_until("the payment in flight", lambda: (workspace / "blocked").exists(), seconds=60)
        [victim] = workers.alive
        workers.sigkill(victim)
        await wait_for_pollers(client, task_queue, {workers.start().pid})
    except BaseException:
        workers.close()
        raise
    return run, workers, workspace


async def test_a_payment_in_flight_when_its_worker_is_killed_happens_once(dev_env, tmp_path):
    run, workers, workspace = await _killed_mid_payment(dev_env, tmp_path, "pay_invoice")
    try:
        result = await asyncio.wait_for(run.result(), timeout=90)
        ledger = await run.ledger()
    finally:
        workers.close()
    assert result.status is Phase.succeeded
    [paid] = payments(workspace)  # the reconcile check found it: the tool did not run again
    assert ledger.steps["pay"].output == {"invoice": "INV-7", "amount": 1200, "key": paid["key"]}
    assert ledger.steps["pay"].attempts == 2
    [reconciled] = [e for e in ledger.events if e.kind is EventKind.step_reconciled]
    assert reconciled.step_id == "pay"
    assert (workspace / "notes.txt").read_text() == f"paid {paid['key']}\n"
    replayer = Replayer(workflows=[StratagemRun], plugins=[StratagemPlugin(stratagem_data_converter)])
    await replayer.replay_workflow(await run.handle.fetch_history())


async def test_a_blind_payment_in_flight_when_its_worker_is_killed_waits_in_doubt(dev_env, tmp_path):
    run, workers, workspace = await _killed_mid_payment(dev_env, tmp_path, "pay_blind")
    try:
        status = await _until(run, _pending("in_doubt"), seconds=90)
        [pending] = [p for p in status.pending if p.kind.value == "in_doubt"]
        assert "its outcome is unknown (timed out" in pending.prompt, pending.prompt
        assert status.steps.in_doubt == 1
        [paid] = payments(workspace)
        await run.decide(
            kinds.RESOLVE,
            ResolveInput(
                by="ops", step_id="pay", happened=True, output={k: paid[k] for k in ("invoice", "amount", "key")}
            ),
        )
        result = await asyncio.wait_for(run.result(), timeout=60)
        ledger = await run.ledger()
    finally:
        workers.close()
    assert result.status is Phase.succeeded
    assert len(payments(workspace)) == 1  # never paid twice
    assert ledger.steps["pay"].attempts == 1
    assert (workspace / "notes.txt").read_text() == f"paid {paid['key']}\n"
    replayer = Replayer(workflows=[StratagemRun], plugins=[StratagemPlugin(stratagem_data_converter)])
    await replayer.replay_workflow(await run.handle.fetch_history())


async def test_a_continue_as_new_carries_a_step_in_doubt(dev_env, tmp_path):
    async with harness_for(dev_env, tmp_path, ToolRegistry.from_modules([PAYMENT_TOOLS])) as harness:
        harness.workspace.mkdir(parents=True)
        (harness.workspace / "payment_script").write_text("unknown")
        plan = _payment_plan("pay_blind").model_dump(mode="json")
        plan["steps"].append({"id": "beside", "title": "Beside", "tool": "pause", "args": {"seconds": 1.5}})
        run = await harness.start(plan, auto_approve=True, continue_as_new_after_events=20)
        # (A continued execution answers with the state it let go of: no revision, no steps.)
        status = await harness.wait_for(
            run, lambda s: s.continued >= 1 and s.revision is not None and _pending("in_doubt")(s), timeout=60
        )
        assert status.steps.in_doubt == 1
        await run.decide(kinds.RESOLVE, ResolveInput(by="ops", step_id="pay", happened=False))
        result = await asyncio.wait_for(run.result(), timeout=60)
        ledger = await run.ledger()
    assert result.status is Phase.succeeded
    assert len(payments(harness.workspace)) == 2  # the lost one, and the one a person asked for
    asked = [e for e in ledger.events if e.kind is EventKind.step_in_doubt]
    assert len(asked) == 1  # carried, not asked again
    assert ledger.steps["pay"].attempts == 2


# ------------------------------------------------------------------------------------------------
# 5. Payments while workers and the server are killed at random moments (issue #41)

PAYING_RUNS = 6
WORKER_KILLS = 3


def _paying_plan(index: int, rng: random.Random) -> tuple[PlanDraft, dict[str, str]]:
    """Two slow reconcilable payments one after the other (so payments are in flight all through
    the kills), then a note naming both; returns the plan and the invoice each payment step pays."""
    invoices = {step: f"INV-{index}{step[-1]}" for step in ("pay_a", "pay_b")}
    steps: list[dict[str, Any]] = [
        {
            "id": step,
            "title": f"Pay {invoice}",
            "tool": "pay_slowly",
            "args": {"invoice": invoice, "amount": 100 * (index + 1), "seconds": round(rng.uniform(1.5, 3.5), 2)},
            "depends_on": ["pay_a"] if step == "pay_b" else [],
        }
        for step, invoice in invoices.items()
    ]
    steps.append(
        {
            "id": "note",
            "title": "Note",
            "tool": "note",
            "args": {"text": "paid ${pay_a.key} ${pay_b.key}"},
            "depends_on": ["pay_b"],
        }
    )
    return PlanDraft.model_validate({"goal": f"pay run {index}", "steps": steps}), invoices


async def test_payments_survive_workers_and_the_server_killed_at_random_moments(tmp_path):
    """Six runs pay twelve invoices with a reconcilable tool on a bank that keys nothing, while
    worker processes are SIGKILLed at seeded moments and the embedded server is SIGKILLed once and
    started again on the same database: every run succeeds and every invoice is paid once."""

    rng = random.Random(SEED)
    why = f"(CRASH_SEED={SEED})"
    port = free_port_pair()
    address = f"127.0.0.1:{port}"
    home = tmp_path / "home"
    workspace = tmp_path / "ws"
    task_queue = f"crash-paying-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": address,
        "TEMPORAL_NAMESPACE": "default",
        "TEMPORAL_TASK_QUEUE": task_queue,
        "STRATAGEM_WORKSPACE": str(workspace),
    }
    plans = [_paying_plan(i, rng) for i in range(PAYING_RUNS)]
    # The schedule, in seconds after the last run started: a worker dies in each of three windows
    # while payments are in flight, and the server dies once among them, down for 2 to 12 s (past
    # about 10 s, a completion a worker could not report is lost and the step's timeout brings it back).
    schedule: list[tuple[float, str]] = [
        (round(0.5 + 2.5 * k + rng.uniform(0, 1.5), 2), "worker") for k in range(WORKER_KILLS)
    ]
    server_down = round(rng.uniform(1.0, 6.0), 2)
    downtime = round(rng.uniform(2.0, 12.0), 1)
    schedule += [(server_down, "server"), (round(server_down + downtime, 2), "restart")]
    schedule.sort()
    # A short time limit: a lost worker's attempt ends at the heartbeat timeout, min(30 s, 6 s).
    options = RunOptions(auto_approve=True, step_timeout_seconds=6, step_max_attempts=10, approvers=["ops"])

    server = EmbeddedServer(address=address, home=home)
    server_pids = [await asyncio.to_thread(server.start_detached)]
    workers = Workers(env, tmp_path, tools=PAYMENT_TOOLS)
    runs: list[RunHandle] = []
    done: list[tuple[float, str]] = []  # what the chaos did, when
    try:
        client = await Client.connect(address, data_converter=stratagem_data_converter)
        await wait_for_pollers(client, task_queue, {workers.start().pid for _ in range(3)})
        author = Author(kind=AuthorKind.human, name="alice")
        for index, (plan, _) in enumerate(plans):
            run_input = RunInput(plan=plan, author=author, options=options)
            runs.append(await start_run(client, run_input, task_queue=task_queue, run_id=f"paying-{SEED}-{index}"))
        began = time.monotonic()
        up = True
        owed = 0  # replacements for workers killed while the server was down (they could not connect)
        for moment, what in schedule:
            await asyncio.sleep(max(0.0, began + moment - time.monotonic()))
            if what == "worker":
                victim = rng.choice(workers.alive)
                workers.sigkill(victim)
                if up:
                    workers.start()  # a replacement, as a supervisor would start one
                else:
                    owed += 1
                done.append((round(time.monotonic() - began, 1), f"worker {victim.pid} killed"))
            elif what == "server":
                os.kill(server_pids[-1], signal.SIGKILL)
                up = False
                done.append((round(time.monotonic() - began, 1), f"server {server_pids[-1]} killed"))
            else:
                server_pids.append(await asyncio.to_thread(server.start_detached))
                up = True
                for _ in range(owed):
                    workers.start()
                owed = 0
                done.append((round(time.monotonic() - began, 1), f"server {server_pids[-1]} started"))
        story = f"{why} chaos (s, what): {done}"

        async def outcome(run: RunHandle) -> Any:
            try:
                return await run.result()
            except WorkflowFailureError as exc:  # a failed run; reported below with the seed
                return exc

        try:
            results = await asyncio.wait_for(asyncio.gather(*(outcome(r) for r in runs)), timeout=60)
        except TimeoutError:
            open_runs = [(r.id, (await r.status()).model_dump(mode="json")) for r in runs]
            raise AssertionError(f"{story}: runs still open 60 s after the server came back: {open_runs}") from None
        elapsed = time.monotonic() - began
        ledgers = [await run.ledger() for run in runs]
        histories = [await run.handle.fetch_history() for run in runs]
    finally:
        workers.close()
        for pid in server_pids:
            kill_if_ours(pid, str(home))

    bank = payments(workspace)
    paid = Counter(row["invoice"] for row in bank)
    invoices = [invoice for _, plan_invoices in plans for invoice in plan_invoices.values()]
    # Every invoice paid exactly once: checked first, it is what the kills must never break.
    assert paid == Counter(invoices), f"{story}: payments per invoice {dict(paid)}; the bank: {bank}"
    for run, result, ledger, (_, plan_invoices) in zip(runs, results, ledgers, plans, strict=False):
        assert not isinstance(result, BaseException), f"{story}: run {run.id} raised {result!r}"
        assert result.status is Phase.succeeded, f"{story}: run {run.id}: {result.status} {result.reason}"
        keys = {}
        for step_id, invoice in plan_invoices.items():
            [row] = [row for row in bank if row["invoice"] == invoice]
            keys[step_id] = row["key"]
            record = ledger.steps[step_id]
            # The step's output is the one payment, whether its tool answered or its check found it.
            assert record.output == {k: row[k] for k in ("invoice", "amount", "key")}, f"{story}: {run.id}/{step_id}"
            assert row["key"].startswith(f"{run.id}/") and row["key"].endswith(f"/{step_id}/r1"), f"{story}: {row}"
        assert ledger.steps["note"].output == f"paid {keys['pay_a']} {keys['pay_b']}", f"{story}: {run.id}"
        assert not [e for e in ledger.events if e.kind is EventKind.step_in_doubt], f"{story}: {run.id}"

    attempts = {
        (run.id, s): ledger.steps[s].attempts
        for run, ledger in zip(runs, ledgers, strict=False)
        for s in ("pay_a", "pay_b")
    }
    reconciled = [
        (run.id, e.step_id)
        for run, ledger in zip(runs, ledgers, strict=False)
        for e in ledger.events
        if e.kind is EventKind.step_reconciled
    ]
    retried = {step: n for step, n in attempts.items() if n > 1}
    assert retried, f"{story}: no payment was cut short by a kill: the test proved nothing"
    print(
        f"\n{story}; runs done {elapsed:.1f} s after the last start; payments retried {retried}; "
        f"found by the check {reconciled}"
    )

    # The histories replay deterministically, kills and all.
    replayer = Replayer(workflows=[StratagemRun], plugins=[StratagemPlugin(stratagem_data_converter)])
    for history in histories:
        await replayer.replay_workflow(history)


# ------------------------------------------------------------------------------------------------
# 6. An llm step's worker killed mid-conversation (issue #42): no call made twice, no round asked again

PAGES = 12
HANG_AT = 10  # past 128 KB of conversation: 9 pages of 16,000 characters (the executor's cut) each


def _archive_reader(request_body: Any) -> Reply:
    """A model that reads the archive page by page, then answers: what it asks depends only on
    how many pages the conversation holds, so a resumed conversation gets the same calls."""
    read = sum(1 for m in request_body["messages"] if m["role"] == "tool")
    if read < PAGES:
        return Reply.tool_calls([("fetch_page", {"page": read + 1})], usage=(100 + read, 10))
    return Reply.text(f"read {read} pages", usage=(200, 5))


async def test_an_llm_step_killed_mid_conversation_resumes_from_its_last_round(dev_env, tmp_path):
    """A joint run's one llm step reads twelve 20 KB pages with a reconcilable tool; its worker is
    SIGKILLed while fetching the tenth (fetched, its result not recorded), with a conversation past
    what heartbeat details may carry and rounds newer than any heartbeat the server got (the SDK
    sends them at most every 0.8 x the heartbeat timeout). The next attempt, on a new worker, goes
    on from the last round: the tenth fetch is found by the tool's check, every page is fetched
    once, and the model is never asked the same conversation twice."""
    client = dev_env.client
    task_queue = f"crash-llm-{uuid.uuid4().hex[:8]}"
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "hang_at").write_text(str(HANG_AT))
    with FakeOpenAI() as fake:
        fake.responder = _archive_reader
        env = {
            **os.environ,
            "TEMPORAL_ADDRESS": client.service_client.config.target_host,
            "TEMPORAL_NAMESPACE": "default",
            "TEMPORAL_TASK_QUEUE": task_queue,
            "STRATAGEM_WORKSPACE": str(workspace),
            "STRATAGEM_STORE": str(tmp_path / "store"),
            "OPENAI_API_KEY": "sk-test-secret-0123456789abcdef",
            "STRATAGEM_MODEL_URLS": fake.base_url,
        }
        workers = Workers(env, tmp_path, tools=PAGE_TOOLS)
        try:
            await wait_for_pollers(client, task_queue, {workers.start().pid})
            # A heartbeat timeout of 10 s (the step's time limit): the SDK sends details every 8 s at most.
            options = RunOptions(
                mode="joint",
                executor=f"openai:gpt-test@{fake.base_url}",
                joint_tools=["fetch_page"],
                auto_approve=True,
                max_tool_rounds=PAGES + 3,
                step_timeout_seconds=10,
            )
            run = await start_run(client, RunInput(goal="read the archive", options=options), task_queue=task_queue)
            wait_until("the tenth fetch in flight", lambda: (workspace / "hung").exists(), seconds=60)
            [victim] = workers.alive
            workers.sigkill(victim)
            await wait_for_pollers(client, task_queue, {workers.start().pid})
            result = await asyncio.wait_for(run.result(), timeout=90)
            ledger = await run.ledger()
            history = await run.handle.fetch_history()
        finally:
            workers.close()
        asked = Counter(len(r.body["messages"]) for r in fake.requests)

    fetched = fetches(workspace)
    story = f"fetches {[(f['page'], f['attempt']) for f in fetched]}; requests per conversation length {dict(asked)}"
    assert Counter(f["page"] for f in fetched) == Counter(range(1, PAGES + 1)), story  # each page once
    assert len({f["key"] for f in fetched}) == PAGES, story
    assert all(n == 1 for n in asked.values()) and len(asked) == PAGES + 1, story  # no round asked again
    assert result.status is Phase.succeeded, result.reason
    record = ledger.steps["task"]
    assert record.output == f"read {PAGES} pages" and record.attempts == 2, story
    assert [t.call for t in record.tool_calls] == list(range(PAGES)), story
    [found] = [t for t in record.tool_calls if "reconciled" in t.message]
    assert found.call == HANG_AT - 1 and found.attempt == 2, story
    assert record.usage is not None and record.usage.calls == PAGES + 1, story  # every model call counted once
    replayer = Replayer(workflows=[StratagemRun], plugins=[StratagemPlugin(stratagem_data_converter)])
    await replayer.replay_workflow(history)
