"""The audit export: every plan revision, decision and event of a real run, in time order."""

from __future__ import annotations

import json

import pytest
from support.plans import SIDE_EFFECT, step

from stratagem.domain.plan import PlanDraft
from stratagem.domain.run_types import ApproveInput, ReviseInput

pytestmark = pytest.mark.workflow


async def test_audit_records_cover_revisions_decisions_and_events(harness):
    run = await harness.start(SIDE_EFFECT, by="alice")
    await harness.wait_for(run, lambda s: s.phase.value == "awaiting_approval")
    edited = PlanDraft.model_validate({"goal": "write", "steps": [step("first", "record", label="edited")]})
    await run.revise(ReviseInput(by="dave", plan=edited, reason="simpler"))
    await run.approve(ApproveInput(by="bob", revision=2, comment="ship it"))
    await run.result()

    records = list((await run.ledger()).audit_records())
    lines = [json.dumps(r) for r in records]  # every record is JSON-ready
    assert all(json.loads(line) for line in lines)
    revisions = [r for r in records if r["type"] == "plan_revision"]
    assert [(r["revision"], r["author"]["name"]) for r in revisions] == [(1, "alice"), (2, "dave")]
    decisions = [(r["action"], r["by"], r["revision"]) for r in records if r["type"] == "decision"]
    assert decisions == [("revise", "dave", 2), ("approve", "bob", 2)]
    events = [r for r in records if r["type"] == "event"]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert events[0]["kind"] == "run_started" and events[-1]["kind"] == "run_succeeded"
    # Time order: revision 2 appears before the approval of revision 2.
    index = {id(r): i for i, r in enumerate(records)}
    assert index[id(revisions[1])] < index[id(next(r for r in records if r.get("action") == "approve"))]
