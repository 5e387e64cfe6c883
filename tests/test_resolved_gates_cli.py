"""Resolved arguments at every gate, from the command line (issue #38, item 1): `status`,
`status --json` and `approve --step` show what a gated step will run, in full, and the approval
the CLI sends is bound to it. A real CLI process against the dev server.
"""

from __future__ import annotations

import json

import pytest
from support.cli import TOOLS, acli, one_line_error, write_plan
from support.plans import step
from support.terminal import Terminal
from test_cli import wait_status

from stratagem.client import get_run

pytestmark = pytest.mark.system

MEMO = "invoice 2026-118 for the October retainer, " * 8  # long: shown whole, never cut

PLAN = {
    "goal": "pay the vendor",
    "steps": [
        step("profile", "fetch_profile", user="acme"),
        {**step("pay", "record", ["profile"], label=f"pay ${{profile.name}} 1200 EUR, {MEMO}"), "risk": "high"},
    ],
}


async def test_status_and_approve_show_the_resolved_arguments_and_bind_to_them(cli_env, tmp_path):
    env, harness = cli_env
    path = write_plan(tmp_path / "plan.yaml", PLAN)
    started = await acli("run", *TOOLS, "--plan", path, "--detach", "--id", "cli-gate", env=env)
    assert started.returncode == 0, started.stderr
    assert (await acli("approve", "cli-gate", "--by", "bob", env=env)).returncode == 0
    status = await wait_status("cli-gate", env, lambda s: any(p["kind"] == "step_approval" for p in s["pending"]))
    label = f"pay Acme 1200 EUR, {MEMO}"
    preview = status["pending"][0]["preview"]
    assert preview["tool"] == "record" and preview["args"] == {"label": label}
    shown = (await acli("status", "cli-gate", env=env)).stdout
    assert "it will run:" in shown and json.dumps(label) in shown.replace("\n", "")
    digest = preview["digest"][:12]
    assert f"stratagem approve cli-gate --step pay --digest {digest}" in shown
    # A digest of something else (what another page or an earlier status showed) approves nothing.
    one_line_error(
        await acli("approve", "cli-gate", "--step", "pay", "--digest", "0" * 12, "--by", "dana", env=env),
        "step 'pay' changed since it was shown",
    )
    assert harness.calls() == []
    approved = await acli("approve", "cli-gate", "--step", "pay", "--digest", digest, "--by", "dana", env=env)
    assert approved.returncode == 0, approved.stderr
    assert "approving step 'pay', to run:" in approved.stdout and json.dumps(label) in approved.stdout
    waited = await acli("wait", "cli-gate", "--json", env=env)
    assert json.loads(waited.stdout)["status"] == "succeeded"
    assert [c["label"] for c in harness.calls()] == [label]
    ledger = json.loads((await acli("status", "cli-gate", "--json", env=env)).stdout)
    assert ledger["pending"] == []


async def test_the_terminal_shows_what_will_run_before_asking_and_binds_the_answer(cli_env, tmp_path):
    env, harness = cli_env
    path = write_plan(tmp_path / "plan.yaml", PLAN)
    terminal = Terminal(["run", *TOOLS, "--plan", path, "--id", "tty-gate"], {**env, "COLUMNS": "100"}, tmp_path)
    try:
        await terminal.expect("approve revision 1?")
        terminal.type("a\n")
        await terminal.expect("approve step 'pay' (pay), risk high? [y]es / [n]o / [l]ater:")
        asked = terminal.text[terminal.text.rindex("step 'pay' will run:") :]
        assert "record(" in asked and "pay Acme 1200 EUR" in asked
        # Folded at 100 columns, never cut: every word of the long memo is there.
        assert " ".join(asked.split()).count("for the October retainer") == 8
        assert harness.calls() == []
        terminal.type("y\n")
        await terminal.expect("succeeded")
        assert await terminal.exit_status() == 0
    finally:
        terminal.close()
    ledger = await get_run(harness.client, "tty-gate").ledger()
    assert [(d.action.value, d.step_id) for d in ledger.decisions] == [("approve", None), ("approve", "pay")]
    assert [c["label"] for c in harness.calls()] == [f"pay Acme 1200 EUR, {MEMO}"]
