"""What a new user reads (issue #15, item 12): outputs and transcripts for people, aligned lists,
whole error messages, every mistake of a configuration file at once, and a foreground server
whose log stays out of the terminal. Real processes against real Temporal servers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
import yaml
from conftest import keyed_home
from support.cli import TOOLS, acli, cli, one_line_error, write_plan
from support.ports import free_port_pair, wait_listening

from stratagem.server import is_listening

pytestmark = pytest.mark.system


async def test_outputs_and_transcripts_read_as_text_and_json_stays_for_machines(cli_env, tmp_path):
    env, _ = cli_env
    script = tmp_path / "executor.yaml"
    script.write_text(
        yaml.safe_dump(
            {"executor": {"greet": {"json": {"greeting": "Hallo Zoë", "team": ["Tomás", "Ana"]}}}}, allow_unicode=True
        )
    )
    plan = write_plan(
        tmp_path / "plan.yaml",
        {
            "goal": "greet",
            "steps": [
                {"id": "greet", "title": "Greet", "kind": "llm", "instructions": "Greet Zoë", "output_format": "json"}
            ],
        },
    )
    done = await acli(
        "run", *TOOLS, "--plan", plan, "--executor", f"scripted:{script}", "--auto-approve", "--id", "cli-zoe", env=env
    )
    assert done.returncode == 0, done.stderr
    assert '"greeting": "Hallo Zoë"' in done.stdout and "\\u00eb" not in done.stdout  # the result, as written

    shown = await acli("output", "cli-zoe", "greet", env=env)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith(
        '{\n  "greeting": "Hallo Zoë",\n  "team": [\n    "Tomás",'
    )  # indented, its own letters
    machine = await acli("output", "cli-zoe", "greet", "--json", env=env)
    assert machine.stdout.count("\n") == 1 and json.loads(machine.stdout) == {
        "greeting": "Hallo Zoë",
        "team": ["Tomás", "Ana"],
    }

    transcript = await acli("output", "cli-zoe", "greet", "--transcript", env=env)
    assert transcript.returncode == 0, transcript.stderr
    blocks = transcript.stdout.split("\n\n── ")
    assert transcript.stdout.startswith("── 1. system ──\n")
    assert [block.split(" ──")[0] for block in blocks[1:]] == ["2. user", "3. assistant"]
    assert "Greet Zoë" in blocks[1] and '{"greeting": ' in blocks[2]  # each message as it was sent
    messages = json.loads((await acli("output", "cli-zoe", "greet", "--transcript", "--json", env=env)).stdout)
    assert [m["role"] for m in messages] == ["system", "user", "assistant"]


async def test_list_columns_line_up_and_limit_is_documented(cli_env, tmp_path):
    env, _ = cli_env
    plan = write_plan(
        tmp_path / "plan.yaml",
        {"goal": "wait here", "steps": [{"id": "hi", "title": "hi", "tool": "record", "args": {"label": "hi"}}]},
    )
    for run_id in ("l1", "a-much-longer-run-id"):
        assert (await acli("run", *TOOLS, "--plan", plan, "--detach", "--id", run_id, env=env)).returncode == 0
    listed = await acli("list", env=env)
    lines = [line for line in listed.stdout.splitlines() if line.startswith(("l1 ", "a-much-longer-run-id "))]
    assert len(lines) == 2, listed.stdout
    # The goal starts in the same column on both lines, whatever the id's length.
    assert len({line.index("wait here") for line in lines}) == 1, lines
    assert len({line.index("20") for line in lines}) == 1, lines  # the start time too

    assert len(json.loads((await acli("list", "--limit", "1", "--json", env=env)).stdout)) == 1
    helped = await acli("list", "--help", env=env)
    # Both defaults are said: the newest 50 runs, and the whole inbox (argparse folds the line).
    said = " ".join(helped.stdout.split())
    assert "--limit N show at most N runs: the newest (default: 50)" in said
    assert "in the inbox the longest waiting (default: all)" in said
    refused = await acli("list", "--limit", "0", env=env)
    assert refused.returncode == 2 and "0 is not above zero" in refused.stderr and "Traceback" not in refused.stderr


async def test_a_broken_json_answer_shows_the_parser_s_whole_message(cli_env, tmp_path):
    env, _ = cli_env
    broken = await acli("answer", "any-run", "terms", '{"status": "confirmed', "--json-value", env=env)
    one_line_error(broken, "the answer is not JSON: Unterminated string starting at: line 1, column 12")


def test_a_configuration_file_reports_every_mistake_in_one_line(tmp_path):
    config = tmp_path / "stratagem.yaml"
    config.write_text("planner: gpt-4.1\nbudget: {tokens: -1}\ncolour: blue\n")
    plan = write_plan(
        tmp_path / "plan.yaml",
        {"goal": "g", "steps": [{"id": "hi", "title": "hi", "tool": "record", "args": {"label": "hi"}}]},
    )
    env = {
        **os.environ,
        "STRATAGEM_HOME": keyed_home(tmp_path / "home"),
        "TEMPORAL_ADDRESS": "127.0.0.1:1",
        "CLI_CWD": str(tmp_path),
    }
    done = cli("run", *TOOLS, "--plan", plan, "--config", str(config), "--detach", env=env)
    one_line_error(done, "has 3 mistakes: planner: model 'gpt-4.1' is not of the form provider:name")
    assert (
        "budget.tokens: Input should be greater than or equal to 1; colour: Extra inputs are not permitted"
        in done.stderr
    )
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_foreground_server_keeps_its_log_out_of_the_terminal(tmp_path):
    """`stratagem server &` once filled the user's shell with the Temporal server's warnings."""
    home = tmp_path / "home"
    port = free_port_pair()
    env = {**os.environ, "STRATAGEM_HOME": str(home), "TEMPORAL_ADDRESS": f"127.0.0.1:{port}"}
    server = subprocess.Popen(
        [sys.executable, "-m", "stratagem.cli", "server"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_listening(port)
    finally:
        server.send_signal(signal.SIGINT)
        out, _ = server.communicate(timeout=30)
    assert not is_listening(f"127.0.0.1:{port}")
    assert out.splitlines() == [
        f"Temporal server: 127.0.0.1:{port}  (data: {home / 'temporal.db'})",
        f"Web UI:          http://localhost:{port + 1000}",
        f"log:             {home / 'server.log'}",
    ], out
    assert "Temporal Server:" in (home / "server.log").read_text()  # the server's own banner, in its log
