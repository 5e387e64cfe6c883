"""Edit, then approve, from the command line (issue #38, item 2): `approve --step S --args JSON`
prints what it approves with the change in it, sends the digest of what was shown, and the run
pays the edited amount; input the command can tell is wrong is one line, exit 2, nothing sent.
A real CLI process against the dev server.
"""

from __future__ import annotations

import json

import pytest
from support.cli import TOOLS, acli, one_line_error, write_plan
from support.plans import step
from test_cli import wait_status

pytestmark = pytest.mark.system

PLAN = {
    "goal": "pay the supplier",
    "steps": [
        step("profile", "fetch_profile", user="acme"),
        step("pay", "pay", ["profile"], amount=100, to="${profile.name}"),  # the tool is risk high: gated
    ],
}


async def test_approve_with_changed_arguments_runs_the_edited_call(cli_env, tmp_path):
    env, harness = cli_env
    path = write_plan(tmp_path / "plan.yaml", PLAN)
    started = await acli("run", *TOOLS, "--plan", path, "--detach", "--id", "cli-edit", env=env)
    assert started.returncode == 0, started.stderr
    assert (await acli("approve", "cli-edit", "--by", "bob", env=env)).returncode == 0
    status = await wait_status("cli-edit", env, lambda s: any(p["kind"] == "step_approval" for p in s["pending"]))
    assert status["pending"][0]["preview"]["args"] == {"amount": 100, "to": "Acme"}
    hint = " ".join((await acli("status", "cli-edit", env=env)).stdout.split())
    assert "to change arguments as you approve it, add --args with them: --args JSON" in hint

    for bad, expected in [
        ("{amount: 90", "--args: not JSON"),
        ("[90]", "--args takes a JSON object"),
        ("@" + str(tmp_path / "missing.json"), "--args: cannot read"),
    ]:
        one_line_error(
            await acli("approve", "cli-edit", "--step", "pay", "--args", bad, "--by", "dana", env=env), expected
        )
    one_line_error(
        await acli("approve", "cli-edit", "--args", '{"amount": 90}', "--by", "dana", env=env),
        "--args goes with --step",
    )
    # What the run refuses is one line too, and changes nothing.
    refused = await acli(
        "approve", "cli-edit", "--step", "pay", "--args", '{"amount": "lots"}', "--by", "dana", env=env
    )
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert "argument 'amount' of tool 'pay' is invalid" in refused.stderr and len(refused.stderr.splitlines()) == 1
    assert harness.calls() == []

    edit = tmp_path / "edit.json"
    edit.write_text(json.dumps({"amount": 90}))
    approved = await acli(
        "approve", "cli-edit", "--step", "pay", "--args", f"@{edit}", "--comment", "discount", "--by", "dana", env=env
    )
    assert approved.returncode == 0, approved.stderr
    out = approved.stdout + approved.stderr
    assert "approving step 'pay' with changed arguments (amount was 100), to run:" in out
    assert "amount=90" in out and 'to="Acme"' in out
    assert "step 'pay' approved with amount changed, in revision 2 by dana" in out
    waited = await acli("wait", "cli-edit", "--json", env=env)
    assert json.loads(waited.stdout)["status"] == "succeeded"
    assert [(c["amount"], c["to"]) for c in harness.calls()] == [(90, "Acme")]
    audit = [json.loads(line) for line in (await acli("audit", "cli-edit", env=env)).stdout.splitlines()]
    [decision] = [r for r in audit if r.get("edited")]
    assert decision["by"] == "dana" and decision["edited"] == {"amount": {"before": 100, "after": 90}}
