"""Nothing is lost when worker processes or the embedded server die with SIGKILL mid-run.

Real processes, real servers: workers are `python worker.py` processes killed with SIGKILL at
seeded random moments while a dozen runs execute parallel slow steps with side effects; the
embedded server is killed while runs wait for a plan approval, run a step and wait for a person;
a worker is killed while a tool-call approval and a repair wait for people.
Payments and llm steps under the same kills: tests/test_crash_effects.py; the helpers both use:
tests/support/crash.py. Set CRASH_SEED to replay a particular kill schedule; every assertion
message names the seed.
"""

from __future__ import annotations

import asyncio
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
from typing import Any

import pytest
from support import CRASH_TOOLS
from support.cli import cli, one_line_error, write_plan
from support.crash import (
    SEED,
    Workers,
    effect_rows,
    has_pending,
    kill_if_ours,
    read_jsonl,
    run_until,
    wait_for_pollers,
    wait_until,
    work,
)
from support.ports import free_port_pair, wait_listening
from temporalio.client import WorkflowFailureError
from temporalio.worker import Replayer

from stratagem.client import RunHandle, start_run
from stratagem.domain.ledger import EventKind, StepStatus
from stratagem.domain.plan import Author, AuthorKind, PlanDraft
from stratagem.domain.run_types import (
    ApproveInput,
    Phase,
    RepairAction,
    RepairInput,
    RunInput,
    RunOptions,
)
from stratagem.io.payloads import stratagem_data_converter
from stratagem.temporal.plugin import StratagemPlugin
from stratagem.workflows import StratagemRun

pytestmark = pytest.mark.system


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
            await run_until(run, lambda s: s.phase is Phase.awaiting_approval)
            await run.approve(ApproveInput(by="ops", revision=1))
        waiting = await run_until(wire, has_pending("tool_call_approval"))
        await run_until(repair, lambda s: s.phase is Phase.awaiting_repair)

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
