"""Signed decisions (stratagem.signing): the signature proves who decided; a claim does not.

The attacks use the plain `temporal` CLI, as anyone who can reach the frontend could."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path

import pytest
from conftest import harness_for

from stratagem.binaries import temporal_cli
from stratagem.client import RunHandle
from stratagem.errors import ConfigError, DecisionRefusedError
from stratagem.ledger import EventKind
from stratagem.run_types import ApproveInput
from stratagem.signing import DecisionPolicy, Signer

ALICE = Signer.generate("alice")
MALLORY = Signer.generate("mallory")


def policy(*signers: Signer, allow_unsigned: bool = False) -> DecisionPolicy:
    env = {"STRATAGEM_APPROVER_KEYS": ",".join(s.public_line() for s in signers)}
    if allow_unsigned:
        env["STRATAGEM_ALLOW_UNSIGNED"] = "1"
    return DecisionPolicy.from_env(env)


# --- the signature ------------------------------------------------------------------------------


def test_a_signed_decision_verifies_for_its_run_and_kind_only():
    trusted = policy(ALICE)
    signed = ALICE.sign("run-1", "approve", ApproveInput(by="alice", revision=1))
    assert trusted.verify("run-1", "approve", signed).signer == "alice"
    assert "does not match" in trusted.verify("run-2", "approve", signed).refused  # moved to another run
    assert "does not match" in trusted.verify("run-1", "reject", signed).refused  # turned into another decision
    altered = signed.model_copy(update={"revision": 2})
    assert "does not match" in trusted.verify("run-1", "approve", altered).refused
    step = signed.model_copy(update={"step_id": "pay"})
    assert "does not match" in trusted.verify("run-1", "approve", step).refused


def test_a_claim_is_not_a_signature():
    trusted = policy(ALICE)
    unsigned = ApproveInput(by="alice", revision=1)
    assert "only signed decisions" in trusted.verify("run-1", "approve", unsigned).refused
    # Mallory signs with her own key but names herself alice: the signature does not verify.
    forged = MALLORY.sign("run-1", "approve", unsigned).model_copy(update={"signer": "alice"})
    assert "does not match" in trusted.verify("run-1", "approve", forged).refused
    # Mallory signs as herself: a key the worker does not trust.
    own = MALLORY.sign("run-1", "approve", ApproveInput(by="mallory", revision=1))
    assert "does not trust" in trusted.verify("run-1", "approve", own).refused
    # Alice's valid signature on a decision that says it is by bob.
    as_bob = ALICE.sign("run-1", "approve", ApproveInput(by="bob", revision=1))
    assert "signed by 'alice'" in trusted.verify("run-1", "approve", as_bob).refused


def test_no_keys_means_unsigned_decisions_are_accepted_and_said_to_be():
    open_policy = DecisionPolicy.from_env({})
    verdict = open_policy.verify("r", "approve", ApproveInput(by="anyone"))
    assert verdict.refused is None and verdict.signer is None
    assert policy(ALICE, allow_unsigned=True).verify("r", "approve", ApproveInput(by="x")).refused is None


def test_key_configuration_errors_are_one_line(tmp_path: Path):
    for env, expected in [
        ({"STRATAGEM_APPROVER_KEYS": "alice"}, "must be NAME:PUBLIC_KEY"),
        ({"STRATAGEM_APPROVER_KEYS": "alice:not-base64!"}, "not valid base64"),
        ({"STRATAGEM_APPROVER_KEYS": "alice:AAAA"}, "not 32"),
        ({"STRATAGEM_APPROVER_KEYS": "@/nonexistent/keys"}, "cannot read"),
    ]:
        with pytest.raises(ConfigError, match=expected):
            DecisionPolicy.from_env(env)
    keys = tmp_path / "approvers"
    keys.write_text(f"# the approvers\n{ALICE.public_line()}\n")
    assert set(DecisionPolicy.from_env({"STRATAGEM_APPROVER_KEYS": f"@{keys}"}).keys) == {"alice"}
    bad = tmp_path / "k.key"
    bad.write_text("alice")
    with pytest.raises(ConfigError, match="NAME:KEY"):
        Signer.from_file(bad)


# --- attacks on a real run ------------------------------------------------------------------------


async def temporal(env, *args: str) -> subprocess.CompletedProcess[str]:
    """The plain Temporal CLI, in a thread: the test's worker shares this event loop."""
    address = env.client.service_client.config.target_host
    command = [str(temporal_cli()), *args, "--address", address, "--namespace", env.client.namespace]
    return await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True, timeout=60)


PAY = {"goal": "pay", "steps": [{"id": "pay", "title": "Pay", "tool": "record", "args": {"label": "paid"}}]}


async def test_forged_decisions_from_the_temporal_cli_change_nothing(dev_env, tmp_path, monkeypatch):
    monkeypatch.setenv("STRATAGEM_APPROVER_KEYS", ALICE.public_line())
    monkeypatch.delenv("STRATAGEM_SIGNING_KEY", raising=False)
    async with harness_for(dev_env, tmp_path) as harness:
        run = await harness.start(PAY)
        await harness.wait_for(run, lambda s: bool(s.pending))
        decision = json.dumps({"by": "alice", "revision": 1})

        update = await temporal(
            dev_env, "workflow", "update", "execute", "--workflow-id", run.id, "--name", "approve", "--input", decision
        )
        assert update.returncode != 0 and "only signed decisions" in update.stdout + update.stderr

        signal = await temporal(
            dev_env, "workflow", "signal", "--workflow-id", run.id, "--name", "approve_signal", "--input", decision
        )
        assert signal.returncode == 0, signal.stderr  # a signal cannot be refused: it is recorded as ignored
        forged = MALLORY.sign(run.id, "approve", ApproveInput(by="alice", revision=1)).model_copy(
            update={"signer": "alice"}
        )
        await run.handle.signal("approve_signal", forged)
        for _ in range(100):
            ledger = await run.ledger()
            if len([e for e in ledger.events if e.kind is EventKind.signal_ignored]) == 2:
                break
            await asyncio.sleep(0.05)
        ignored = [e for e in ledger.events if e.kind is EventKind.signal_ignored]
        assert len(ignored) == 2 and all(e.message.startswith("not verified:") for e in ignored)
        assert not ledger.decisions and (await run.status()).phase.value == "awaiting_approval"
        assert harness.calls() == []  # nothing ran

        with pytest.raises(DecisionRefusedError, match="does not trust"):
            await RunHandle(run.handle, signer=MALLORY).approve(ApproveInput(by="mallory", revision=1))

        # Alice's own signed approval goes through, and the ledger says it was verified.
        await RunHandle(run.handle, signer=ALICE).approve(ApproveInput(by="alice", revision=1))
        await run.result()
        [approval] = (await run.ledger()).decisions
        assert approval.by == "alice" and approval.signed_by == "alice"
        assert [c["label"] for c in harness.calls()] == ["paid"]


async def test_a_run_cannot_approve_itself_where_decisions_are_signed(dev_env, tmp_path, monkeypatch):
    monkeypatch.setenv("STRATAGEM_APPROVER_KEYS", ALICE.public_line())
    async with harness_for(dev_env, tmp_path) as harness:
        run = await harness.start(PAY, auto_approve=True)
        with pytest.raises(Exception) as caught:
            await run.result()
        assert "may not approve itself" in str(caught.value.__cause__ or caught.value)
        assert harness.calls() == []


async def test_the_cli_signs_with_the_key_keygen_wrote(dev_env, tmp_path, monkeypatch):
    from support.cli import acli

    home = tmp_path / "home"
    env = {**os.environ, "STRATAGEM_HOME": str(home)}
    made = await acli("keygen", "alice", "--json", env=env)
    assert made.returncode == 0, made.stderr
    keys = json.loads(made.stdout)
    assert oct(Path(keys["private_key_file"]).stat().st_mode & 0o777) == "0o600"
    monkeypatch.setenv("STRATAGEM_APPROVER_KEYS", keys["approver_key"])
    async with harness_for(dev_env, tmp_path) as harness:
        run = await harness.start(PAY)
        await harness.wait_for(run, lambda s: bool(s.pending))
        env.update(
            TEMPORAL_ADDRESS=dev_env.client.service_client.config.target_host,
            TEMPORAL_TASK_QUEUE=harness.task_queue,
            STRATAGEM_STORE=str(harness.store.root),
            STRATAGEM_APPROVER_KEYS=keys["approver_key"],
        )
        unsigned = await acli("approve", run.id, "--revision", "1", "--by", "alice", env=env)
        assert unsigned.returncode != 0 and "only signed decisions" in unsigned.stderr
        mismatch = await acli(
            "approve", run.id, "--by", "bob", env={**env, "STRATAGEM_SIGNING_KEY": keys["private_key_file"]}
        )
        assert mismatch.returncode == 2 and "does not match the signing key's name 'alice'" in mismatch.stderr
        done = await acli(
            "approve", run.id, "--revision", "1", env={**env, "STRATAGEM_SIGNING_KEY": keys["private_key_file"]}
        )
        assert done.returncode == 0, done.stderr
        await run.result()
        status = await acli("status", run.id, env=env)
        assert "approve revision 1 by alice (signed by alice, via update)" in status.stdout
        audit = await acli("audit", run.id, env=env)
        decisions = [json.loads(line) for line in audit.stdout.splitlines() if '"signed_by"' in line]
        assert decisions and decisions[0]["signed_by"] == "alice"
