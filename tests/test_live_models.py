"""The wire-format scenarios against the real services, when you have keys.

    STRATAGEM_LIVE_MODELS=1 OPENAI_API_KEY=... ANTHROPIC_API_KEY=... python -m pytest tests/test_live_models.py

Models default to small, cheap ones; override with STRATAGEM_LIVE_OPENAI_MODEL and
STRATAGEM_LIVE_ANTHROPIC_MODEL. Without the switch or without a provider's key, that
provider's tests are skipped: CI has no keys and no internet.
"""

from __future__ import annotations

import os

import pytest

from stratagem.domain.ledger import ToolCallStatus

pytestmark = pytest.mark.workflow

LIVE = os.environ.get("STRATAGEM_LIVE_MODELS") == "1"
MODELS = {
    "openai": ("OPENAI_API_KEY", os.environ.get("STRATAGEM_LIVE_OPENAI_MODEL", "gpt-4.1-mini")),
    "anthropic": ("ANTHROPIC_API_KEY", os.environ.get("STRATAGEM_LIVE_ANTHROPIC_MODEL", "claude-haiku-4-5")),
}


def live_model(provider: str) -> str:
    key, name = MODELS[provider]
    if not LIVE:
        pytest.skip("set STRATAGEM_LIVE_MODELS=1 to call the real services")
    if not os.environ.get(key):
        pytest.skip(f"{key} is not set")
    return f"{provider}:{name}"


@pytest.mark.parametrize("provider", sorted(MODELS))
async def test_live_planning_produces_a_valid_plan_and_usage(harness, provider):
    model = live_model(provider)
    run = await harness.start(
        goal="Add 2 and 3 with the add tool, then record the sum with the record tool.",
        planner=model,
        auto_approve=True,
    )
    result = await run.result()
    ledger = await run.ledger()
    assert any(c["tool"] == "record" for c in harness.calls()), result
    assert ledger.usage.calls >= 1 and ledger.usage.input_tokens > 0 and ledger.usage.output_tokens > 0


@pytest.mark.parametrize("provider", sorted(MODELS))
async def test_live_executor_uses_only_its_tools(harness, provider):
    model = live_model(provider)
    plan = {
        "goal": "read a note",
        "steps": [
            {
                "id": "read",
                "title": "Read the note",
                "kind": "llm",
                "tools": ["read_note"],
                "instructions": "Call read_note with name 'n1' and report in one sentence what it says.",
            }
        ],
    }
    run = await harness.start(plan, auto_approve=True, executor=model)
    await run.result()
    record = (await run.ledger()).steps["read"]
    assert any(c.tool == "read_note" and c.status is ToolCallStatus.ok for c in record.tool_calls)
    assert not [c for c in harness.calls() if c["tool"] == "delete_records"]  # whatever the note urged
