"""A rejected step is sent back, not the run (issue #38, item 3), from the command line and the
console: `reject --step` says what happens next, `retry --args` changes one argument and keeps
the others, the retried step is asked again with the merged arguments, and the console's repair
form starts filled with the step's arguments. Real CLI processes and the console under uvicorn,
against the dev server; the fixture tools' log proves what ran.
"""

from __future__ import annotations

import json

import httpx
import pytest
from conftest import harness_for
from support.cli import TOOLS, acli, one_line_error, write_plan
from support.plans import step
from support.terminal import Terminal
from test_cli import wait_status
from test_console_attacks import serving

from stratagem.common.signing import Signer
from stratagem.console import AuthMode, IdentityConfig, create_app
from stratagem.domain.ledger import StepStatus
from stratagem.domain.run_types import ApproveInput, DecisionKind, Phase, RejectInput

pytestmark = pytest.mark.system

PLAN = {
    "goal": "pay the vendor",
    "steps": [
        {
            "id": "pay",
            "title": "Pay the vendor",
            "tool": "slow",
            "args": {"label": "pay acme 1200 EUR from CC-1", "seconds": 0.01},
            "risk": "high",
        },
        step("file", "record", label="filed"),
    ],
}


def _waits(kind: str, step_id: str):
    return lambda s: any(p["kind"] == kind and p.get("step_id") == step_id for p in s["pending"])


async def test_reject_sends_the_step_back_and_retry_changes_one_argument(cli_env, tmp_path):
    env, harness = cli_env
    path = write_plan(tmp_path / "plan.yaml", PLAN)
    started = await acli("run", *TOOLS, "--plan", path, "--detach", "--id", "cli-back", env=env)
    assert started.returncode == 0, started.stderr
    assert (await acli("approve", "cli-back", "--by", "bob", env=env)).returncode == 0
    await wait_status("cli-back", env, _waits("step_approval", "pay"))
    rejected = await acli(
        "reject", "cli-back", "--step", "pay", "--reason", "wrong cost centre", "--by", "dana", env=env
    )
    assert rejected.returncode == 0, rejected.stderr
    assert "step 'pay' sent back: the run waits for a repair" in rejected.stdout
    status = await wait_status("cli-back", env, lambda s: s["phase"] == "awaiting_repair")
    assert "rejected by dana: wrong cost centre" in status["pending"][0]["prompt"]
    assert [c["label"] for c in harness.calls()] == ["filed"]  # the other branch ran; the payment did not

    # Arguments that break the tool's schema: one line, nothing runs, the run still waits.
    one_line_error(
        await acli("retry", "cli-back", "pay", "--args", '{"seconds": "soon"}', "--by", "dana", env=env),
        "argument 'seconds' of tool 'slow' is invalid",
    )
    assert (await wait_status("cli-back", env, lambda s: True))["phase"] == "awaiting_repair"

    retried = await acli(
        "retry", "cli-back", "pay", "--args", '{"label": "pay acme 1200 EUR from CC-9"}', "--by", "dana", env=env
    )
    assert retried.returncode == 0, retried.stderr
    assert "step 'pay' retried (its approval is asked again before it runs)" in retried.stdout
    status = await wait_status("cli-back", env, _waits("step_approval", "pay"))
    preview = status["pending"][0]["preview"]
    assert preview["args"] == {"label": "pay acme 1200 EUR from CC-9", "seconds": 0.01}
    shown = (await acli("status", "cli-back", env=env)).stdout
    assert "it will run:" in shown and "CC-9" in shown
    assert [c["label"] for c in harness.calls()] == ["filed"]
    digest = preview["digest"][:12]
    approved = await acli("approve", "cli-back", "--step", "pay", "--digest", digest, "--by", "dana", env=env)
    assert approved.returncode == 0, approved.stderr
    waited = await acli("wait", "cli-back", "--json", env=env)
    assert json.loads(waited.stdout)["status"] == "succeeded"
    assert [c["label"] for c in harness.calls()] == ["filed", "pay acme 1200 EUR from CC-9"]


async def test_the_console_repair_form_starts_with_the_steps_arguments(dev_env, tmp_path, monkeypatch):
    key = Signer.generate("console")
    monkeypatch.setenv("STRATAGEM_ISSUER_KEYS", key.public_line())
    async with harness_for(dev_env, tmp_path) as harness:
        run = await harness.start(PLAN)
        await harness.wait_for(run, lambda s: s.phase is Phase.awaiting_approval)
        await run.approve(ApproveInput(by="bob", revision=1))
        await harness.wait_for(run, lambda s: any(p.kind is DecisionKind.step_approval for p in s.pending))
        await run.reject(RejectInput(by="dana", step_id="pay", reason="wrong cost centre"))
        await harness.wait_for(run, lambda s: s.phase is Phase.awaiting_repair)
        identity = IdentityConfig(mode=AuthMode.local, secret=b"back-test", local_user="ops")
        app = create_app(harness.client, identity, signer=key, store=harness.store)
        async with serving(app) as base, httpx.AsyncClient(base_url=base, headers={"Origin": base}) as http:
            csrf = (await http.get("/api/whoami")).json()["csrf"]
            page = (await http.get(f"/runs/{run.id}")).text
            assert "rejected by dana: wrong cost centre" in page
            filled = json.dumps(PLAN["steps"][0]["args"], indent=2)
            escaped = filled.replace('"', "&#34;")
            assert f">{escaped}</textarea>" in page
            form = {"kind": "repair", "step_id": "pay", "csrf": csrf, "args_shown": filled}
            # Sent as shown, it is a plain retry (no new revision), and the step is asked again.
            done = await http.post(f"/runs/{run.id}/decide", data={**form, "action": "retry", "args": filled})
            assert done.status_code == 303 and "error=" not in done.headers["location"]
            status = await harness.wait_for(run, lambda s: any(p.kind is DecisionKind.step_approval for p in s.pending))
            assert status.revision == 1 and [c["label"] for c in harness.calls()] == ["filed"]
            await run.reject(RejectInput(by="dana", step_id="pay", reason="still wrong"))
            await harness.wait_for(run, lambda s: s.phase is Phase.awaiting_repair)
            # A skip from the same form leaves the filled arguments out (a skip takes none).
            output = json.dumps({"label": "paid by hand", "start": 0, "end": 0})
            skipped = await http.post(
                f"/runs/{run.id}/decide", data={**form, "action": "skip", "args": filled, "output": output}
            )
            assert skipped.status_code == 303 and "error=" not in skipped.headers["location"]
        assert (await run.result()).status is Phase.succeeded
        assert (await run.ledger()).steps["pay"].status is StepStatus.succeeded
        assert [c["label"] for c in harness.calls()] == ["filed"]


async def test_at_a_terminal_no_sends_the_step_back_and_the_repair_is_asked_there(cli_env, tmp_path):
    env, harness = cli_env
    path = write_plan(tmp_path / "plan.yaml", PLAN)
    terminal = Terminal(["run", *TOOLS, "--plan", path, "--id", "tty-back"], {**env, "COLUMNS": "120"}, tmp_path)
    try:
        await terminal.expect("approve revision 1?")
        terminal.type("a\n")
        await terminal.expect("[y]es / [n]o / [l]ater:")
        terminal.type("n\n")
        await terminal.expect("reason: ")
        terminal.type("wrong cost centre\n")
        # The run is not over: the same terminal is asked for the repair.
        await terminal.expect("s[t]op the run / [c]ompensate (undo what ran) / [l]ater:")
        assert "step 'pay' was sent back, rejected by" in terminal.text
        assert [c["label"] for c in harness.calls()] == ["filed"]
        terminal.type("a\n")
        await terminal.expect("new arguments (a JSON object): ")
        terminal.type('{"label": "pay acme 1200 EUR from CC-9"}\n')
        await terminal.expect("[y]es / [n]o / [l]ater:", times=2)  # asked again
        asked = terminal.text[terminal.text.rindex("step 'pay' will run:") :]
        assert "CC-9" in asked and "seconds=0.01" in asked
        terminal.type("y\n")
        await terminal.expect("succeeded")
        assert await terminal.exit_status() == 0
    finally:
        terminal.close()
    assert [c["label"] for c in harness.calls()] == ["filed", "pay acme 1200 EUR from CC-9"]
