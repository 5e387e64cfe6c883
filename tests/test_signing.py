"""Signed decisions (stratagem.common.signing): the signature proves who decided; a claim does not.

The attacks use the plain `temporal` CLI, as anyone who can reach the frontend could."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from conftest import harness_for
from temporalio.client import WorkflowUpdateFailedError

from stratagem.client import RunHandle, sign_auto_approval, start_run
from stratagem.common.errors import ConfigError, DecisionRefusedError
from stratagem.common.signing import DecisionPolicy, Keyring, Signer, Verdict
from stratagem.domain.ledger import EventKind
from stratagem.domain.plan import PlanDraft
from stratagem.domain.run_types import RUN_LEVEL, WORKFLOW_NAME, ApproveInput, RunInput, RunOptions, RunResult
from stratagem.io.binaries import temporal_cli

ALICE = Signer.generate("alice")
# A key no home of the tests holds (the session home has a "mallory" of its own).
MALLORY = Signer.generate("mallory-outside")
CONSOLE = Signer.generate("console")  # a review console: it authenticates people and signs for them


@pytest.fixture(autouse=True)
def _no_issuers_from_the_shell(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STRATAGEM_ISSUER_KEYS", raising=False)


def policy(*signers: Signer, allow_unsigned: bool = False, issuers: tuple[Signer, ...] = ()) -> DecisionPolicy:
    env = {"STRATAGEM_APPROVER_KEYS": ",".join(s.public_line() for s in signers)}
    if issuers:
        env["STRATAGEM_ISSUER_KEYS"] = ",".join(s.public_line() for s in issuers)
    if allow_unsigned:
        env["STRATAGEM_ALLOW_UNSIGNED"] = "1"
    return DecisionPolicy.from_env(env)


# --- the signature ------------------------------------------------------------------------------


@pytest.mark.unit
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


@pytest.mark.unit
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


@pytest.mark.unit
def test_an_issuer_signs_for_the_person_it_authenticated_and_only_as_signed():
    trusted = policy(ALICE, issuers=(CONSOLE,))
    issued = CONSOLE.issue("run-1", "approve", ApproveInput(by="whoever the browser said", revision=1), by="alice")
    assert issued.by == "alice" and issued.signer == "console"
    verdict = trusted.verify("run-1", "approve", issued)
    assert verdict.refused is None and verdict.signer == "console"
    assert verdict.issuer and verdict.on_behalf_of == "alice"
    # `sign` keeps `by` as it is, so a console may also build the decision itself.
    signed = CONSOLE.sign("run-1", "approve", ApproveInput(by="bob", revision=1))
    assert signed.by == "bob" and trusted.verify("run-1", "approve", signed).on_behalf_of == "bob"
    # `by` is signed: given to another person after signing, it no longer verifies.
    as_mallory = issued.model_copy(update={"by": "mallory"})
    assert "does not match" in trusted.verify("run-1", "approve", as_mallory).refused
    # Nor on another run, nor as another kind of decision.
    assert "does not match" in trusted.verify("run-2", "approve", issued).refused
    assert "does not match" in trusted.verify("run-1", "reject", issued).refused
    # An approver's key is no issuer: alice may still sign only for alice.
    for_bob = ALICE.sign("run-1", "approve", ApproveInput(by="bob", revision=1))
    assert "signed by 'alice'" in trusted.verify("run-1", "approve", for_bob).refused
    assert trusted.verify("run-1", "approve", ALICE.sign("run-1", "approve", ApproveInput(by="alice"))).issuer is False
    # Mallory's key named as the console's: the console's public key does not verify it.
    forged = MALLORY.sign("run-1", "approve", ApproveInput(by="alice", revision=1)).model_copy(
        update={"signer": "console"}
    )
    assert "does not match" in trusted.verify("run-1", "approve", forged).refused
    with pytest.raises(ValueError, match="names the person"):
        CONSOLE.issue("run-1", "approve", ApproveInput(by="x"), by=" ")


@pytest.mark.unit
def test_issuer_keys_are_a_setting_of_their_own():
    # Listed only as an issuer, the console's key makes the worker refuse unsigned decisions.
    only_console = DecisionPolicy.from_env({"STRATAGEM_ISSUER_KEYS": CONSOLE.public_line()})
    assert only_console.requires_signatures and not only_console.keys
    assert "only signed decisions" in only_console.verify("r", "approve", ApproveInput(by="alice")).refused
    # Listed as an approver, the console's key signs only for "console".
    approver = policy(CONSOLE)
    issued = CONSOLE.issue("r", "approve", ApproveInput(by="x"), by="alice")
    assert "signed by 'console'" in approver.verify("r", "approve", issued).refused
    # One name cannot be both.
    with pytest.raises(ConfigError, match="console listed in both STRATAGEM_APPROVER_KEYS and STRATAGEM_ISSUER_KEYS"):
        DecisionPolicy.from_env(
            {"STRATAGEM_APPROVER_KEYS": CONSOLE.public_line(), "STRATAGEM_ISSUER_KEYS": CONSOLE.public_line()}
        )
    # The same format and the same one-line errors as the approvers' keys.
    for value, expected in [
        ("console", "must be NAME:PUBLIC_KEY"),
        ("console:AAAA", "not 32"),
        ("@/nope", "cannot read"),
    ]:
        with pytest.raises(ConfigError, match=expected) as caught:
            DecisionPolicy.from_env({"STRATAGEM_ISSUER_KEYS": value})
        assert "STRATAGEM_ISSUER_KEYS" in str(caught.value)
    # Unset (or empty): nothing changes.
    for env in ({}, {"STRATAGEM_ISSUER_KEYS": ""}):
        plain = DecisionPolicy.from_env({"STRATAGEM_APPROVER_KEYS": ALICE.public_line(), **env})
        assert plain.issuer_keys == {} and set(plain.keys) == {"alice"} and plain.requires_signatures
        verdict = plain.verify("r", "approve", ALICE.sign("r", "approve", ApproveInput(by="alice")))
        assert verdict == Verdict(signer="alice") and not verdict.issuer
        assert "does not trust" in plain.verify("r", "approve", issued).refused
    empty = DecisionPolicy.from_env({"STRATAGEM_ISSUER_KEYS": ""})
    assert empty.requires_signatures and empty.legacy_unsigned


@pytest.mark.unit
def test_signing_is_the_default_and_only_the_operator_can_turn_it_off():
    # No key configured: unsigned decisions are refused all the same, saying how to sign.
    default = DecisionPolicy.from_env({})
    refused = default.verify("r", "approve", ApproveInput(by="anyone")).refused
    assert refused and "only signed decisions" in refused and "STRATAGEM_HOME" in refused
    # Runs from before the default keep the rule they started under (no key configured: accepted).
    assert default.verify("r", "approve", ApproveInput(by="anyone"), legacy=True) == Verdict()
    assert "only signed" in policy(ALICE).verify("r", "approve", ApproveInput(by="x"), legacy=True).refused
    # The operator's switch, said at the worker's start.
    opened = policy(ALICE, allow_unsigned=True)
    assert opened.verify("r", "approve", ApproveInput(by="x")).refused is None
    assert "unsigned ones are accepted" in opened.describe()
    assert "signed only; trusting alice" in policy(ALICE).describe()


@pytest.mark.unit
def test_a_home_trusts_the_keys_it_makes_even_after_the_worker_started(tmp_path: Path):
    home = tmp_path / "home"
    worker = DecisionPolicy.from_env({"STRATAGEM_HOME": str(home)})
    assert worker.keyring is not None and not worker.keys
    # Bob decides for the first time from this home: his key is made then, as ssh-keygen would.
    keyring = Keyring.of_home(home)
    bob = keyring.signer("bob")
    assert (home / "keys" / "bob.key").stat().st_mode & 0o777 == 0o600
    assert (home / "keys").stat().st_mode & 0o777 == 0o700
    assert keyring.signer("bob") == bob  # made once, then read
    signed = bob.sign("r", "approve", ApproveInput(by="bob"))
    assert worker.verify("r", "approve", signed).signer == "bob"  # read again on an unknown signer
    # A key file under another person's name is never trusted for either of them.
    (home / "keys" / "carol.key").write_text(Signer.generate("mallory").private_line())
    mallory = Signer.from_file(home / "keys" / "carol.key")
    assert (
        "does not trust"
        in worker.verify("r", "approve", mallory.sign("r", "approve", ApproveInput(by="mallory"))).refused
    )
    # A configured key keeps its name: the home cannot replace alice's.
    (home / "keys" / "alice.key").write_text(Signer.generate("alice").private_line())
    configured = DecisionPolicy.from_env({"STRATAGEM_HOME": str(home), "STRATAGEM_APPROVER_KEYS": ALICE.public_line()})
    assert configured.keys["alice"] == ALICE.public_key
    forged = Signer.from_file(home / "keys" / "alice.key").sign("r", "approve", ApproveInput(by="alice"))
    assert "does not match" in configured.verify("r", "approve", forged).refused
    # Issuers of the home (a console's key) sign for the people they authenticate.
    console = keyring.issuer()
    issued = console.issue("r", "approve", ApproveInput(by="x"), by="dana")
    assert worker.verify("r", "approve", issued).on_behalf_of == "dana"
    with pytest.raises(ConfigError, match="not a key name"):
        keyring.signer("Dana Smith")


@pytest.mark.unit
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


@pytest.mark.system
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
        forged = MALLORY.sign(
            run.id, "approve", ApproveInput(by="alice", revision=1), await run.execution()
        ).model_copy(update={"signer": "alice"})
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


@pytest.mark.system
async def test_a_console_approves_for_the_person_it_authenticated_and_nobody_else(dev_env, tmp_path, monkeypatch):
    monkeypatch.setenv("STRATAGEM_APPROVER_KEYS", ALICE.public_line())
    monkeypatch.setenv("STRATAGEM_ISSUER_KEYS", CONSOLE.public_line())
    monkeypatch.delenv("STRATAGEM_SIGNING_KEY", raising=False)
    async with harness_for(dev_env, tmp_path) as harness:
        run = await harness.start(PAY)
        await harness.wait_for(run, lambda s: bool(s.pending))
        handle = RunHandle(run.handle)  # sends signed decisions as they are

        with pytest.raises(WorkflowUpdateFailedError) as unsigned:  # as any client could send it
            await run.handle.execute_update("approve", ApproveInput(by="alice", revision=1))
        assert "only signed decisions" in str(unsigned.value.cause)
        with pytest.raises(DecisionRefusedError, match="signed by 'alice'"):  # an approver is no issuer
            await handle.approve(
                ALICE.sign(run.id, "approve", ApproveInput(by="bob", revision=1), await run.execution())
            )
        issued = CONSOLE.issue(
            run.id, "approve", ApproveInput(by="-", revision=1), by="alice", execution=await run.execution()
        )
        with pytest.raises(DecisionRefusedError, match="does not match"):  # given to someone else after signing
            await handle.approve(issued.model_copy(update={"by": "mallory"}))
        assert not (await run.ledger()).decisions and harness.calls() == []

        await handle.approve(issued)
        await run.result()
        [approval] = (await run.ledger()).decisions
        assert approval.by == "alice" and approval.signed_by == "console"
        assert [c["label"] for c in harness.calls()] == ["paid"]


@pytest.mark.system
async def test_a_run_approves_itself_only_with_a_trusted_persons_signed_start(dev_env, tmp_path, monkeypatch):
    monkeypatch.setenv("STRATAGEM_APPROVER_KEYS", ALICE.public_line())
    async with harness_for(dev_env, tmp_path) as harness:
        plan = PlanDraft.model_validate(PAY)
        signed = RunInput(plan=plan, options=RunOptions(auto_approve=True), level=RUN_LEVEL)
        # Unsigned, as a start through the frontend by anyone would be.
        bare = await start_run(harness.client, signed, task_queue=harness.task_queue, signer=ALICE)
        bare_input = signed.model_copy(update={"auto_approval": None})
        raw = await harness.client.start_workflow(
            WORKFLOW_NAME, bare_input, id=f"{bare.id}-raw", task_queue=harness.task_queue, result_type=RunResult
        )
        with pytest.raises(Exception) as caught:
            await raw.result()
        assert "only when a trusted person signed its start" in str(caught.value.__cause__ or caught.value)
        # Alice's signature lifted onto another input (a payee swapped): refused.
        swapped = RunInput.model_validate(
            {**signed.model_dump(), "plan": {**PAY, "steps": [{**PAY["steps"][0], "args": {"label": "mallory"}}]}}
        )
        lifted_id = f"lifted-{uuid.uuid4().hex[:6]}"
        lifted = sign_auto_approval(signed, lifted_id, signer=ALICE)
        theft = await harness.client.start_workflow(
            WORKFLOW_NAME,
            swapped.model_copy(update={"auto_approval": lifted.auto_approval}),
            id=lifted_id,
            task_queue=harness.task_queue,
            result_type=RunResult,
        )
        with pytest.raises(Exception) as caught:
            await theft.result()
        assert "for another input" in str(caught.value.__cause__ or caught.value)
        # Signed by a key the workers do not trust, or long ago: refused.
        mallory = await start_run(
            harness.client,
            signed,
            task_queue=harness.task_queue,
            signer=MALLORY,
            run_id=f"by-mallory-{uuid.uuid4().hex[:6]}",
        )
        stale = await start_run(
            harness.client,
            signed,
            task_queue=harness.task_queue,
            signer=ALICE,
            run_id=f"stale-{uuid.uuid4().hex[:6]}",
            signed_at=datetime.now(UTC) - timedelta(hours=1),
        )
        for handle, why in ((mallory, "does not trust"), (stale, "out of date")):
            with pytest.raises(Exception) as caught:
                await handle.result()
            assert why in str(caught.value.__cause__ or caught.value)
        # Alice's own signed start runs (once: no other start paid), and the ledger says who let it.
        result = await bare.result()
        assert result.status.value == "succeeded" and [c["label"] for c in harness.calls()] == ["paid"]
        started = next(e for e in (await bare.ledger()).events if e.kind is EventKind.run_started)
        assert started.data["auto_approve_by"] == "alice"


@pytest.mark.system
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
        # Bob decides from this home for the first time: his key is made and signs, but the workers
        # were told to trust alice's key only.
        bob = await acli("approve", run.id, "--revision", "1", "--by", "bob-outside", env=env)
        assert "made a signing key for bob-outside" in bob.stdout + bob.stderr
        assert bob.returncode != 0 and "a key this worker does not trust" in bob.stderr
        mismatch = await acli(
            "approve", run.id, "--by", "bob", env={**env, "STRATAGEM_SIGNING_KEY": keys["private_key_file"]}
        )
        assert mismatch.returncode == 2 and "does not match the signing key's name 'alice'" in mismatch.stderr
        # Alice's key is the one keygen wrote in the home: `--by alice` signs with it, no variable needed.
        done = await acli("approve", run.id, "--revision", "1", "--by", "alice", env=env)
        assert done.returncode == 0, done.stderr
        assert "made a signing key" not in done.stdout + done.stderr
        await run.result()
        status = await acli("status", run.id, env=env)
        assert "approve revision 1 by alice (signed by alice, via update)" in status.stdout
        audit = await acli("audit", run.id, env=env)
        decisions = [json.loads(line) for line in audit.stdout.splitlines() if '"signed_by"' in line]
        assert decisions and decisions[0]["signed_by"] == "alice"


@pytest.mark.unit
def test_a_person_cannot_take_the_name_of_the_homes_console(tmp_path: Path):
    """`stratagem approve --by console` would make a person's key that shadows the console's issuer
    key (a configured or home name keeps its first key), and every console decision would fail."""
    keyring = Keyring.of_home(tmp_path / "home")
    keyring.issuer()  # the console has started here once
    with pytest.raises(ConfigError, match="is the name of this home's issuer"):
        keyring.signer("console")
    keyring.signer("dana")
    with pytest.raises(ConfigError, match="a person's key is named 'dana'"):
        keyring.issuer("dana")
