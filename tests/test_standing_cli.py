"""`stratagem standing grant|list|revoke` as a person types them: real CLI processes against the
dev server, a process file, the grant signed with the person's key from the home's keyring."""

from __future__ import annotations

import json

import pytest
from support.cli import acli, one_line_error, write_plan

pytestmark = pytest.mark.system

PAYOUT = {
    "process": {"name": "payout", "version": "3"},
    "inputs": {
        "vendor": {"type": "string"},
        "amount": {"type": "number", "minimum": 0},
        "currency": {"type": "string", "enum": ["EUR", "USD"], "default": "EUR"},
    },
    "goal": "Pay ${inputs.vendor}",
    "steps": [
        {
            "id": "pay",
            "title": "Pay ${inputs.vendor}",
            "tool": "record",
            "args": {"label": "pay ${inputs.vendor} ${inputs.amount} ${inputs.currency}"},
            "risk": "high",
        }
    ],
}


async def test_grant_list_and_revoke_from_the_command_line(cli_env, tmp_path):
    env, _ = cli_env
    path = write_plan(tmp_path / "payout.yaml", PAYOUT)
    granted = await acli(
        "standing", "grant", path, "--bound", "amount<=5000", "--bound", "currency=EUR", "--step", "pay",
        "--id", "payout-small", "--by", "dana", env=env,
    )  # fmt: skip
    assert granted.returncode == 0, granted.stderr
    assert "granted payout-small: payout v3 by dana; bounds amount<=5000, currency=EUR; steps pay" in granted.stdout
    listed = await acli("standing", "list", "payout", env=env)
    assert "payout-small: payout v3 by dana" in listed.stdout and "signed by dana; active" in listed.stdout
    rows = json.loads((await acli("standing", "list", "--json", env=env)).stdout)
    assert [(r["id"], r["signer"], r["revoked"]) for r in rows] == [("payout-small", "dana", None)]
    assert rows[0]["bounds"] == [
        {"input": "amount", "op": "<=", "value": 5000},
        {"input": "currency", "op": "=", "value": "EUR"},
    ]
    assert (await acli("standing", "list", "other", env=env)).stdout.strip() == "no standing approvals of other"

    one_line_error(
        await acli("standing", "grant", path, "--id", "payout-small", "--by", "dana", env=env),
        "there is a standing approval payout-small already",
    )
    revoked = await acli("standing", "revoke", "payout-small", "--reason", "vendor audit", "--by", "lee", env=env)
    assert revoked.returncode == 0, revoked.stderr
    assert "revoked payout-small: later runs wait for a person" in revoked.stdout
    listed = await acli("standing", "list", env=env)
    assert "revoked by lee: vendor audit" in listed.stdout


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--bound", "amount<=lots"], "bound amount<=lots: <= needs a number"),
        (["--bound", "total<=5"], "payout has no input 'total' (its inputs: vendor, amount, currency)"),
        (["--bound", "amount <= "], "is not one of: NAME<=N"),
        (["--step", "ship"], "payout v3 has no step ship"),
        (["--expires", "2001-01-01"], "--expires 2001-01-01 is in the past"),
        (["--expires", "soon"], "--expires 'soon' is not a date"),
        (["--version", "9"], "is payout v3, not version 9"),
    ],
)
async def test_a_grant_that_cannot_be_is_one_line(cli_env, tmp_path, args, says):
    env, _ = cli_env
    path = write_plan(tmp_path / "payout.yaml", PAYOUT)
    one_line_error(await acli("standing", "grant", path, *args, "--by", "dana", env=env), says)


async def test_a_process_that_is_not_there_and_a_revocation_of_nothing_are_one_line(cli_env):
    env, _ = cli_env
    one_line_error(await acli("standing", "grant", "nope", "--by", "dana", env=env), "no process called 'nope'")
    one_line_error(
        await acli("standing", "revoke", "nope", "--reason", "x", "--by", "dana", env=env),
        "there is no standing approval nope",
    )


async def test_a_granted_process_runs_unreviewed_and_one_out_of_bounds_shows_why_at_status_and_show(cli_env, tmp_path):
    from stratagem.domain.process import ProcessRun
    from stratagem.domain.run_types import Phase, RunInput
    from stratagem.io.plan_files import load_process_file

    env, harness = cli_env
    path = write_plan(tmp_path / "payout.yaml", PAYOUT)
    granted = await acli(
        "standing", "grant", path, "--bound", "amount<=5000", "--step", "pay", "--id", "small", "--by", "dana", env=env
    )
    assert granted.returncode == 0, granted.stderr
    spec = load_process_file(path)
    inside = await harness.start_input(RunInput(process=ProcessRun(spec=spec, inputs={"vendor": "acme", "amount": 70})))
    await harness.wait_for(inside, lambda s: s.phase is Phase.succeeded)
    assert [c["label"] for c in harness.calls()] == ["pay acme 70 EUR"]
    audit = (await acli("audit", inside.id, env=env)).stdout
    assert "standing approval small of payout v3, granted by dana within amount<=5000" in audit

    outside = await harness.start_input(
        RunInput(process=ProcessRun(spec=spec, inputs={"vendor": "acme", "amount": 7000}))
    )
    await harness.wait_for(outside, lambda s: bool(s.pending))
    why = "standing approval small (dana): amount=7000 is outside the bound amount<=5000"
    status = await acli("status", outside.id, env=env)
    assert f"a standing approval exists but did not apply: {why}" in status.stdout.replace("\n", " ")
    shown = await acli("show", outside.id, env=env)
    assert why in shown.stdout.replace("\n", " ")
    assert len(harness.calls()) == 1
