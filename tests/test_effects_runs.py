"""What people do about a run's effects (issue #41) against real runs on the dev server: answer an
in-doubt step and give up and undo a run, from the console (form and API) and the command line
(and its terminal prompt), as the signed-in person or the signer, and the attacks on both: a form
without its CSRF token, a person off the approver list, a person the step's approvers leave out.
The payment system (tests/support/payment_tools.py) writes one line per payment, the booking
system (tests/support/compensation_tools.py) one per booking and cancellation, so each test
proves what happened in the world, not only what the run says."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import support
from conftest import cli_environment, harness_for
from support import PAYMENT_TOOLS
from support.cli import acli, one_line_error
from support.payment_tools import payments
from support.terminal import Terminal
from test_console_attacks import browser, serving, sign_in

from stratagem.common.signing import Signer
from stratagem.console import AuthMode, IdentityConfig, Users, create_app
from stratagem.domain.ledger import EventKind, StepStatus
from stratagem.domain.run_types import ApproveInput, DecisionKind, Phase
from stratagem.tools import ToolRegistry

pytestmark = pytest.mark.system

COMPENSATION_TOOLS = str(Path(support.__file__).parent / "compensation_tools.py")
INVOICE = {"invoice": "INV-7", "amount": 1200}
PAYMENT = {
    "goal": "pay invoice INV-7",
    "steps": [{"id": "pay", "title": "Pay INV-7", "tool": "pay_blind", "args": INVOICE, "approvers": ["dana"]}],
}
TRIP = {
    "goal": "book a trip",
    "steps": [
        {"id": "hotel", "title": "book the hotel", "tool": "book", "args": {"slot": "hotel", "seconds": 0.01}},
        {"id": "mail", "title": "tell ada", "tool": "send_email", "args": {"to": "ada"}, "depends_on": ["hotel"]},
        {
            "id": "flight",
            "title": "book the flight",
            "tool": "fail",
            "args": {"reason": "no seats"},
            "depends_on": ["hotel"],
        },
    ],
}


def waiting(kind: DecisionKind):
    return lambda s: any(p.kind is kind for p in s.pending)


async def in_doubt_payment(harness: Any) -> Any:
    """A run whose payment was made and whose answer was lost: the step waits in doubt."""
    harness.workspace.mkdir(parents=True, exist_ok=True)
    (harness.workspace / "payment_script").write_text("unknown")
    run = await harness.start(PAYMENT, approvers=["dana", "lee"])
    await harness.wait_for(run, lambda s: s.phase is Phase.awaiting_approval)
    await run.approve(ApproveInput(by="dana", revision=1))
    await harness.wait_for(run, waiting(DecisionKind.step_approval))
    await run.approve(ApproveInput(by="dana", step_id="pay"))
    await harness.wait_for(run, waiting(DecisionKind.in_doubt))
    assert len(payments(harness.workspace)) == 1
    return run


async def failed_trip(harness: Any, **options: Any) -> Any:
    """A run that booked the hotel, mailed ada and found no flight: it waits for a repair."""
    run = await harness.start(TRIP, approvers=["dana"], **options)
    await harness.wait_for(run, lambda s: s.phase is Phase.awaiting_approval)
    await run.approve(ApproveInput(by="dana", revision=1))
    return run


def booked(harness: Any, tool: str) -> list[dict[str, Any]]:
    return [c for c in harness.calls() if c["tool"] == tool]


def console_of(harness: Any, key: Signer, tmp_path: Path) -> Any:
    users = Users(path=tmp_path / "users.yaml")
    for name in ("dana", "lee", "mallory"):
        users.set_password(name, f"{name}-password")
    users.save()
    identity = IdentityConfig(mode=AuthMode.users, secret=b"effects-test", users=users)
    return create_app(harness.client, identity, signer=key, store=harness.store)


@pytest.fixture
def console_key(monkeypatch) -> Signer:
    key = Signer.generate("console")
    monkeypatch.setenv("STRATAGEM_ISSUER_KEYS", key.public_line())
    return key


# ---------------------------------------------------------------------------- the console


async def test_the_console_resolves_an_in_doubt_step_only_for_its_approver_with_the_form_token(
    dev_env, tmp_path, console_key
):
    async with harness_for(dev_env, tmp_path, ToolRegistry.from_modules([PAYMENT_TOOLS])) as harness:
        run = await in_doubt_payment(harness)
        [paid] = payments(harness.workspace)
        async with serving(console_of(harness, console_key, tmp_path)) as base:
            dana, dana_csrf = await sign_in(base, "dana", "dana-password")
            mallory, mallory_csrf = await sign_in(base, "mallory", "mallory-password")
            lee, lee_csrf = await sign_in(base, "lee", "lee-password")
            async with browser(base, dana) as http:
                page = (await http.get(f"/runs/{run.id}")).text
                assert 'data-kind="in_doubt"' in page and "pay_blind(invoice=&#34;INV-7&#34;, amount=1200)" in page
                assert 'name="happened" value="yes"' in page and 'name="happened" value="no"' in page
                form = {"kind": "in_doubt", "step_id": "pay", "revision": "1", "happened": "no"}
                # Attack: dana's own browser made to post by another page, without the form's token.
                forged = await http.post(f"/runs/{run.id}/decide", data=form)
                assert forged.status_code == 403
            async with browser(base, mallory) as http:  # not on the run's approver list
                refused = await http.post(f"/runs/{run.id}/decide", data={**form, "csrf": mallory_csrf})
                assert refused.status_code == 303 and "approver+list" in refused.headers["location"]
            async with browser(base, lee) as http:  # on the run's list, not among the step's approvers
                api = await http.post(
                    f"/api/runs/{run.id}/resolve",
                    json={"step_id": "pay", "happened": False},
                    headers={"X-Stratagem-CSRF": lee_csrf},
                )
                assert api.status_code == 409 and "its approvers are dana" in api.json()["detail"]
            ledger = await run.ledger()
            assert ledger.steps["pay"].status is StepStatus.in_doubt
            assert EventKind.in_doubt_resolved not in [e.kind for e in ledger.events]
            assert len(payments(harness.workspace)) == 1  # nothing ran again meanwhile

            async with browser(base, dana) as http:
                output = json.dumps({"invoice": "INV-7", "amount": 1200, "key": paid["key"]})
                said = {**form, "happened": "yes", "output": output, "comment": "on the statement", "csrf": dana_csrf}
                done = await http.post(f"/runs/{run.id}/decide", data=said)
                assert done.status_code == 303 and "error=" not in done.headers["location"], done.headers
        assert (await run.result()).status is Phase.succeeded
        ledger = await run.ledger()
        word = next(e for e in ledger.events if e.kind is EventKind.in_doubt_resolved)
        assert word.actor == "dana" and ledger.steps["pay"].output["key"] == paid["key"]
        assert len(payments(harness.workspace)) == 1


async def test_the_console_compensates_at_a_repair_and_shows_what_stays(dev_env, tmp_path, console_key):
    async with harness_for(dev_env, tmp_path, ToolRegistry.from_modules([COMPENSATION_TOOLS])) as harness:
        run = await failed_trip(harness)
        await harness.wait_for(run, lambda s: s.phase is Phase.awaiting_repair)
        async with serving(console_of(harness, console_key, tmp_path)) as base:
            mallory, mallory_csrf = await sign_in(base, "mallory", "mallory-password")
            dana, dana_csrf = await sign_in(base, "dana", "dana-password")
            form = {"kind": "repair", "step_id": "flight", "revision": "1", "action": "compensate"}
            async with browser(base, mallory) as http:  # not on the approver list
                refused = await http.post(f"/runs/{run.id}/decide", data={**form, "csrf": mallory_csrf})
                assert refused.status_code == 303 and "approver+list" in refused.headers["location"]
            status = await run.status()
            assert status.phase is Phase.awaiting_repair and status.compensation is None
            assert booked(harness, "unbook") == []
            async with browser(base, dana) as http:
                page = (await http.get(f"/runs/{run.id}")).text
                assert 'name="action" value="compensate"' in page
                done = await http.post(
                    f"/runs/{run.id}/decide", data={**form, "comment": "no seats", "csrf": dana_csrf}
                )
                assert done.status_code == 303 and "error=" not in done.headers["location"], done.headers
                status = await harness.wait_for(run, lambda s: s.phase is Phase.awaiting_approval and s.revision == 2)
                assert status.compensation is not None and status.compensation.cannot_undo == ["mail"]
                page = (await http.get(f"/runs/{run.id}")).text
                assert 'id="compensation"' in page and 'id="undo-undo-hotel"' in page
                assert "These steps ran and nothing undoes them: mail" in page
                approve = {"kind": "plan_approval", "revision": "2", "verdict": "approve", "csrf": dana_csrf}
                assert (await http.post(f"/runs/{run.id}/decide", data=approve)).status_code == 303
                assert (await run.result()).status is Phase.compensated
                page = (await http.get(f"/runs/{run.id}")).text
                assert 'class="phase phase-compensated"' in page
                runs = (await http.get("/runs", params={"phase": "compensated"})).text
                assert run.id in runs
        assert [c["slot"] for c in booked(harness, "unbook")] == ["hotel"]


# ---------------------------------------------------------------------------- the command line


async def test_the_cli_shows_an_in_doubt_step_lists_it_and_resolves_it_as_the_signer(dev_env, tmp_path):
    async with harness_for(dev_env, tmp_path, ToolRegistry.from_modules([PAYMENT_TOOLS])) as harness:
        env = {**cli_environment(dev_env, harness, tmp_path / "home"), "CLI_CWD": str(tmp_path)}
        run = await in_doubt_payment(harness)
        [paid] = payments(harness.workspace)
        shown = await acli("status", run.id, env=env)
        assert shown.returncode == 0, shown.stderr
        assert "1 in doubt" in shown.stdout and "in_doubt" in shown.stdout
        assert f"stratagem resolve {run.id} pay --happened [--output JSON]" in shown.stdout
        inbox = await acli("list", "--status", "awaiting-approval", "--waiting", "in_doubt", "--json", env=env)
        assert inbox.returncode == 0, inbox.stderr
        [row] = [r for r in json.loads(inbox.stdout) if r["run_id"] == run.id]
        assert row["waiting_for"] == ["word on whether step pay's effect happened"]

        one_line_error(
            await acli("resolve", run.id, "pay", "--not-happened", "--by", "mallory", env=env),
            "mallory is not on this run's approver list",
        )
        one_line_error(
            await acli("resolve", run.id, "pay", "--happened", "--output", "{tx", "--by", "dana", env=env),
            "--output: not JSON",
        )
        assert (await run.ledger()).steps["pay"].status is StepStatus.in_doubt
        output = json.dumps({"invoice": "INV-7", "amount": 1200, "key": paid["key"]})
        said = await acli("resolve", run.id, "pay", "--happened", "--output", output, "--by", "dana", "--json", env=env)
        assert said.returncode == 0, said.stderr
        assert json.loads(said.stdout)["message"] == "step 'pay' succeeded with the output given; the run goes on"
        waited = await acli("wait", run.id, env=env)
        assert waited.returncode == 0, waited.stderr
        assert len(payments(harness.workspace)) == 1


async def test_at_a_terminal_an_in_doubt_step_is_asked_and_did_not_happen_runs_it_again(dev_env, tmp_path):
    async with harness_for(dev_env, tmp_path, ToolRegistry.from_modules([PAYMENT_TOOLS])) as harness:
        env = {**cli_environment(dev_env, harness, tmp_path / "home"), "COLUMNS": "120"}
        harness.workspace.mkdir(parents=True, exist_ok=True)
        (harness.workspace / "payment_script").write_text("unpaid\nok")
        run = await harness.start(PAYMENT, approvers=["dana"])
        await harness.wait_for(run, lambda s: s.phase is Phase.awaiting_approval)
        await run.approve(ApproveInput(by="dana", revision=1))
        await harness.wait_for(run, waiting(DecisionKind.step_approval))
        await run.approve(ApproveInput(by="dana", step_id="pay"))
        await harness.wait_for(run, waiting(DecisionKind.in_doubt))
        terminal = Terminal(["wait", run.id, "--by", "dana"], env, tmp_path)
        try:
            await terminal.expect("did [n]ot happen (it runs again) / [l]ater:")
            assert "outcome is unknown" in terminal.text
            terminal.type("maybe\n")
            await terminal.expect("please answer h, n or l")
            terminal.type("n\n")
            await terminal.expect("succeeded")
            assert await terminal.exit_status() == 0
        finally:
            terminal.close()
        [paid] = payments(harness.workspace)
        assert paid["attempt"] == 2


async def test_the_cli_compensates_a_failed_run_and_exits_by_what_the_world_was_left_with(dev_env, tmp_path):
    async with harness_for(dev_env, tmp_path, ToolRegistry.from_modules([COMPENSATION_TOOLS])) as harness:
        env = {**cli_environment(dev_env, harness, tmp_path / "home"), "CLI_CWD": str(tmp_path)}
        run = await failed_trip(harness)
        await harness.wait_for(run, lambda s: s.phase is Phase.awaiting_repair)
        one_line_error(await acli("compensate", run.id, "--by", "mallory", env=env), "not on this run's approver list")
        assert (await run.status()).compensation is None
        given = await acli("compensate", run.id, "--reason", "no seats", "--by", "dana", "--json", env=env)
        assert given.returncode == 0, given.stderr
        assert json.loads(given.stdout)["revision"] == 2
        await harness.wait_for(run, lambda s: s.phase is Phase.awaiting_approval and s.revision == 2)
        shown = await acli("status", run.id, env=env)
        assert "compensation (revision 2)" in shown.stdout and "undo undo-hotel (undoes hotel): unbook(" in shown.stdout
        assert "effects that stay (nothing undoes them): mail" in shown.stdout
        assert (await acli("approve", run.id, "--revision", "2", "--by", "dana", env=env)).returncode == 0
        waited = await acli("wait", run.id, env=env)
        assert waited.returncode == 1, waited  # no goal reached, though the world was put back
        assert "compensated" in waited.stdout and "effects that stay (nothing undoes them): mail" in waited.stdout
        listed = await acli("list", "--json", env=env)
        assert {r["run_id"]: r["phase"] for r in json.loads(listed.stdout)}[run.id] == "compensated"
        assert [c["slot"] for c in booked(harness, "unbook")] == ["hotel"]


async def test_a_run_whose_undo_fails_for_good_ends_compensation_failed_and_exits_3(dev_env, tmp_path):
    stuck = {
        **TRIP,
        "steps": [{**TRIP["steps"][0], "args": {"slot": "stuck-hotel", "seconds": 0.01}}, *TRIP["steps"][1:]],
    }
    async with harness_for(dev_env, tmp_path, ToolRegistry.from_modules([COMPENSATION_TOOLS])) as harness:
        env = {**cli_environment(dev_env, harness, tmp_path / "home"), "CLI_CWD": str(tmp_path)}
        run = await harness.start(stuck, approvers=["dana"], on_failure="compensate")
        await harness.wait_for(run, lambda s: s.phase is Phase.awaiting_approval)
        await run.approve(ApproveInput(by="dana", revision=1))
        await harness.wait_for(run, lambda s: s.phase is Phase.awaiting_approval and s.revision == 2)
        await run.approve(ApproveInput(by="dana", revision=2))
        await harness.wait_for(run, lambda s: s.phase is Phase.awaiting_repair)
        assert (await acli("stop", run.id, "--reason", "call the hotel", "--by", "dana", env=env)).returncode == 0
        waited = await acli("wait", run.id, env=env)
        assert waited.returncode == 3, waited
        assert "compensation_failed" in waited.stdout
        watched = await acli("watch", run.id, env=env)
        assert watched.returncode == 3 and "run compensation failed" in watched.stdout
