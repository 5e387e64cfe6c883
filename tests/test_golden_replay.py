"""Runs already in flight must replay on today's workflow code: every golden history replays.

A change that reorders, adds or drops commands for an old history fails here; such a change
needs `workflow.patched(...)` (see RELIABILITY.md, "Changing the workflow").
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from stratagem.payloads import stratagem_data_converter
from temporalio.worker import Replayer

from golden_scenarios import SCENARIOS
from stratagem.worker import workflow_runner
from workflows import StratagemRun

GOLDEN = Path(__file__).with_name("golden")
FILES = sorted(GOLDEN.glob("*.json"))


def test_every_scenario_has_a_golden_history():
    captured = {path.stem.rsplit("-", 1)[0] if path.stem[-1].isdigit() and "-" in path.stem else path.stem for path in FILES}
    assert captured == set(SCENARIOS), "run `python tests/capture_golden.py` for the missing scenarios"


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
async def test_golden_history_replays(path):
    data = json.loads(path.read_text())
    history = WorkflowHistory.from_json(data["workflow_id"], data["history"])
    replayer = Replayer(workflows=[StratagemRun], data_converter=stratagem_data_converter, workflow_runner=workflow_runner())
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, f"{path.name} no longer replays: {result.replay_failure}"
