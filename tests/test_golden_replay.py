"""Runs already in flight must replay on today's workflow code: every golden history replays.

A change that reorders, adds or drops commands for an old history fails here; such a change
needs `workflow.patched(...)` (see RELIABILITY.md, "Changing the workflow").
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from capture_golden import GENERATION, KEYS_SUFFIX
from support.golden_scenarios import SCENARIOS
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from stratagem.common.signing import APPROVER_KEYS_ENV, DecisionPolicy
from stratagem.io.payloads import stratagem_data_converter
from stratagem.temporal.plugin import StratagemPlugin
from stratagem.workflows import StratagemRun

pytestmark = pytest.mark.unit

GOLDEN = Path(__file__).with_name("golden")
FILES = sorted(GOLDEN.rglob("*.json"))


def scenarios_in(folder: Path) -> set[str]:
    stems = [path.stem for path in folder.glob("*.json")]
    return {stem.rsplit("-", 1)[0] if stem[-1].isdigit() and "-" in stem else stem for stem in stems}


def test_every_scenario_has_a_golden_history():
    # Every scenario in the generation today's code writes; older generations keep what they had.
    assert scenarios_in(GOLDEN / GENERATION) == set(SCENARIOS), (
        f"run `python tests/capture_golden.py` to capture generation {GENERATION}"
    )
    assert len(scenarios_in(GOLDEN)) >= 7  # the first generation, from before generations had names


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(GOLDEN)) for p in FILES])
async def test_golden_history_replays(path):
    data = json.loads(path.read_text())
    history = WorkflowHistory.from_json(data["workflow_id"], data["history"])
    # A generation that signed its decisions replays trusting the keys it signed with, as a worker
    # must keep a retired key listed while runs it decided on are open.
    scenario = path.stem.rsplit("-", 1)[0] if path.stem[-1].isdigit() and "-" in path.stem else path.stem
    keys = path.with_name(scenario + KEYS_SUFFIX)
    policy = DecisionPolicy.from_env({APPROVER_KEYS_ENV: f"@{keys}"}) if keys.exists() else None
    plugin = StratagemPlugin(stratagem_data_converter, decision_policy=policy)
    replayer = Replayer(workflows=[StratagemRun], plugins=[plugin])
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, f"{path.name} no longer replays: {result.replay_failure}"
