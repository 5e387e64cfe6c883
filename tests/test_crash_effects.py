"""Effects that must not happen twice survive SIGKILLed workers and a SIGKILLed server.

Real processes, real servers, as in tests/test_crash.py (whose helpers are in
tests/support/crash.py): a payment in flight when its worker is killed is made once when the tool
has a reconcile check, and waits in doubt for a person when it has none (and a continue-as-new
carries that doubt); reconcilable payments are made while workers and the embedded server are both
killed at random moments, each invoice paid once; an llm step whose worker is killed
mid-conversation resumes from its last round, every tool call made once and no round asked again.
Set CRASH_SEED to replay a particular kill schedule; every assertion message names the seed.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from conftest import harness_for
from support import PAGE_TOOLS, PAYMENT_TOOLS
from support.crash import (
    SEED,
    Workers,
    has_pending,
    kill_if_ours,
    run_until,
    wait_for_pollers,
    wait_until,
)
from support.page_tools import fetches
from support.payment_tools import payments
from support.ports import free_port_pair
from support.wire_servers import FakeOpenAI, Reply
from temporalio.client import Client, WorkflowFailureError
from temporalio.worker import Replayer

from stratagem.client import RunHandle, start_run
from stratagem.domain.decisions import kinds
from stratagem.domain.ledger import EventKind
from stratagem.domain.plan import Author, AuthorKind, PlanDraft
from stratagem.domain.run_types import Phase, ResolveInput, RunInput, RunOptions
from stratagem.io.payloads import stratagem_data_converter
from stratagem.server.embedded import EmbeddedServer
from stratagem.temporal.plugin import StratagemPlugin
from stratagem.tools import ToolRegistry
from stratagem.workflows import StratagemRun

pytestmark = pytest.mark.system


# ------------------------------------------------------------------------------------------------
# 1. A payment in flight when its worker is killed (issue #41): exactly once, or in doubt


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
        status = await run_until(run, has_pending("in_doubt"), seconds=90)
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
            run, lambda s: s.continued >= 1 and s.revision is not None and has_pending("in_doubt")(s), timeout=60
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
# 2. Payments while workers and the server are killed at random moments (issue #41)

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
# 3. An llm step's worker killed mid-conversation (issue #42): no call made twice, no round asked again

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
