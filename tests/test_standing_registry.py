"""The standing approvals registry (workflows/standing_registry.py) on the time-skipping server:
a signed grant is recorded and listed, revoked by a signed revocation; and what an attacker who
reaches the Temporal frontend sends it (a grant nobody signed, one signed by a key the workers do
not trust, one altered after it was signed, a registry started with grants in its input) is
refused, and the registry holds nothing it did not check."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from temporalio.client import WorkflowExecutionStatus, WorkflowUpdateFailedError
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.service import RPCError
from temporalio.worker import Replayer

from stratagem.common.errors import DecisionRefusedError
from stratagem.common.signing import Signer
from stratagem.domain.process import ProcessSpec
from stratagem.domain.standing import (
    GRANT_KIND,
    GRANT_UPDATE,
    LIST_QUERY,
    REGISTRY_WORKFLOW,
    Grant,
    Registry,
    parse_bound,
    registry_id,
)
from stratagem.standing_approvals import grant_standing, list_standing, revoke_standing
from stratagem.temporal.plugin import StratagemPlugin
from stratagem.workflows import StandingApprovals

pytestmark = pytest.mark.workflow


@pytest.fixture(autouse=True)
async def replayed(harness):
    """After each test: the registry's history replays (deterministic), and it is ended."""
    yield
    await replay_registry(harness)


async def replay_registry(harness) -> None:
    handle = harness.client.get_workflow_handle(registry_id(harness.task_queue))
    try:
        history = await handle.fetch_history()
    except RPCError:
        return
    await Replayer(
        workflows=[StandingApprovals], plugins=[StratagemPlugin(harness.client.data_converter)]
    ).replay_workflow(history)
    if (await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
        await handle.terminate(reason="test finished")


PAYOUT = ProcessSpec.model_validate(
    {
        "name": "payout",
        "version": "1",
        "inputs": {"vendor": {"type": "string"}, "amount": {"type": "number", "minimum": 0}},
        "goal": "Pay ${inputs.vendor}",
        "steps": [
            {"id": "pay", "title": "Pay", "tool": "record", "args": {"label": "pay ${inputs.amount}"}, "risk": "high"}
        ],
    }
)


def unsigned_grant(gid: str = "forged", by: str = "dana") -> Grant:
    return Grant(
        id=gid,
        by=by,
        process=PAYOUT.name,
        version=PAYOUT.version,
        digest=PAYOUT.digest,
        spec=PAYOUT,
        bounds=[parse_bound("amount<=1000000", PAYOUT)],
        granted_at=datetime.now(UTC),
    )


async def _refused(harness, grant: Grant) -> str:
    handle = await harness.client.start_workflow(
        REGISTRY_WORKFLOW,
        id=registry_id(harness.task_queue),
        task_queue=harness.task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
    )
    with pytest.raises(WorkflowUpdateFailedError) as caught:
        await handle.execute_update(GRANT_UPDATE, grant, result_type=str)
    return str(caught.value.cause)


async def test_a_signed_grant_is_listed_and_a_signed_revocation_ends_it(harness):
    grant = await grant_standing(
        harness.client, PAYOUT, by="dana", bounds=["amount<=5000"], steps=["pay"], task_queue=harness.task_queue
    )
    assert grant.signer == "dana" and grant.signature
    registry = await list_standing(harness.client, task_queue=harness.task_queue)
    assert [g.id for g in registry.grants] == [grant.id]
    assert str(registry.grants[0].bounds[0]) == "amount<=5000"
    await revoke_standing(harness.client, grant.id, by="lee", reason="vendor audit", task_queue=harness.task_queue)
    registry = await list_standing(harness.client, task_queue=harness.task_queue)
    assert registry.revoked(grant.id) is not None and registry.revoked(grant.id).by == "lee"
    with pytest.raises(DecisionRefusedError, match=f"standing approval {grant.id} was revoked already, by lee"):
        await revoke_standing(harness.client, grant.id, by="lee", reason="again", task_queue=harness.task_queue)
    with pytest.raises(DecisionRefusedError, match="there is no standing approval nope"):
        await revoke_standing(harness.client, "nope", by="lee", reason="typo", task_queue=harness.task_queue)


async def test_the_registry_refuses_what_nobody_trusted_signed(harness):
    assert "accepts only signed decisions" in await _refused(harness, unsigned_grant())
    # A name no key of the session's home has: another test's "mallory" made one there, which
    # the worker trusts, and the forged grant was then refused for its signature instead.
    name = f"mallory-{uuid.uuid4().hex[:6]}"
    mallory = Signer.generate(name)  # a key no worker trusts
    rid = registry_id(harness.task_queue)
    untrusted = mallory.sign(rid, GRANT_KIND, unsigned_grant(by=name))
    assert "a key this worker does not trust" in await _refused(harness, untrusted)
    # dana's own key, for a grant by somebody else: a key signs only for its own name.
    from stratagem.client import decision_signer

    dana = decision_signer("dana")
    assert "but is signed by 'dana'" in await _refused(harness, dana.sign(rid, GRANT_KIND, unsigned_grant(by="lee")))
    # Signed, then loosened on the way.
    signed = dana.sign(rid, GRANT_KIND, unsigned_grant())
    loosened = signed.model_copy(update={"bounds": [parse_bound("amount<=99999999", PAYOUT)]})
    assert "does not match" in await _refused(harness, loosened)
    # Signed for another task queue's registry.
    elsewhere = dana.sign(registry_id("another-queue"), GRANT_KIND, unsigned_grant())
    assert "does not match" in await _refused(harness, elsewhere)
    registry = await list_standing(harness.client, task_queue=harness.task_queue)
    assert registry.grants == []


async def test_a_registry_started_with_grants_in_its_input_holds_none_of_them(harness):
    # Started by the attacker before anyone granted anything, with a state of their own making.
    handle = await harness.client.start_workflow(
        REGISTRY_WORKFLOW,
        Registry(grants=[unsigned_grant()]),
        id=registry_id(harness.task_queue),
        task_queue=harness.task_queue,
    )
    held = await handle.query(LIST_QUERY, result_type=Registry)
    assert held.grants == []


async def test_a_grant_that_cannot_be_is_refused_before_it_is_sent(harness):
    with pytest.raises(ValueError, match="payout has no input 'total'"):
        await grant_standing(harness.client, PAYOUT, by="dana", bounds=["total<=5"], task_queue=harness.task_queue)
    with pytest.raises(ValueError, match="payout v1 has no step ship"):
        await grant_standing(harness.client, PAYOUT, by="dana", steps=["ship"], task_queue=harness.task_queue)


async def test_the_registry_continues_as_new_with_every_grant_and_revocation(harness):
    """Past its history limit the registry hands its state to its next run: nothing granted or
    revoked is lost, and the next run takes the state only because it is its own continuation."""
    import asyncio

    first = await grant_standing(harness.client, PAYOUT, by="dana", grant_id="keep", task_queue=harness.task_queue)
    handle = harness.client.get_workflow_handle(registry_id(harness.task_queue))
    before = (await handle.describe()).run_id
    ids = [f"g{n}" for n in range(460)]
    for batch in range(0, len(ids), 20):
        await asyncio.gather(
            *(
                grant_standing(harness.client, PAYOUT, by="dana", grant_id=gid, task_queue=harness.task_queue)
                for gid in ids[batch : batch + 20]
            )
        )
    await revoke_standing(harness.client, "g7", by="lee", reason="done", task_queue=harness.task_queue)
    after = await harness.client.get_workflow_handle(registry_id(harness.task_queue)).describe()
    assert after.run_id != before  # it continued as new at least once
    registry = await list_standing(harness.client, task_queue=harness.task_queue)
    assert registry.grants[0].id == first.id and sorted(g.id for g in registry.grants[1:]) == sorted(ids)
    assert [r.id for r in registry.revocations] == ["g7"]
