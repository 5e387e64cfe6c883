from stratagem.ledger import StepStatus
from stratagem.run import ApproveInput, Phase

PLAN = {
    "goal": "greet a new customer",
    "steps": [
        {"id": "fetch_profile", "title": "Fetch profile", "tool": "fetch_profile", "args": {"user": "ada"}},
        {"id": "greet", "title": "Greet", "tool": "greet", "args": {"name": "${fetch_profile.name}"}, "depends_on": ["fetch_profile"]},
    ],
}


async def test_happy_path(harness):
    run = await harness.start(PLAN)
    status = await harness.wait_for(run, lambda s: s.phase is Phase.awaiting_approval)
    assert status.revision == 1
    await run.approve(ApproveInput(by="bob", revision=1))
    result = await run.result()
    assert result.status is Phase.succeeded
    assert result.outputs == {"greet": "Hello, Ada!"}
    ledger = await run.ledger()
    assert ledger.steps["greet"].status is StepStatus.succeeded
