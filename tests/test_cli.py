"""The `stratagem` command line, run as a real process against real Temporal servers."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest
import yaml
from conftest import keyed_home, session_approver_keys
from support import FIXTURE_TOOLS
from support.cli import TOOLS, acli, cli, one_line_error, write_plan
from support.plans import step
from support.ports import free_port_pair, wait_listening
from support.terminal import Terminal, terminal_run_id

from stratagem.client import get_run

pytestmark = pytest.mark.system


async def test_detached_run_approved_from_another_terminal(cli_env, tmp_path):
    env, harness = cli_env
    plan = write_plan(tmp_path / "plan.yaml", {"goal": "say hi", "steps": [step("hi", "record", label="hi")]})
    started = await acli(
        "run", *TOOLS, "--plan", plan, "--detach", "--json", "--id", "cli-approve", "--by", "alice", env=env
    )
    assert started.returncode == 0, started.stderr
    assert json.loads(started.stdout) == {"run_id": "cli-approve"}

    status = await acli("status", "cli-approve", "--json", env=env)
    assert json.loads(status.stdout)["phase"] == "awaiting_approval"
    assert harness.calls() == []

    one_line_error(
        await acli("approve", "cli-approve", "--revision", "3", "--by", "bob", env=env),
        "there is no revision 3: the current plan is revision 1",
    )
    approved = await acli(
        "approve", "cli-approve", "--revision", "1", "--by", "bob", "--comment", "fine", "--json", env=env
    )
    assert approved.returncode == 0 and json.loads(approved.stdout)["phase"] == "running"

    waited = await acli("wait", "cli-approve", "--json", env=env)
    assert waited.returncode == 0
    assert json.loads(waited.stdout)["outputs"] == {"hi": "hi"}

    audit = await acli("audit", "cli-approve", env=env)
    records = [json.loads(line) for line in audit.stdout.splitlines()]
    assert {"type": "decision", "by": "bob", "comment": "fine"}.items() <= next(
        r for r in records if r["type"] == "decision"
    ).items()
    assert records[-1]["kind"] == "run_succeeded"

    listed = await acli("list", "--json", env=env)
    assert any(r["run_id"] == "cli-approve" and r["goal"] == "say hi" for r in json.loads(listed.stdout))


async def test_rejected_and_cancelled_runs_exit_non_zero(cli_env, tmp_path):
    env, _ = cli_env
    plan = write_plan(tmp_path / "plan.yaml", {"goal": "g", "steps": [step("hi", "record", label="hi")]})
    await acli("run", *TOOLS, "--plan", plan, "--detach", "--id", "cli-reject", env=env)
    await acli("run", *TOOLS, "--plan", plan, "--detach", "--id", "cli-cancel", env=env)
    assert (await acli("reject", "cli-reject", "--reason", "not now", "--by", "carol", env=env)).returncode == 0
    waited = await acli("wait", "cli-reject", env=env)
    assert waited.returncode == 1 and "rejected by carol: not now" in waited.stdout
    assert (await acli("cancel", "cli-cancel", env=env)).returncode == 0
    waited = await acli("wait", "cli-cancel", "--json", env=env)
    assert waited.returncode == 1 and json.loads(waited.stdout)["status"] == "cancelled"


async def test_human_step_answered_from_the_command_line(cli_env, tmp_path):
    env, _ = cli_env
    plan = write_plan(
        tmp_path / "plan.yaml",
        {
            "goal": "ask",
            "steps": [
                {
                    "id": "terms",
                    "title": "Terms",
                    "kind": "human",
                    "instructions": "Payment terms?",
                    "answer_schema": {
                        "type": "object",
                        "properties": {"days": {"type": "integer"}},
                        "required": ["days"],
                    },
                }
            ],
        },
    )
    await acli("run", *TOOLS, "--plan", plan, "--detach", "--auto-approve", "--id", "cli-human", env=env)
    for _ in range(100):
        status = json.loads((await acli("status", "cli-human", "--json", env=env)).stdout)
        if status["pending"]:
            break
        time.sleep(0.1)
    assert status["pending"][0]["prompt"] == "Payment terms?"
    one_line_error(await acli("answer", "cli-human", "nope", "x", env=env), "step 'nope' is not waiting for an answer")
    # A typed step refuses an answer of the wrong shape, and keeps waiting for a right one.
    wrong = await acli("answer", "cli-human", "terms", "ok", env=env)
    one_line_error(wrong, "step 'terms' refused the answer: the answer: 'ok' is not of type 'object'")
    status = json.loads((await acli("status", "cli-human", "--json", env=env)).stdout)
    assert [p["step_id"] for p in status["pending"]] == ["terms"] and status["phase"] == "running"
    assert (await acli("answer", "cli-human", "terms", '{"days": 30}', "--json-value", env=env)).returncode == 0
    waited = await acli("wait", "cli-human", "--json", env=env)
    assert json.loads(waited.stdout)["outputs"] == {"terms": {"days": 30}}


async def test_user_errors_are_one_line(cli_env, tmp_path):
    env, _ = cli_env
    one_line_error(await acli("status", "no-such-run", env=env), "no run with id 'no-such-run'")
    cyclic = write_plan(
        tmp_path / "bad.yaml",
        {"goal": "g", "steps": [step("a", "record", ["b"], label="x"), step("b", "record", ["a"], label="x")]},
    )
    one_line_error(await acli("run", *TOOLS, "--plan", cyclic, "--detach", env=env), "dependency cycle: a -> b -> a")
    (tmp_path / "broken.yaml").write_text("goal: [unclosed\n")
    one_line_error(await acli("run", "--plan", str(tmp_path / "broken.yaml"), env=env), "is not valid YAML at line")
    one_line_error(await acli("run", "--plan", str(tmp_path / "missing.yaml"), env=env), "does not exist")
    one_line_error(await acli("run", "make money", env=env), "a goal needs a planner model")
    unreachable = {**env, "TEMPORAL_ADDRESS": "127.0.0.1:1"}
    one_line_error(await acli("status", "x", env=unreachable), "no Temporal server is reachable at 127.0.0.1:1")


def test_embedded_server_starts_itself_and_state_survives_a_restart(tmp_path):
    port = free_port_pair()
    home = tmp_path / "home"
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": f"127.0.0.1:{port}",
        "STRATAGEM_HOME": str(home),
        "STRATAGEM_WORKSPACE": str(tmp_path / "ws"),
        "TEMPORAL_TASK_QUEUE": "cli-embedded",
        "CLI_CWD": str(tmp_path),
    }
    plan = write_plan(
        tmp_path / "plan.yaml",
        {"goal": "persist", "steps": [step("save", "write_file", path="out.txt", content="kept")]},
    )
    pids: list[int] = []
    server: subprocess.Popen[str] | None = None
    try:
        started = cli("run", "--plan", plan, "--detach", "--id", "durable", env=env)
        assert started.returncode == 0, started.stderr
        assert "started the embedded Temporal server" in started.stdout
        pids += [int(p) for p in re.findall(r"pid (\d+)", started.stdout)]
        assert (home / "temporal.db").exists()
        for _ in range(300):  # the background worker needs a moment to start
            if json.loads(cli("status", "durable", "--json", env=env).stdout)["phase"] == "awaiting_approval":
                break
            time.sleep(0.1)
        else:
            raise AssertionError("the run never reached the review gate")

        os.kill(int((home / "server.pid").read_text()), signal.SIGKILL)  # the server dies mid-run
        time.sleep(0.5)
        one_line_error(cli("status", "durable", env=env), "no Temporal server is reachable")

        server = subprocess.Popen(
            [sys.executable, "-m", "stratagem.cli", "server"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        wait_listening(port)
        assert cli("approve", "durable", "--revision", "1", "--by", "ops", env=env).returncode == 0
        waited = cli("wait", "durable", "--json", env=env, timeout=120)
        assert waited.returncode == 0, waited.stdout + waited.stderr
        assert (tmp_path / "ws" / "out.txt").read_text() == "kept"
    finally:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if server is not None:
            server.send_signal(signal.SIGINT)
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                server.kill()


async def test_terminal_review_shows_the_plan_and_takes_an_edit(cli_env, tmp_path):
    """In a terminal, `run` asks approve/reject/edit; edit opens $EDITOR on the plan."""
    env, harness = cli_env
    plan = write_plan(tmp_path / "plan.yaml", {"goal": "greet", "steps": [step("hi", "record", label="draft")]})
    editor = tmp_path / "editor.py"
    editor.write_text(
        "import sys, pathlib\n"
        "p = pathlib.Path(sys.argv[1])\n"
        "text = p.read_text()\n"
        "assert text.startswith('# Revision 1 of run') and \"reason: ''\" in text\n"
        "p.write_text(text.replace('label: draft', 'label: edited by a person').replace(\"reason: ''\", 'reason: a warmer greeting'))\n"
    )
    terminal = Terminal(
        ["run", *TOOLS, "--plan", plan, "--by", "erin"],
        {**env, "EDITOR": f"{sys.executable} {editor}", "COLUMNS": "200"},
        tmp_path,
    )
    try:
        await terminal.expect("approve revision 1?")
        assert "Plan revision 1: greet" in terminal.text and "record" in terminal.text
        terminal.type("e\n")
        await terminal.expect("approve revision 2?")
        terminal.type("a\n")
        await terminal.expect("succeeded")
        assert await terminal.exit_status() == 0
    finally:
        terminal.close()
    assert [c["label"] for c in harness.calls()] == ["edited by a person"]
    ledger = await get_run(harness.client, terminal_run_id(terminal.text)).ledger()
    assert ledger.revision(2).reason == "a warmer greeting"  # the editor's reason, not a stock phrase


# A human step whose answer the next step uses.
DAYS = {"type": "object", "properties": {"days": {"type": "integer"}}, "required": ["days"]}
TERMS = {
    "goal": "terms",
    "steps": [
        # Typed: a later step reads a field of the answer (an untyped one may be a sentence).
        {"id": "terms", "title": "Terms", "kind": "human", "instructions": "Which terms?", "answer_schema": DAYS},
        step("log", "record", ["terms"], label="${terms.days} days"),
    ],
}


async def test_terminal_answers_json_and_survives_a_missing_editor(cli_env, tmp_path):
    env, _ = cli_env
    plan = write_plan(tmp_path / "plan.yaml", TERMS)
    terminal = Terminal(
        ["run", *TOOLS, "--plan", plan], {**env, "EDITOR": "/nonexistent/editor", "COLUMNS": "200"}, tmp_path
    )
    try:
        await terminal.expect("approve revision 1?")
        terminal.type("e\n")
        await terminal.expect("cannot start the editor '/nonexistent/editor'")
        await terminal.expect("approve revision 1?")  # asked again; nothing was lost
        terminal.type("a\n")
        await terminal.expect("terms asks: Which terms?")
        terminal.type('{"days": 30}\n')
        await terminal.expect("log: 30 days")
        assert await terminal.exit_status() == 0
        assert "Traceback" not in terminal.text
    finally:
        terminal.close()


async def test_a_typed_answer_is_asked_field_by_field_at_the_terminal(cli_env, tmp_path):
    env, _ = cli_env
    schema = {
        "type": "object",
        "properties": {
            "status": {"enum": ["ok", "change"], "title": "Decision", "description": "ok keeps the terms"},
            "days": {"type": "integer", "minimum": 1},
        },
        "required": ["status"],
    }
    typed = {
        "goal": "terms",
        "steps": [
            {**TERMS["steps"][0], "answer_schema": schema},
            step("log", "record", ["terms"], label="${terms.status} after ${terms.days} days"),
        ],
    }
    plan = write_plan(tmp_path / "plan.yaml", typed)
    terminal = Terminal(["run", *TOOLS, "--plan", plan, "--auto-approve"], {**env, "COLUMNS": "200"}, tmp_path)
    try:
        await terminal.expect("(the answer has the fields status, days: type each, or the whole answer as JSON")
        # The schema's title and description are the question's words.
        await terminal.expect("Decision [status] (ok / change) — ok keeps the terms: ")
        terminal.type("maybe\n")  # not one of the choices: asked again at once
        await terminal.expect("error: 'maybe' is not one of ok / change; try again")
        await terminal.expect("Decision [status] (ok / change) — ok keeps the terms: ", times=2)
        terminal.type("ok\n")
        await terminal.expect("days (integer, optional): ")
        terminal.type("thirty\n")
        await terminal.expect("error: 'thirty' is not a whole number; try again")
        await terminal.expect("days (integer, optional): ", times=2)
        terminal.type("0\n")
        # Its bounds are checked here, before the run sees it: only that field is asked again.
        await terminal.expect("error: 'days': 0 is less than the minimum of 1; try again")
        await terminal.expect("days (integer, optional): ", times=3)
        terminal.type("30\n")
        await terminal.expect("log: ok after 30 days")
        assert await terminal.exit_status() == 0
        assert "Traceback" not in terminal.text
        assert terminal.text.count("Decision [status]") == 2  # status was not asked again for days
        assert terminal.text.count("Which terms?") == 2  # in the plan, and asked: no event line repeats it
    finally:
        terminal.close()


async def test_one_ctrl_c_stops_following_and_the_run_goes_on(cli_env, tmp_path):
    env, _ = cli_env
    plan = write_plan(tmp_path / "plan.yaml", {"goal": "g", "steps": [step("hi", "record", label="hi")]})
    terminal = Terminal(["run", *TOOLS, "--plan", plan, "--id", "cli-interrupt"], {**env, "COLUMNS": "200"}, tmp_path)
    try:
        await terminal.expect("approve revision 1?")
        terminal.type("\x03")
        await terminal.expect("run cli-interrupt goes on", seconds=60)
        assert await terminal.exit_status() == 130
        assert "Traceback" not in terminal.text
    finally:
        terminal.close()
    status = await acli("status", "cli-interrupt", "--json", env=env)
    assert json.loads(status.stdout)["phase"] == "awaiting_approval"


async def test_wait_at_a_terminal_asks_what_run_left_open(cli_env, tmp_path):
    """After `l` (later) or Ctrl-C in `run`'s review, `stratagem wait RUN` at a terminal asks the
    same questions as `run`; without a terminal it only prints the commands (tested above)."""
    env, harness = cli_env
    plan = write_plan(tmp_path / "plan.yaml", TERMS)
    terminal = Terminal(["run", *TOOLS, "--plan", plan, "--id", "cli-later"], {**env, "COLUMNS": "200"}, tmp_path)
    try:
        await terminal.expect("approve revision 1?")
        terminal.type("l\n")
        await terminal.expect("later: still following run cli-later")
        await terminal.expect("stratagem approve cli-later --revision 1")  # the command to decide instead
        terminal.type("\x03")
        await terminal.expect(
            "Follow it again (at a terminal, it asks what is still open) with: stratagem wait cli-later"
        )
        assert await terminal.exit_status() == 130
    finally:
        terminal.close()

    terminal = Terminal(["wait", "cli-later", "--by", "wendy"], {**env, "COLUMNS": "200"}, tmp_path)
    try:
        await terminal.expect("approve revision 1?")
        assert "Plan revision 1: terms" in terminal.text  # the plan, as `run` showed it
        terminal.type("a\n")
        await terminal.expect("terms asks: Which terms?")
        terminal.type('{"days": 30\n')  # a broken answer is explained in full and asked again
        await terminal.expect("not valid JSON: Expecting ',' delimiter: line 1, column 12; try again")
        await terminal.expect("terms asks: Which terms?", seconds=30, times=2)
        terminal.type('{"days": 30}\n')
        await terminal.expect("log: 30 days")
        assert await terminal.exit_status() == 0
        assert "Traceback" not in terminal.text
    finally:
        terminal.close()
    ledger = await get_run(harness.client, "cli-later").ledger()
    assert [(d.action.value, d.by) for d in ledger.decisions][:1] == [("approve", "wendy")]
    assert ledger.steps["terms"].output == {"days": 30}


async def test_a_question_decided_elsewhere_is_dropped(cli_env, tmp_path):
    env, _ = cli_env
    plan = write_plan(tmp_path / "plan.yaml", {"goal": "g", "steps": [step("hi", "record", label="hi")]})
    terminal = Terminal(["run", *TOOLS, "--plan", plan, "--id", "cli-elsewhere"], {**env, "COLUMNS": "200"}, tmp_path)
    try:
        await terminal.expect("approve revision 1?")
        assert (await acli("approve", "cli-elsewhere", "--by", "bob", env=env)).returncode == 0
        await terminal.expect("(decided elsewhere)")
        await terminal.expect("succeeded")
        assert await terminal.exit_status() == 0
    finally:
        terminal.close()


async def test_decisions_on_finished_runs_and_bad_models_are_refused_in_one_line(cli_env, tmp_path):
    env, _ = cli_env
    plan = write_plan(tmp_path / "plan.yaml", {"goal": "g", "steps": [step("hi", "record", label="hi")]})
    assert (await acli("run", *TOOLS, "--plan", plan, "--auto-approve", "--id", "cli-done", env=env)).returncode == 0
    one_line_error(
        await acli("approve", "cli-done", env=env), "run cli-done has ended (completed); it takes no decisions"
    )
    one_line_error(await acli("cancel", "cli-done", env=env), "run cli-done has already finished (completed)")
    one_line_error(await acli("run", "a goal", "--planner", "scripted:nope.yaml", env=env), "scripted model file")
    one_line_error(await acli("run", "a goal", "--planner", "nosuch:model", env=env), "unknown model provider 'nosuch'")
    listed = json.loads((await acli("list", "--json", env=env)).stdout)
    assert not any(r["run_id"].startswith("cli-g") for r in listed)  # nothing was started for the bad models


async def test_a_goal_is_planned_by_the_planner_model(cli_env, tmp_path):
    env, harness = cli_env
    plan = {
        "goal": "greet ada",
        "steps": [
            step("profile", "fetch_profile", user="ada"),
            step("hi", "greet", ["profile"], name="${profile.name}"),
        ],
    }
    (tmp_path / "planner.yaml").write_text(yaml.safe_dump({"planner": [{"plan": plan}]}))
    done = await acli(
        "run", *TOOLS, "greet ada", "--planner", "scripted:planner.yaml", "--auto-approve", "--json", env=env
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["status"] == "succeeded" and result["outputs"] == {"hi": "Hello, Ada!"}


async def test_without_a_terminal_run_waits_for_a_decision_from_elsewhere(cli_env, tmp_path):
    import asyncio

    env, _ = cli_env
    plan = write_plan(tmp_path / "plan.yaml", {"goal": "g", "steps": [step("hi", "record", label="hi")]})
    attached = asyncio.create_task(acli("run", *TOOLS, "--plan", plan, "--id", "cli-attached", env=env))
    for _ in range(200):
        status = await acli("status", "cli-attached", "--json", env=env)
        if status.returncode == 0 and json.loads(status.stdout)["phase"] == "awaiting_approval":
            break
        await asyncio.sleep(0.1)
    assert not attached.done()  # it waits, it does not decide by itself
    assert (await acli("approve", "cli-attached", "--by", "bob", env=env)).returncode == 0
    done = await attached
    assert done.returncode == 0
    assert "stratagem approve cli-attached --revision 1" in done.stdout  # it told the user how to decide
    assert "plan approved by bob" in done.stdout


async def test_a_command_answers_for_a_run_with_local_steps_and_takes_no_activity(dev_env, tmp_path):
    """With no worker running, a command hosts the workflow itself: it replays a history that
    holds local activities' results (a local tool step) to answer, and runs no activity."""
    import asyncio
    import uuid

    from stratagem.client import start_run
    from stratagem.domain.plan import Author, AuthorKind, PlanDraft
    from stratagem.domain.run_types import RunInput, RunOptions
    from stratagem.io.store import FileStore
    from stratagem.tools import ToolRegistry
    from stratagem.worker import build_worker

    queue = f"host-{uuid.uuid4().hex[:8]}"
    workspace = tmp_path / "ws"

    def run_input(plan: dict, **options) -> RunInput:
        return RunInput(
            plan=PlanDraft.model_validate(plan),
            author=Author(kind=AuthorKind.human, name="ada"),
            options=RunOptions(**options),
        )

    async with build_worker(
        dev_env.client,
        task_queue=queue,
        registry=ToolRegistry.from_modules([FIXTURE_TOOLS]),
        workspace=workspace,
        store=FileStore(tmp_path / "store"),
    ):
        plan = {
            "goal": "fast",
            "steps": [step("a", "quick", label="fail once"), step("b", "record", ["a"], label="${a}")],
        }
        finished = await start_run(dev_env.client, run_input(plan, auto_approve=True), task_queue=queue)
        assert (await finished.result()).outputs == {"b": "FAIL ONCE"}
        waiting = await start_run(
            dev_env.client,
            run_input({"goal": "later", "steps": [step("c", "record", label="later")]}),
            task_queue=queue,
        )
        while (await waiting.status()).phase.value != "awaiting_approval":
            await asyncio.sleep(0.05)
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": dev_env.client.service_client.config.target_host,
        "TEMPORAL_TASK_QUEUE": queue,
        "STRATAGEM_HOME": keyed_home(tmp_path / "home"),
        "CLI_CWD": str(tmp_path),
        # A server this home did not start: the CLI hosts the workflow only with the keys configured.
        **session_approver_keys(),
    }
    shown = await acli("status", finished.id, "--json", env=env)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["phase"] == "succeeded"
    # Approved from here, the step is scheduled and waits for a worker: this process never runs it.
    approved = await acli("approve", waiting.id, "--by", "ada", env=env)
    assert approved.returncode == 0, approved.stderr
    await asyncio.sleep(1)
    history = await waiting.handle.fetch_history()
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    started = [e for e in history.events if e.HasField("activity_task_started_event_attributes")]
    # The catalogue was read in a local activity of the worker's first task (level 3).
    assert scheduled == ["stratagem.run_tool"] and started == []
    await waiting.handle.terminate(reason="test finished")


def test_runs_started_from_two_folders_write_into_their_own_workspaces(tmp_path):
    """A new user's report: the second folder's run restarted the background worker, and the first
    run's files then landed in the second folder's workspace."""
    port = free_port_pair()
    folders = [tmp_path / "one", tmp_path / "two"]
    for folder in folders:
        folder.mkdir()
    env = {
        **{k: v for k, v in os.environ.items() if k != "STRATAGEM_WORKSPACE"},
        "TEMPORAL_ADDRESS": f"127.0.0.1:{port}",
        "STRATAGEM_HOME": keyed_home(tmp_path / "home"),
        "TEMPORAL_TASK_QUEUE": "cli-two-folders",
    }
    pids: list[int] = []
    try:
        for folder, run_id, extra in [(folders[0], "from-one", []), (folders[1], "from-two", ["--auto-approve"])]:
            plan = write_plan(
                folder / "plan.yaml",
                {"goal": "g", "steps": [step("save", "write_file", path="out.txt", content=run_id)]},
            )
            started = cli(
                "run", "--plan", plan, "--detach", "--id", run_id, *extra, env={**env, "CLI_CWD": str(folder)}
            )
            assert started.returncode == 0, started.stderr
            pids += [int(p) for p in re.findall(r"pid (\d+)", started.stdout)]
        assert cli("wait", "from-two", "--json", env=env, timeout=120).returncode == 0
        for _ in range(600):  # the worker the second run restarted may have held the first's catalogue read
            if json.loads(cli("status", "from-one", "--json", env=env).stdout)["phase"] == "awaiting_approval":
                break
            time.sleep(0.1)
        assert cli("approve", "from-one", "--revision", "1", "--by", "ops", env=env).returncode == 0
        waited = cli("wait", "from-one", "--json", env=env, timeout=120)
        assert waited.returncode == 0, waited.stdout + waited.stderr
        assert (folders[0] / "workspace" / "out.txt").read_text() == "from-one"
        assert (folders[1] / "workspace" / "out.txt").read_text() == "from-two"
        status = cli("status", "from-one", env=env)
        assert f"workspace: {folders[0] / 'workspace'}" in status.stdout
    finally:
        home = tmp_path / "home"
        if (home / "worker.json").exists():  # the worker a later command may have restarted
            pids.append(int(json.loads((home / "worker.json").read_text())["pid"]))
        if (home / "server.pid").exists():
            pids.append(int((home / "server.pid").read_text()))
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


async def test_following_a_run_shows_what_a_new_revision_changed(cli_env, tmp_path):
    from stratagem.domain.plan import PlanDraft
    from stratagem.domain.run_types import RejectInput, ReviseInput

    env, harness = cli_env
    plan = {"goal": "order", "steps": [step("order", "record", label="laptop, monitor, dock")]}
    run = await harness.start(plan)
    await harness.wait_for(run, lambda s: bool(s.pending))
    edited = {"goal": "order", "steps": [step("order", "record", label="laptop, monitor")]}
    await run.revise(ReviseInput(by="ann", plan=PlanDraft.model_validate(edited), revision=1, reason="no dock"))
    await harness.wait_for(run, lambda s: s.revision == 2)
    await run.reject(RejectInput(by="ann", reason="done looking"))
    followed = await acli("wait", run.id, env=env)
    assert (
        "from revision 1 by human:alice" in followed.stdout and "to revision 2 by human:ann: no dock" in followed.stdout
    )
    assert "args.label: laptop, monitor, dock → laptop, monitor" in followed.stdout


def test_a_home_never_silently_uses_a_server_it_did_not_start(tmp_path):
    """Something (another home's server, or anything) listens on the default port; a fresh home's
    `run` must say so instead of sharing it."""
    listener = None
    if not is_listening_on(7233):
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 7233))
        listener.listen()
    try:
        env = {k: v for k, v in os.environ.items() if k not in ("TEMPORAL_ADDRESS", "TEMPORAL_PROFILE")}
        env.update(STRATAGEM_HOME=str(tmp_path / "new-home"), CLI_CWD=str(tmp_path))
        plan = write_plan(
            tmp_path / "plan.yaml", {"goal": "g", "steps": [step("s", "write_file", path="x", content="x")]}
        )
        done = cli("run", "--plan", plan, "--detach", env=env)
        one_line_error(done, "a Temporal server that this STRATAGEM_HOME")
        assert "set TEMPORAL_ADDRESS=localhost:7233" in done.stderr
        assert not (tmp_path / "new-home" / "temporal.db").exists()
    finally:
        if listener is not None:
            listener.close()


def is_listening_on(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) == 0


async def wait_status(run_id: str, env: dict[str, str], check, tries: int = 150) -> dict:
    for _ in range(tries):
        status = json.loads((await acli("status", run_id, "--json", env=env)).stdout)
        if check(status):
            return status
        time.sleep(0.1)
    raise AssertionError(f"{run_id} never got there: {status}")


async def test_a_failed_step_is_repaired_and_the_run_forked_from_the_command_line(cli_env, tmp_path):
    env, harness = cli_env
    plan = {
        "goal": "repair me",
        "steps": [
            step("a", "fails_once", label="A"),
            step("b", "record", ["a"], label="after ${a}"),
            step("c", "record", label="C"),
        ],
    }
    path = write_plan(tmp_path / "plan.yaml", plan)
    await acli("run", *TOOLS, "--plan", path, "--detach", "--id", "cli-repair", env=env)
    assert (await acli("approve", "cli-repair", "--by", "bob", env=env)).returncode == 0
    status = await wait_status("cli-repair", env, lambda s: s["phase"] == "awaiting_repair")
    assert [(p["kind"], p["step_id"]) for p in status["pending"]] == [("repair", "a")]

    one_line_error(await acli("skip", "cli-repair", "a", "--output", "{oops", env=env), "--output: not JSON")
    one_line_error(await acli("retry", "cli-repair", "b", env=env), "step 'b' did not fail; the failed steps are: a")
    one_line_error(await acli("retry", "cli-repair", "a", "--args", "[1]", env=env), "--args takes a JSON object")
    retried = await acli("retry", "cli-repair", "a", "--by", "bob", "--json", env=env)
    assert retried.returncode == 0 and json.loads(retried.stdout)["phase"] == "running"
    waited = await acli("wait", "cli-repair", "--json", env=env)
    assert json.loads(waited.stdout)["outputs"] == {"b": "after A", "c": "C"}

    # A fork with one step changed runs that step and what depends on it; c is carried over.
    edited = write_plan(
        tmp_path / "edited.yaml", {**plan, "steps": [step("a", "record", label="A2"), *plan["steps"][1:]]}
    )
    forked = await acli("fork", "cli-repair", "--plan", edited, "--id", "cli-fork", "--detach", env=env)
    assert forked.returncode == 0, forked.stderr
    assert "carries c; runs again: a, b" in forked.stderr + forked.stdout
    assert (await acli("approve", "cli-fork", "--by", "bob", env=env)).returncode == 0
    waited = await acli("wait", "cli-fork", "--json", env=env)
    assert json.loads(waited.stdout)["outputs"] == {"b": "after A2", "c": "C"}
    labels = [c["label"] for c in harness.calls() if c["tool"] == "record"]
    assert sorted(labels[:2]) == ["C", "after A"] and labels[2:] == ["A2", "after A2"]  # c never ran again

    audit = [json.loads(line) for line in (await acli("audit", "cli-repair", env=env)).stdout.splitlines()]
    assert {"type": "fork", "run_id": "cli-fork", "revision": 1}.items() <= audit[-1].items()
    fork_audit = [json.loads(line) for line in (await acli("audit", "cli-fork", env=env)).stdout.splitlines()]
    assert any(r.get("kind") == "step_carried" and r.get("step_id") == "c" for r in fork_audit)
    one_line_error(await acli("fork", "cli-repair", "--revision", "9", env=env), "there is no revision 9")


async def test_a_tool_call_is_approved_from_the_command_line(cli_env, tmp_path):
    env, harness = cli_env
    script = tmp_path / "wire.yaml"
    script.write_text(
        yaml.safe_dump(
            {
                "executor": {
                    "settle": [{"call": {"tool": "wire_funds", "args": {"amount": 7, "to": "acme"}}}, {"text": "ok"}]
                }
            }
        )
    )
    plan = {
        "goal": "g",
        "steps": [{"id": "settle", "title": "settle", "kind": "llm", "instructions": "pay", "tools": ["wire_funds"]}],
    }
    path = write_plan(tmp_path / "plan.yaml", plan)
    started = await acli(
        "run", *TOOLS, "--plan", path, "--executor", f"scripted:{script}", "--detach", "--id", "cli-call", env=env
    )
    assert started.returncode == 0, started.stderr
    assert (await acli("approve", "cli-call", "--by", "bob", env=env)).returncode == 0
    status = await wait_status("cli-call", env, lambda s: any(p["kind"] == "tool_call_approval" for p in s["pending"]))
    call = status["pending"][0]["call"]
    assert call["tool"] == "wire_funds" and json.loads(call["arguments"]) == {"amount": 7, "to": "acme"}
    one_line_error(await acli("approve", "cli-call", "--call", "0", env=env), "--call needs --step")
    assert harness.calls() == []
    approved = await acli("approve", "cli-call", "--step", "settle", "--call", call["call_id"], "--by", "dana", env=env)
    assert approved.returncode == 0, approved.stderr
    # What it approved is shown in full, and bound to by its digest (the run would refuse another call).
    assert 'approving wire_funds({"amount": 7, "to": "acme"})' in approved.stdout
    waited = await acli("wait", "cli-call", "--json", env=env)
    assert json.loads(waited.stdout)["outputs"] == {"settle": "ok"}
    assert [c["tool"] for c in harness.calls()] == ["wire_funds"]
