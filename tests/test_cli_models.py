"""The command line's model options: tiers, joint mode, budgets, the configuration file."""

from __future__ import annotations

import asyncio
import json

import pytest
import yaml
from support.cli import TOOLS, acli, one_line_error, write_plan
from support.plans import step

from stratagem.cli.decisions import parse_limits
from stratagem.cli.errors import CliError

KEYLESS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL", "STRATAGEM_CONFIG")


def llm(id: str, **fields) -> dict:
    return {"id": id, "title": id, "kind": "llm", "instructions": f"do {id}", **fields}


async def status_json(run_id: str, env: dict) -> dict:
    done = await acli("status", run_id, "--json", env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.system
async def test_a_budget_pauses_the_run_and_the_command_line_raises_it(cli_env, tmp_path):
    env, _ = cli_env
    usage = {"usage": {"input_tokens": 70, "output_tokens": 30}}
    (tmp_path / "exec.yaml").write_text(
        yaml.safe_dump({"executor": {"a": {"text": "A", **usage}, "b": {"text": "B", **usage}}})
    )
    plan = write_plan(tmp_path / "plan.yaml", {"goal": "g", "steps": [llm("a"), llm("b", depends_on=["a"])]})
    started = await acli(
        "run",
        *TOOLS,
        "--plan",
        plan,
        "--executor",
        "scripted:exec.yaml",
        "--budget-calls",
        "1",
        "--auto-approve",
        "--detach",
        "--id",
        "cli-budget",
        env=env,
    )
    assert started.returncode == 0, started.stderr
    for _ in range(100):
        status = await status_json("cli-budget", env)
        if status["pending"]:
            break
        await asyncio.sleep(0.1)
    assert status["pending"][0]["kind"] == "budget"
    assert status["usage"]["calls"] == 1 and status["usage"]["input_tokens"] == 70
    assert status["budget"] == {"tokens": None, "cost_usd": None, "model_calls": 1, "wall_clock_seconds": None}

    shown = await acli("status", "cli-budget", env=env)
    assert "paused: the model-call budget is used up (1 of 1)" in shown.stdout
    assert "stratagem budget cli-budget --tokens N" in shown.stdout
    assert "model usage: 1 call, 70 in / 30 out tokens, $0.0000" in shown.stdout

    one_line_error(await acli("budget", "cli-budget", env=env), "give a limit to raise")
    one_line_error(
        await acli("budget", "cli-budget", "--calls", "1", env=env), "leaves no room: the run has used 1 already"
    )
    one_line_error(
        await acli("budget", "cli-budget", "--calls", "3", "--stop", env=env), "--stop ends the run; give it no limits"
    )
    raised = await acli("budget", "cli-budget", "--calls", "3", "--by", "dana", "--json", env=env)
    assert raised.returncode == 0, raised.stderr
    assert json.loads(raised.stdout)["message"] == "budget changed"

    waited = await acli("wait", "cli-budget", "--json", env=env)
    assert json.loads(waited.stdout)["outputs"] == {"b": "B"}
    audit = [json.loads(line) for line in (await acli("audit", "cli-budget", env=env)).stdout.splitlines()]
    assert [r["step_id"] for r in audit if r["type"] == "model_call"] == ["a", "b"]
    assert any(r["type"] == "decision" and r["action"] == "budget" and r["by"] == "dana" for r in audit)


@pytest.mark.system
async def test_joint_mode_and_tiers_from_the_command_line(cli_env, tmp_path):
    env, harness = cli_env
    (tmp_path / "joint.yaml").write_text(
        yaml.safe_dump(
            {"executor": {"task": [{"call": {"tool": "record", "args": {"label": "joint"}}}, {"text": "recorded"}]}}
        )
    )
    done = await acli(
        "run",
        *TOOLS,
        "record that we were here",
        "--mode",
        "joint",
        "--executor",
        "scripted:joint.yaml",
        "--allow-tool",
        "record",
        "--auto-approve",
        "--json",
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["outputs"] == {"task": "recorded"}
    assert [c["label"] for c in harness.calls()] == ["joint"]

    (tmp_path / "fast.yaml").write_text(yaml.safe_dump({"executor": {"q": "quick answer"}}))
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"tiers": {"fast": "scripted:fast.yaml"}}))
    plan = write_plan(tmp_path / "tiered.yaml", {"goal": "g", "steps": [llm("q", tier="fast")]})
    tiered = await acli("run", *TOOLS, "--plan", plan, "--config", "config.yaml", "--auto-approve", "--json", env=env)
    assert tiered.returncode == 0, tiered.stderr
    assert json.loads(tiered.stdout)["outputs"] == {"q": "quick answer"}


@pytest.mark.system
async def test_model_option_mistakes_are_one_line(cli_env, tmp_path):
    env, _ = cli_env
    env = {k: v for k, v in env.items() if k not in KEYLESS}
    plan = write_plan(tmp_path / "plan.yaml", {"goal": "g", "steps": [step("hi", "record", label="hi")]})
    one_line_error(
        await acli("run", "a goal", "--planner", "openai:gpt-4.1", env=env),
        "OPENAI_API_KEY is not set in the worker's environment",
    )
    one_line_error(
        await acli("run", "a goal", "--planner", "scripted:p.yaml", "--tier", "fast", env=env),
        "--tier 'fast' is not NAME=MODEL",
    )
    one_line_error(
        await acli("run", "a goal", "--config", "nope.yaml", env=env), "configuration file 'nope.yaml' does not exist"
    )
    one_line_error(
        await acli("run", "--plan", plan, "--mode", "joint", env=env), "--mode joint takes a goal, not --plan"
    )
    one_line_error(
        await acli("run", "a goal", "--mode", "joint", env=env), "--mode joint needs a model: --executor MODEL"
    )
    (tmp_path / "p.yaml").write_text("executor: {}\n")
    one_line_error(
        await acli(
            "run",
            *TOOLS,
            "a goal",
            "--mode",
            "joint",
            "--executor",
            "scripted:p.yaml",
            "--allow-tool",
            "rm_rf",
            env=env,
        ),
        "--allow-tool names unknown tool(s): rm_rf",
    )
    one_line_error(
        await acli("run", "a goal", "--planner", "openai:mystery@http://127.0.0.1:9/v1", "--budget-cost", "1", env=env),
        "openai:mystery@http://127.0.0.1:9/v1 has none; add it under prices:",
    )
    one_line_error(
        await acli("run", "a goal", "--planner", "openai:x@http://user:pw@127.0.0.1:9/v1", env=env),
        "carries credentials",
    )


@pytest.mark.unit
def test_limits_typed_at_the_prompt_are_checked():
    assert parse_limits("tokens=200000, cost=2.5 calls=10 seconds=90") == {
        "tokens": 200000,
        "cost_usd": 2.5,
        "model_calls": 10,
        "wall_clock_seconds": 90.0,
    }
    for text, message in [
        ("tokens=0.5", "tokens must be a whole number"),
        ("cost=nan", "cost must be a finite number above zero"),
        ("calls=1e400", "calls must be a finite number above zero"),
        ("tokens=-3", "above zero"),
        ("money=5", "'money=5' is not a limit"),
        ("", "give at least one limit"),
    ]:
        with pytest.raises(CliError, match=message):
            parse_limits(text)


@pytest.mark.system
async def test_values_no_model_takes_are_one_line(cli_env, tmp_path):
    env, _ = cli_env
    done = await acli("run", "a goal", "--planner", "scripted:p.yaml", "--max-tool-rounds", "5000", env=env)
    one_line_error(done, "error: max_tool_rounds: Input should be less than or equal to 1000")
    done = await acli("budget", "x", "--cost", "nan", env=env)
    assert done.returncode == 2 and "'nan' is not a finite number" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.system
async def test_a_stored_output_is_described_and_printed_on_demand(cli_env, tmp_path):
    env, _ = cli_env
    plan = write_plan(tmp_path / "big.yaml", {"goal": "g", "steps": [step("huge", "big_output", kib=40)]})
    done = await acli("run", *TOOLS, "--plan", plan, "--auto-approve", "--id", "cli-big", env=env)
    assert done.returncode == 0, done.stderr
    assert "huge: [stored output, 40,962 bytes: store:runs/cli-big/huge/" in done.stdout
    assert "(print it with: stratagem output cli-big huge)" in done.stdout
    printed = await acli("output", "cli-big", "huge", env=env)
    assert printed.returncode == 0 and printed.stdout == "x" * 40 * 1024 + "\n"
    one_line_error(await acli("output", "cli-big", "nope", env=env), "run cli-big has no step 'nope' (steps: huge)")
    one_line_error(await acli("output", "cli-big", "huge", "--transcript", env=env), "step 'huge' has no transcript")


@pytest.mark.system
async def test_watch_streams_from_an_offset_without_gaps_or_repeats(cli_env, tmp_path):
    env, _ = cli_env
    plan = write_plan(
        tmp_path / "w.yaml",
        {"goal": "g", "steps": [step("a", "record", label="a"), step("b", "record", ["a"], label="b")]},
    )
    assert (await acli("run", *TOOLS, "--plan", plan, "--auto-approve", "--id", "cli-watch", env=env)).returncode == 0
    whole = await acli("watch", "cli-watch", "--json", env=env)
    assert whole.returncode == 0, whole.stderr
    events = [json.loads(line) for line in whole.stdout.splitlines()]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert [e["kind"] for e in events][-1] == "run_succeeded"
    assert {"plan_proposed", "plan_approved", "step_started", "step_succeeded"} <= {e["kind"] for e in events}
    # Resuming from an offset gives exactly the rest.
    rest = await acli("watch", "cli-watch", "--json", "--from", "3", env=env)
    assert [json.loads(line) for line in rest.stdout.splitlines()] == events[3:]
    shown = await acli("watch", "cli-watch", "--from", str(len(events) - 1), env=env)
    assert shown.returncode == 0 and "run succeeded" in shown.stdout and shown.stdout.count("\n") == 1
