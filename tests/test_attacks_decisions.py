"""Attacks on who decides (issue #35, the second attack pass), performed against real servers.

Each test does what the attacker did and proves the effect did not happen: the fixture tools'
own counter (calls.jsonl, written by the tool when it runs) and the run's state, read back.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from support import FIXTURE_TOOLS
from support.cli import ROOT, acli
from support.signing import send_signed

from stratagem.client import get_run, start_run
from stratagem.common.errors import DecisionRefusedError
from stratagem.domain.ledger import EventKind, StepStatus
from stratagem.domain.plan import Author, AuthorKind, PlanDraft
from stratagem.domain.run_types import AnswerInput, ApproveInput, Fork, Phase, RejectInput, RunInput, RunOptions
from stratagem.io.binaries import temporal_cli

PAY = {
    "goal": "pay the vendor",
    "steps": [{"id": "pay", "title": "Pay", "tool": "record", "args": {"label": "paid"}, "risk": "high"}],
}


async def temporal(env, *args: str) -> subprocess.CompletedProcess[str]:
    """The plain Temporal CLI, as anyone who reaches the frontend could run it."""
    address = env.client.service_client.config.target_host
    command = [str(temporal_cli()), *args, "--address", address, "--namespace", env.client.namespace]
    return await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True, timeout=60)


def calls(workspace: Path) -> list[dict]:
    log = workspace / "calls.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


async def wait_until(run, predicate, timeout: float = 30):
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        status = await run.status()
        if predicate(status):
            return status
        assert asyncio.get_running_loop().time() < deadline, status
        await asyncio.sleep(0.1)


# --- item 8: unsigned decisions are refused by default ------------------------------------------


@pytest.mark.system
async def test_a_worker_from_a_home_without_keys_refuses_what_the_plain_temporal_cli_sends(dev_env, tmp_path):
    home, workspace = tmp_path / "home", tmp_path / "ws"
    task_queue = f"signed-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": dev_env.client.service_client.config.target_host,
        "TEMPORAL_TASK_QUEUE": task_queue,
        "STRATAGEM_HOME": str(home),  # a home of its own: no key in it, none configured
        "STRATAGEM_WORKSPACE": str(workspace),
    }
    for name in ("STRATAGEM_APPROVER_KEYS", "STRATAGEM_ISSUER_KEYS", "STRATAGEM_ALLOW_UNSIGNED"):
        env.pop(name, None)
    worker = subprocess.Popen(
        [sys.executable, "-m", "stratagem.cli", "worker", "--tools", FIXTURE_TOOLS],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        plan = PlanDraft.model_validate(PAY)
        started = await start_run(
            dev_env.client,
            RunInput(plan=plan, author=Author(kind=AuthorKind.human, name="alice")),
            task_queue=task_queue,
        )
        run = get_run(dev_env.client, started.id)
        await wait_until(run, lambda s: bool(s.pending))
        claim = json.dumps({"by": "alice", "revision": 1})
        update = await temporal(
            dev_env, "workflow", "update", "execute", "--workflow-id", run.id, "--name", "approve", "--input", claim
        )
        assert update.returncode != 0 and "only signed decisions" in update.stdout + update.stderr
        signal = await temporal(
            dev_env, "workflow", "signal", "--workflow-id", run.id, "--name", "approve_signal", "--input", claim
        )
        assert signal.returncode == 0, signal.stderr
        for _ in range(100):
            ledger = await run.ledger()
            if any(e.kind is EventKind.signal_ignored for e in ledger.events):
                break
            await asyncio.sleep(0.1)
        [ignored] = [e for e in ledger.events if e.kind is EventKind.signal_ignored]
        assert ignored.message.startswith("not verified: this deployment accepts only signed decisions")
        assert not ledger.decisions and (await run.status()).phase is Phase.awaiting_approval
        assert calls(workspace) == []

        # The person, from the same home: their key is made on first use, signs, and is trusted at once.
        cli_env = {**env, "CLI_CWD": str(tmp_path)}
        plan_ok = await acli("approve", run.id, "--revision", "1", "--by", "alice", env=cli_env)
        assert plan_ok.returncode == 0, plan_ok.stderr
        assert "made a signing key for alice" in plan_ok.stdout + plan_ok.stderr
        # The high-risk payment waits for its own approval; forged, it stays waiting.
        await wait_until(run, lambda s: [p.step_id for p in s.pending] == ["pay"])
        forged = json.dumps({"by": "alice", "step_id": "pay"})
        update = await temporal(
            dev_env, "workflow", "update", "execute", "--workflow-id", run.id, "--name", "approve", "--input", forged
        )
        assert update.returncode != 0 and calls(workspace) == []
        step_ok = await acli("approve", run.id, "--step", "pay", "--by", "alice", env=cli_env)
        assert step_ok.returncode == 0, step_ok.stderr
        assert (await asyncio.wait_for(started.result(), 60)).status is Phase.succeeded
        assert [c["label"] for c in calls(workspace)] == ["paid"]
        approvals = (await run.ledger()).decisions
        assert [d.signed_by for d in approvals] == ["alice", "alice"]
    finally:
        worker.terminate()
        output, _ = worker.communicate(timeout=30)
    assert "decisions: signed only" in output  # the worker says which mode it is in


@pytest.mark.system
async def test_a_worker_says_when_the_operator_lets_unsigned_decisions_in(dev_env, tmp_path):
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": dev_env.client.service_client.config.target_host,
        "TEMPORAL_TASK_QUEUE": f"open-{uuid.uuid4().hex[:8]}",
        "STRATAGEM_HOME": str(tmp_path / "home"),
        "STRATAGEM_ALLOW_UNSIGNED": "1",
    }
    worker = subprocess.Popen(
        [sys.executable, "-m", "stratagem.cli", "worker"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        # It says so before it connects: read until that line, then stop it.
        said = await asyncio.wait_for(asyncio.to_thread(_line_with, worker, "decisions:"), timeout=60)
    finally:
        worker.terminate()
        worker.communicate(timeout=30)
    assert "unsigned ones are accepted (STRATAGEM_ALLOW_UNSIGNED=1)" in said


def _line_with(process: subprocess.Popen, text: str) -> str:
    assert process.stdout is not None
    for line in process.stdout:
        if text in line:
            return line
    return ""


# --- item 7: answers follow who may decide -------------------------------------------------------


@pytest.mark.workflow
async def test_an_answer_follows_the_runs_approver_list(harness):
    plan = {
        "goal": "pay who the finance lead names",
        "steps": [
            {"id": "payee", "title": "Who is paid?", "kind": "human", "instructions": "Name the payee."},
            {"id": "pay", "title": "Pay", "tool": "record", "args": {"label": "pay ${payee}"}, "depends_on": ["payee"]},
        ],
    }
    run = await harness.start(plan, approvers=["dana"])
    await harness.wait_for(run, lambda s: bool(s.pending))
    await run.approve(ApproveInput(by="dana", revision=1))
    await harness.wait_for(run, lambda s: [p.step_id for p in s.pending] == ["payee"])
    # Mallory is no approver of this run, and the step names none: she may not answer it either.
    try:
        await run.answer(AnswerInput(step_id="payee", answer="mallory", by="mallory"))
        raise AssertionError("a person off the approver list answered")
    except DecisionRefusedError as exc:
        assert "mallory is not on this run's approver list (dana)" in str(exc)
    await send_signed(run, "answer_signal", AnswerInput(step_id="payee", answer="mallory", by="mallory"))
    ledger = await run.ledger()
    for _ in range(100):
        if any(e.kind is EventKind.signal_ignored for e in ledger.events):
            break
        await asyncio.sleep(0.05)
        ledger = await run.ledger()
    assert any(e.kind is EventKind.signal_ignored and e.actor == "mallory" for e in ledger.events)
    assert harness.calls() == []
    await run.answer(AnswerInput(step_id="payee", answer="acme", by="dana"))
    assert (await run.result()).status is Phase.succeeded
    assert [c["label"] for c in harness.calls()] == ["pay acme"]


# --- item 2: a fork's carried outputs come from the source run -----------------------------------

GATED = {
    "goal": "pay who the finance lead names",
    "steps": [
        {
            "id": "payee",
            "title": "Who is paid?",
            "kind": "human",
            "instructions": "Name the payee.",
            "approvers": ["dana"],
        },
        {
            "id": "pay",
            "title": "Pay",
            "tool": "record",
            "args": {"label": "pay ${payee}"},
            "depends_on": ["payee"],
            "risk": "high",
        },
        {"id": "tell", "title": "Tell", "tool": "record", "args": {"label": "told"}, "depends_on": ["pay"]},
    ],
}


@pytest.mark.workflow
async def test_a_fork_cannot_bring_its_own_outputs_or_name_a_run_that_does_not_exist(harness):
    forged = {"payee": "mallory", "pay": {"label": "pay mallory"}}
    for fork in (
        Fork(run_id="no-such-run", revision=1, outputs=forged),  # outputs brought by the starter
        Fork(run_id="no-such-run", revision=1),  # a source that does not exist
    ):
        run = await harness.start_input(
            RunInput(
                plan=PlanDraft.model_validate(GATED),
                author=Author(kind=AuthorKind.human, name="mallory"),
                options=RunOptions(approvers=["dana"]),
                fork=fork,
            )
        )
        try:
            await run.result()
            raise AssertionError("a forged fork ran")
        except Exception:
            pass
        status = await run.status()
        assert status.phase is Phase.failed and not status.pending
        if fork.outputs:
            assert "brings a fork's outputs" in (status.reason or "")
        else:
            assert "there is no run no-such-run to fork from" in (status.reason or "")
        ledger = await run.ledger()
        assert all(r.status is not StepStatus.succeeded for r in ledger.steps.values())
    assert harness.calls() == []


@pytest.mark.workflow
async def test_a_fork_carries_only_what_the_source_run_recorded_and_shows_every_value(harness):
    source = await harness.start(GATED, approvers=["dana"])
    await harness.wait_for(source, lambda s: bool(s.pending))
    await source.approve(ApproveInput(by="dana", revision=1))
    await harness.wait_for(source, lambda s: [p.step_id for p in s.pending] == ["payee"])
    await source.approve(ApproveInput(by="dana", step_id="payee"))  # it names its approver: asked first
    await harness.wait_for(source, lambda s: [p.kind.value for p in s.pending] == ["human_answer"])
    await source.answer(AnswerInput(step_id="payee", answer="acme", by="dana"))
    await harness.wait_for(source, lambda s: [p.step_id for p in s.pending] == ["pay"])
    await source.reject(RejectInput(by="dana", step_id="pay", reason="not today"))  # never paid
    await asyncio.wait_for(_settled(source), 30)
    assert harness.calls() == []

    # A fork of it: only the answer dana gave there is carried; the payment, which never
    # succeeded there, runs again here under its own gate.
    fork = await harness.start_input(
        RunInput(
            plan=PlanDraft.model_validate(GATED),
            author=Author(kind=AuthorKind.human, name="erin"),
            options=RunOptions(approvers=["dana"]),
            fork=Fork(run_id=source.id, revision=1),
        )
    )
    status = await harness.wait_for(fork, lambda s: bool(s.pending))
    [review] = status.pending
    assert review.carried == {"payee": "acme"}  # every carried value, as the source recorded it
    assert f"Carried over from run {source.id} (revision 1)" in review.prompt
    await fork.approve(ApproveInput(by="dana", revision=1))
    await harness.wait_for(fork, lambda s: [p.step_id for p in s.pending] == ["pay"])
    assert harness.calls() == []
    await fork.approve(ApproveInput(by="dana", step_id="pay"))
    assert (await fork.result()).status is Phase.succeeded
    assert [c["label"] for c in harness.calls()] == ["pay acme", "told"]


async def _settled(run) -> None:
    try:
        await run.result()
    except Exception:
        pass


# --- item 3: a per-call approval shows every argument and binds to them ---------------------------


@pytest.mark.workflow
async def test_a_long_memo_cannot_hide_the_payee_of_a_call_waiting_for_approval(harness):
    memo = "Routine settlement of the quarterly invoices. " * 200  # 9,400 characters before the payee
    arguments = {"memo": memo, "amount": 99999, "to": "mallory"}
    model = harness.script(
        "memo.yaml", {"executor": {"settle": [{"call": {"tool": "wire_funds", "args": arguments}}, {"text": "done"}]}}
    )
    plan = {
        "goal": "settle",
        "steps": [{"id": "settle", "title": "Settle", "kind": "llm", "instructions": "pay", "tools": ["wire_funds"]}],
    }
    run = await harness.start(plan, executor=model)
    await harness.wait_for(run, lambda s: bool(s.pending))
    await run.approve(ApproveInput(by="dana", revision=1))
    status = await harness.wait_for(run, lambda s: any(p.call is not None for p in s.pending))
    [waiting] = [p for p in status.pending if p.call is not None]
    # Every argument is there to see: the payee and the amount behind the memo, and nothing cut.
    assert json.loads(waiting.call.arguments) == arguments and "cut" not in waiting.call.arguments
    assert '"to": "mallory"' in waiting.prompt and '"amount": 99999' in waiting.prompt
    # An approval of what was shown for another call (the digest of other arguments) is refused as stale.
    stale = ApproveInput(by="dana", step_id="settle", call_id=waiting.call.call_id, digest="ab" * 32)
    try:
        await run.approve(stale)
        raise AssertionError("an approval of other arguments was taken")
    except DecisionRefusedError as exc:
        assert "differ from the ones approved" in str(exc)
    assert harness.calls() == []
    await run.reject(RejectInput(by="dana", step_id="settle", call_id=waiting.call.call_id, reason="who is mallory?"))
    assert (await run.result()).status is Phase.succeeded
    assert harness.calls() == []  # never wired


# --- a workspace that holds the home cannot reach its keys ---------------------------------------


@pytest.mark.workflow
async def test_a_step_cannot_read_or_plant_a_key_when_the_workspace_holds_the_home(harness, monkeypatch):
    """With STRATAGEM_WORKSPACE set above STRATAGEM_HOME (the user's home folder, say), a plan's
    file steps could read a person's private key, or write a key the worker would then trust for
    its name (a home's keys are read again on an unknown signer)."""
    import stratagem.tools.builtin.workspace as workspace

    home = harness.workspace / "home"
    (home / "keys").mkdir(parents=True)
    (home / "keys" / "alice.key").write_text("alice:c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LXNlY3JldA==\n")
    monkeypatch.setattr(workspace, "stratagem_home", lambda: home)  # the worker's home, inside its workspace
    planted = "mallory:" + "A" * 44
    plan = {
        "goal": "take the keys",
        "steps": [
            {"id": "steal", "title": "Read", "tool": "read_file", "args": {"path": "home/keys/alice.key"}},
            {
                "id": "plant",
                "title": "Write",
                "tool": "write_file",
                "args": {"path": "home/keys/../keys/mallory.key", "content": planted},
            },
        ],
    }
    run = await harness.start(plan, auto_approve=True, on_failure="fail")
    try:
        await run.result()
    except Exception:
        pass
    ledger = await run.ledger()
    for step_id in ("steal", "plant"):
        record = ledger.steps[step_id]
        assert record.status is StepStatus.failed, record
        assert "one of the worker's keys or console secrets" in (record.error or "")
    assert not (home / "keys" / "mallory.key").exists()
    assert "c2VjcmV0" not in ledger.model_dump_json()  # the private key reached no output or error


# --- item 10: the review table cuts nothing, however narrow the terminal --------------------------


@pytest.mark.unit
def test_the_review_table_folds_every_cell_at_any_width():
    import io

    from stratagem.cli import render

    iban = "DE89370400440532013000"
    plan = PlanDraft.model_validate(
        {
            "goal": "pay",
            "steps": [
                {
                    "id": "pay_the_vendor_now",
                    "title": "Pay",
                    "tool": "record",
                    "risk": "high",
                    "args": {"label": f"memo {'x' * 300} iban {iban} amount 99999"},
                }
            ],
        }
    )
    for width in (40, 60, 80):
        out = io.StringIO()
        render.PlainConsole(file=out, width=width).print(render.plan_table(plan))
        text = out.getvalue()
        flat = "".join(line.strip("│ ") for line in text.splitlines())
        assert "…" not in text, width  # at 40 columns the risk once read "appr…"
        assert iban in flat.replace(" ", "") and "99999" in flat, width


# --- found by attacking this issue's own defaults -------------------------------------------------


@pytest.mark.system
async def test_a_cron_start_neither_approves_itself_nor_brings_a_state(dev_harness):
    """Temporal starts a cron schedule's next run with the first input and calls it continued: its
    auto_approve went unchecked, and a forged approved state was taken, from the second run on."""
    from stratagem.domain.ledger import Ledger
    from stratagem.domain.plan import Plan, Step
    from stratagem.domain.run_types import WORKFLOW_NAME, RunResult, RunState

    harness = dev_harness
    plan = PlanDraft.model_validate(PAY)
    approved = Plan(
        goal="pay",
        revision=1,
        author=Author(kind=AuthorKind.human, name="alice"),
        steps=[Step(id="pay", title="Pay", tool="record", args={"label": "forged"}, risk="high")],
    )
    ledger = Ledger(run_id="cron")
    ledger.revisions.append(approved)
    state = RunState(
        run_id="cron",
        execution_id="x",
        goal="pay",
        options=RunOptions(),
        ledger=ledger,
        phase=Phase.running,
        approved_revision=1,
        step_approvals={"pay": True},
        level=7,
    )
    handles = []
    for run_input in (
        RunInput(plan=plan, options=RunOptions(auto_approve=True), level=7),  # unsigned
        RunInput(goal="pay", state=state),  # a state handed in as if carried
    ):
        handles.append(
            await harness.client.start_workflow(
                WORKFLOW_NAME,
                run_input,
                id=f"cron-{uuid.uuid4().hex[:8]}",
                task_queue=harness.task_queue,
                cron_schedule="@every 2s",
                result_type=RunResult,
            )
        )
    expected = ("may approve itself (auto_approve) only when", "started once: not on a Temporal cron schedule")
    for handle, refusal in zip(handles, expected, strict=True):
        # The schedule's later runs, each failed: polled for, since a loaded machine (CI's two test
        # processes) can take longer than the schedule's 2 s to start and fail one.
        deadline = asyncio.get_running_loop().time() + 30
        while True:
            runs = [r async for r in harness.client.list_workflows(f"WorkflowId = '{handle.id}'")]
            ended = [r for r in runs if r.status is not None and r.status.name == "FAILED"]
            later = [r for r in ended if r.run_id != handle.result_run_id]
            if later or asyncio.get_running_loop().time() > deadline:
                break
            await asyncio.sleep(0.5)
        assert later, runs  # the schedule did start later runs, and each failed at once
        for run in later:
            history = await harness.client.get_workflow_handle(handle.id, run_id=run.run_id).fetch_history()
            failure = history.events[-1].workflow_execution_failed_event_attributes.failure
            assert refusal in failure.message, failure.message
        await handle.terminate("test finished")  # stops the schedule
    assert harness.calls() == []  # and none of them paid


@pytest.mark.workflow
async def test_a_signed_decision_counts_once_and_on_its_own_run_only(harness):
    """Decisions read from a run's history, sent again to it or to a new run under the same id."""
    from temporalio.client import WorkflowUpdateFailedError

    from stratagem.client import decision_signer

    plan = {"goal": "pay acme", "steps": [{"id": "pay", "title": "Pay", "tool": "record", "args": {"label": "acme"}}]}
    first = await harness.start(plan, approvers=["dana"])
    await harness.wait_for(first, lambda s: bool(s.pending))
    signed = decision_signer("dana").sign(
        first.id, "approve", ApproveInput(by="dana", revision=1), await first.execution()
    )
    await first.handle.execute_update("approve", signed)
    assert (await first.result()).status is Phase.succeeded
    # The same signed approval, again: taken once.
    second_id = first.id
    swapped = {"goal": "pay mallory", "steps": [{**plan["steps"][0], "args": {"label": "mallory"}}]}
    again = await harness.start_input(
        RunInput(
            plan=PlanDraft.model_validate(swapped),
            author=Author(kind=AuthorKind.human, name="mallory"),
            options=RunOptions(approvers=["dana"]),
            run_id=second_id,
        )
    )
    await harness.wait_for(again, lambda s: bool(s.pending))
    try:
        await again.handle.execute_update("approve", signed)  # dana's, for the first run's execution
        raise AssertionError("a decision taken from another run's history was applied")
    except WorkflowUpdateFailedError as exc:
        assert "does not match this decision on this run" in str(exc.cause)
    assert [c["label"] for c in harness.calls()] == ["acme"]


@pytest.mark.workflow
async def test_an_old_signed_answer_sent_again_is_not_taken_for_a_question_asked_again(harness):
    """A question asked again (a repair) is answered anew: the first answer, read from the history
    and sent again with its valid signature, counts for nothing."""
    from temporalio.client import WorkflowUpdateFailedError

    from stratagem.client import decision_signer
    from stratagem.domain.run_types import DecisionKind, RepairAction, RepairInput

    schema = {"type": "object", "properties": {"vendor": {"type": "string"}}, "required": ["vendor"]}
    plan = {
        "goal": "onboard",
        "steps": [
            {"id": "ask", "title": "Vendor?", "kind": "human", "instructions": "Name it.", "answer_schema": schema},
            {
                "id": "register",
                "title": "Register",
                "tool": "fails_once",
                "args": {"label": "${ask.vendor}"},
                "depends_on": ["ask"],
            },
        ],
    }
    run = await harness.start(plan, approvers=["dana"])
    await harness.wait_for(run, lambda s: bool(s.pending))
    await run.approve(ApproveInput(by="dana", revision=1))
    await harness.wait_for(run, lambda s: any(p.kind is DecisionKind.human_answer for p in s.pending))
    old = decision_signer("dana").sign(
        run.id, "answer", AnswerInput(step_id="ask", answer={"vendor": "mallory"}, by="dana"), await run.execution()
    )
    await run.handle.execute_update("answer", old)
    await harness.wait_for(run, lambda s: any(p.kind is DecisionKind.repair for p in s.pending))
    await run.repair(RepairInput(by="dana", action=RepairAction.ask_again, step_id="ask"))
    await harness.wait_for(run, lambda s: any(p.kind is DecisionKind.human_answer for p in s.pending))
    try:
        await run.handle.execute_update("answer", old)
        raise AssertionError("an answer was taken twice")
    except WorkflowUpdateFailedError as exc:
        assert "this signed decision was taken already" in str(exc.cause)
    await run.answer(AnswerInput(step_id="ask", answer={"vendor": "acme"}, by="dana"))
    assert (await run.result()).status is Phase.succeeded
    assert [c["label"] for c in harness.calls() if c["tool"] == "fails_once"] == ["mallory", "acme"]


@pytest.mark.system
async def test_a_command_does_not_decide_with_a_key_its_own_home_just_made(dev_env, tmp_path):
    """Against a server its home did not start, the CLI used to host the run's workflow trusting
    its home's keys: while no worker held the run, `approve --by dana` from another machine, with a
    dana key made there on the spot, was taken. It no longer hosts there; the workers decide."""
    from stratagem.common.signing import Signer

    dana = Signer.generate("dana-ops")
    task_queue = f"cli-host-{uuid.uuid4().hex[:8]}"
    workspace = tmp_path / "ws"
    worker_env = {
        **os.environ,
        "TEMPORAL_ADDRESS": dev_env.client.service_client.config.target_host,
        "TEMPORAL_TASK_QUEUE": task_queue,
        "STRATAGEM_HOME": str(tmp_path / "worker-home"),
        "STRATAGEM_WORKSPACE": str(workspace),
        "STRATAGEM_APPROVER_KEYS": dana.public_line(),  # the deployment trusts the real dana-ops
    }

    def worker() -> subprocess.Popen[str]:
        command = [sys.executable, "-m", "stratagem.cli", "worker", "--tools", FIXTURE_TOOLS]
        return subprocess.Popen(command, cwd=ROOT, env=worker_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    first = worker()
    try:
        plan = PlanDraft.model_validate(PAY)
        started = await start_run(
            dev_env.client, RunInput(plan=plan, author=Author(kind=AuthorKind.human, name="ops")), task_queue=task_queue
        )
        run = get_run(dev_env.client, started.id)
        await wait_until(run, lambda s: bool(s.pending))
    finally:
        first.terminate()
        first.wait(timeout=30)
    # No worker holds the run now. Mallory, from her own machine and home, decides as dana-ops.
    mallory = {k: v for k, v in worker_env.items() if k not in ("STRATAGEM_APPROVER_KEYS", "STRATAGEM_HOME")} | {
        "STRATAGEM_HOME": str(tmp_path / "mallory-home"),
        "CLI_CWD": str(tmp_path),
    }
    forging = asyncio.create_task(acli("approve", run.id, "--revision", "1", "--by", "dana-ops", env=mallory))
    await asyncio.sleep(3)
    second = worker()  # the workers come back, and they judge it
    try:
        forged = await forging
        assert forged.returncode != 0
        assert "does not match" in forged.stderr or "does not trust" in forged.stderr, forged.stderr
        status = await wait_until(run, lambda s: bool(s.pending))
        assert status.phase is Phase.awaiting_approval and calls(workspace) == []
    finally:
        second.terminate()
        second.wait(timeout=30)
