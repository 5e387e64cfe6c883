"""The status search attribute and the approval inbox, on the dev server with several runs in
different states. `stratagem list --status awaiting-approval` is a visibility query: it finds
runs across the namespace, whichever worker or client started them."""

from __future__ import annotations

import asyncio
import json

import pytest
from support.cli import acli
from support.plans import GREETING, step
from temporalio.client import Client

from stratagem.client import STATUS_KEY, has_status_attribute
from stratagem.domain.run_types import AnswerInput, ApproveInput, Phase, RejectInput

pytestmark = pytest.mark.system


async def status_attribute(run) -> str | None:
    return (await run.handle.describe()).typed_search_attributes.get(STATUS_KEY)


async def eventually(check, timeout: float = 20):
    """Visibility is eventually consistent: poll until `check()` returns something truthy."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = await check()
        if value or asyncio.get_running_loop().time() > deadline:
            return value
        await asyncio.sleep(0.2)


async def test_the_inbox_lists_every_run_waiting_for_a_person_oldest_first(cli_env):
    env, harness = cli_env
    assert await has_status_attribute(harness.client)
    human = {
        "goal": "ask finance",
        "steps": [{"id": "terms", "title": "Terms", "kind": "human", "instructions": "Payment terms?"}],
    }
    slow = {"goal": "busy", "steps": [step("wait", "slow", label="busy", seconds=30)]}

    review = await harness.start(GREETING)  # waits for plan approval: in the inbox
    await harness.wait_for(review, lambda s: s.phase is Phase.awaiting_approval)
    answer = await harness.start(human, auto_approve=True)  # waits for an answer: in the inbox
    await harness.wait_for(answer, lambda s: bool(s.pending))
    busy = await harness.start(slow, auto_approve=True)  # running, nobody needed: not in the inbox
    await harness.wait_for(busy, lambda s: s.phase is Phase.running)
    done = await harness.start(GREETING, auto_approve=True)  # finished: not in the inbox
    assert (await done.result()).status is Phase.succeeded
    rejected = await harness.start(GREETING)  # rejected: not in the inbox
    await harness.wait_for(rejected, lambda s: s.phase is Phase.awaiting_approval)
    await rejected.reject(RejectInput(by="bob", reason="not now"))

    assert await eventually(lambda: _is(review, "awaiting_approval"))
    assert await eventually(lambda: _is(answer, "awaiting_approval"))
    assert await eventually(lambda: _is(busy, "running"))
    assert await eventually(lambda: _is(done, "succeeded"))
    assert await eventually(lambda: _is(rejected, "rejected"))

    async def mine() -> list[dict]:
        listed = await acli("list", "--status", "awaiting-approval", "--json", env=env)
        assert listed.returncode == 0, listed.stderr
        ours = {review.id, answer.id, busy.id, done.id, rejected.id}
        return [row for row in json.loads(listed.stdout) if row["run_id"] in ours]

    rows = await mine()
    assert [row["run_id"] for row in rows] == [review.id, answer.id], rows  # the longest waiting first
    assert rows[0]["waiting_for"] == ["approval of revision 1"] and rows[0]["goal"] == GREETING["goal"]
    assert rows[1]["waiting_for"] == ["an answer for step terms"]
    assert rows[0]["since"] < rows[1]["since"]

    text = await acli("list", "--status", "awaiting-approval", env=env)
    lines = [line for line in text.stdout.splitlines() if line.startswith((review.id, answer.id))]
    assert [line.split()[0] for line in lines] == [review.id, answer.id]
    assert "an answer for step terms" in lines[1]

    # Decided runs leave the inbox; an approved run is running, then succeeded.
    await review.approve(ApproveInput(by="bob", revision=1))
    await answer.answer(AnswerInput(by="bob", step_id="terms", answer="30 days"))
    assert (await review.result()).status is Phase.succeeded
    assert await eventually(lambda: _is(review, "succeeded"))
    assert await eventually(lambda: _is(answer, "succeeded"))
    assert await eventually(lambda: _empty(mine))
    await busy.cancel()


async def _is(run, expected: str) -> bool:
    return await status_attribute(run) == expected


async def _empty(listing) -> bool:
    return await listing() == []


async def test_the_inbox_without_the_search_attribute_says_how_to_register_it(cli_env, dev_env):
    env, _ = cli_env
    namespace = "no-status-attribute"
    client: Client = dev_env.client
    from google.protobuf.duration_pb2 import Duration
    from temporalio.api.workflowservice.v1 import RegisterNamespaceRequest

    try:
        await client.workflow_service.register_namespace(
            RegisterNamespaceRequest(namespace=namespace, workflow_execution_retention_period=Duration(seconds=86400))
        )
    except Exception as exc:  # already registered by an earlier run of this test on the same server
        assert "already" in str(exc).lower(), exc
    listed = await acli("list", "--status", "awaiting-approval", env={**env, "TEMPORAL_NAMESPACE": namespace})
    assert listed.returncode == 2 and "Traceback" not in listed.stderr
    assert (
        "the approval inbox needs the StratagemStatus search attribute in namespace no-status-attribute"
        in listed.stderr
    )
    assert "temporal operator search-attribute create --name StratagemStatus --type Keyword" in listed.stderr
