"""Quorum and four eyes from the command line (issue #38, item 5): `run --quorum N` and
`--four-eyes`, what `status` and `status --json` say about who approved and who still may, the
one-line refusals, and the one-line errors for a quorum nobody could reach. A real CLI process
against the dev server.
"""

from __future__ import annotations

import json

import pytest
from support.cli import TOOLS, acli, one_line_error, write_plan
from support.terminal import Terminal
from test_cli import wait_status

pytestmark = pytest.mark.system

PLAN = {
    "goal": "pay the supplier",
    "steps": [{"id": "pay", "title": "Pay the supplier", "tool": "pay", "args": {"amount": 1200, "to": "acme"}}],
}
TEAM = ("--approver", "dana", "--approver", "lee", "--approver", "kim")


def _paid(harness) -> list[dict]:
    return [c for c in harness.calls() if c.get("tool") == "pay"]


async def test_the_plan_quorum_from_the_command_line_and_what_status_shows(cli_env, tmp_path):
    env, harness = cli_env
    path = write_plan(tmp_path / "plan.yaml", PLAN)
    started = await acli("run", *TOOLS, "--plan", path, "--quorum", "2", *TEAM, "--detach", "--id", "q-plan", env=env)
    assert started.returncode == 0, started.stderr
    await wait_status("q-plan", env, lambda s: bool(s["pending"]))
    first = await acli("approve", "q-plan", "--by", "dana", env=env)
    assert first.returncode == 0, first.stderr
    assert "approved by dana (1 of 2), waiting for one more of lee, kim" in first.stdout
    shown = (await acli("status", "q-plan", env=env)).stdout
    assert "approved by dana (1 of 2), waiting for one more of lee, kim" in " ".join(shown.split())
    [pending] = json.loads((await acli("status", "q-plan", "--json", env=env)).stdout)["pending"]
    assert (pending["quorum"], pending["approved_by"], pending["may_approve"]) == (2, ["dana"], ["lee", "kim"])
    one_line_error(
        await acli("approve", "q-plan", "--by", "dana", env=env),
        "dana approved already: 1 of 2, waiting for one more of lee, kim",
    )
    assert (await acli("approve", "q-plan", "--by", "kim", env=env)).returncode == 0
    # The step (risk high: the pay tool says so) is approved by one person: the run's quorum is the plan's.
    await wait_status("q-plan", env, lambda s: [p["step_id"] for p in s["pending"]] == ["pay"])
    assert (await acli("approve", "q-plan", "--step", "pay", "--by", "lee", env=env)).returncode == 0
    waited = await acli("wait", "q-plan", "--json", env=env)
    assert json.loads(waited.stdout)["status"] == "succeeded"
    assert len(_paid(harness)) == 1
    audit = [json.loads(line) for line in (await acli("audit", "q-plan", env=env)).stdout.splitlines()]
    counted = [r for r in audit if r.get("kind") == "approval_counted"]
    assert [r["data"]["approved_by"] for r in counted] == [["dana"], ["dana", "kim"]]


async def test_four_eyes_refuses_the_starter_at_the_command_line(cli_env, tmp_path):
    env, harness = cli_env
    path = write_plan(tmp_path / "plan.yaml", PLAN)
    args = ("run", *TOOLS, "--plan", path, "--four-eyes", "--by", "dana", "--detach", "--id", "q-eyes")
    assert (await acli(*args, env=env)).returncode == 0
    await wait_status("q-eyes", env, lambda s: bool(s["pending"]))
    shown = " ".join((await acli("status", "q-eyes", env=env)).stdout.split())
    assert "four eyes: not dana (started the run)" in shown
    one_line_error(
        await acli("approve", "q-eyes", "--by", "dana", env=env),
        "four eyes: dana started the run, so another person must approve revision 1",
    )
    assert (await acli("approve", "q-eyes", "--by", "lee", env=env)).returncode == 0
    await wait_status("q-eyes", env, lambda s: [p["step_id"] for p in s["pending"]] == ["pay"])
    one_line_error(
        await acli("approve", "q-eyes", "--step", "pay", "--by", "dana", env=env),
        "four eyes: dana started the run, so another person must approve step 'pay'",
    )
    assert _paid(harness) == []
    assert (await acli("approve", "q-eyes", "--step", "pay", "--by", "kim", env=env)).returncode == 0
    assert json.loads((await acli("wait", "q-eyes", "--json", env=env)).stdout)["status"] == "succeeded"
    assert len(_paid(harness)) == 1


async def test_a_quorum_nobody_could_reach_is_refused_at_start(cli_env, tmp_path):
    env, _ = cli_env
    path = write_plan(tmp_path / "plan.yaml", PLAN)
    one_line_error(
        await acli("run", *TOOLS, "--plan", path, "--quorum", "3", "--approver", "dana", "--approver", "lee", env=env),
        "quorum 3 but only 2 may approve the plan (dana, lee)",
    )
    one_line_error(
        await acli("run", *TOOLS, "--plan", path, "--quorum", "2", "--auto-approve", env=env),
        "auto_approve approves alone (one signer)",
    )
    step = {**PLAN["steps"][0], "quorum": 3, "approvers": ["finance"]}
    config = tmp_path / "config.yaml"
    config.write_text("groups:\n  finance: [dana, lee]\n")
    path = write_plan(tmp_path / "step.yaml", {**PLAN, "steps": [step]})
    done = await acli("run", *TOOLS, "--plan", path, "--config", str(config), env=env)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "quorum 3 but only 2 may approve step 'pay' (dana, lee)" in done.stderr


async def test_the_terminal_asks_once_then_says_who_is_still_wanted(cli_env, tmp_path):
    """dana approves at her terminal; it does not ask her again (she would be refused) but says
    the plan waits for one more of lee, kim, and goes on once lee approves elsewhere."""
    env, harness = cli_env
    path = write_plan(tmp_path / "plan.yaml", PLAN)
    args = ["run", *TOOLS, "--plan", path, "--quorum", "2", *TEAM, "--by", "dana", "--id", "q-tty"]
    terminal = Terminal(args, {**env, "COLUMNS": "200"}, tmp_path)
    try:
        await terminal.expect("approve revision 1?")
        terminal.type("a\n")
        await terminal.expect("approved by dana (1 of 2), waiting for one more of lee, kim", times=2)
        assert terminal.text.count("approve revision 1?") == 1
        assert (await acli("approve", "q-tty", "--by", "lee", env=env)).returncode == 0
        await terminal.expect("approve step 'pay'")
        terminal.type("y\n")
        await terminal.expect("succeeded")
        assert await terminal.exit_status() == 0
    finally:
        terminal.close()
    assert len(_paid(harness)) == 1
