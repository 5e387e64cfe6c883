"""One versioning scheme (stratagem.domain.run_levels): every behaviour change is a row of `Change`, the
workflow asks `workflows.core.has` and nothing else, and a run below a row's level asks its legacy
patch exactly as the code asked it before the table (histories of runs in flight hold the markers)."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pytest
from capture_golden import GENERATION

from stratagem.domain.ledger import Ledger
from stratagem.domain.run_levels import RUN_LEVEL, Change, reached
from stratagem.domain.run_types import RunOptions, RunState
from stratagem.workflows import core

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent


def test_the_patch_ids_are_the_ones_histories_hold() -> None:
    assert {c.name: (c.level, c.patch) for c in Change if c.patch} == {
        "PHASE_MEMO": (1, "phase-in-memo"),
        "ARCHIVE_EVENTS": (1, "archive-events"),
        "LOOSENED_REPLAN": (1, "replan-loosened-needs-a-person"),
        "NO_LITERAL_CREDENTIALS": (1, "no-literal-credentials"),
        "BUDGET_SHORT_OF_A_CALL": (1, "budget-short-of-a-call"),
        "BUDGET_HOLDS_HUMAN_STEPS": (1, "budget-holds-human-steps"),
        "PARTIAL_REAPPROVAL": (4, "partial-re-approval"),
        "REPAIRS": (4, "repair-instead-of-failure"),
        "TOOL_RISK_FLOOR": (4, "tool-risk-floor"),
        "SIGNED_DECISIONS": (7, "signed-decisions-by-default"),
    }


def test_every_row_is_its_own_and_within_the_level_this_code_runs() -> None:
    # An Enum makes a row with the same value an alias of another: each must stand alone.
    assert len(Change.__members__) == len(list(Change))
    assert len({c.patch for c in Change if c.patch}) == len([c for c in Change if c.patch])
    assert all(1 <= c.level <= RUN_LEVEL for c in Change)
    assert max(c.level for c in Change) == RUN_LEVEL


def test_the_generation_captured_today_is_of_todays_level() -> None:
    # Raising RUN_LEVEL without capturing a generation at it would leave the new paths unreplayed.
    assert GENERATION.endswith(f"-level{RUN_LEVEL}")


def test_every_marker_in_the_golden_histories_is_a_row() -> None:
    patches = {c.patch for c in Change}
    seen = set()
    for path in (ROOT / "tests" / "golden").rglob("*.json"):
        for event in json.loads(path.read_text())["history"]["events"]:
            details = event.get("markerRecordedEventAttributes", {}).get("details", {})
            for payload in details.get("patch-data", {}).get("payloads", []):
                seen.add(json.loads(base64.b64decode(payload["data"]))["id"])
    assert seen and seen <= patches


@pytest.mark.parametrize("level", range(RUN_LEVEL + 2))
@pytest.mark.parametrize("answer", [True, False])
def test_a_run_below_a_rows_level_asks_its_patch_and_one_at_it_asks_nothing(monkeypatch, level, answer) -> None:
    asked: list[str] = []

    def patched(patch_id: str) -> bool:
        asked.append(patch_id)
        return answer

    monkeypatch.setattr(core.workflow, "patched", patched)
    state = RunState(
        run_id="r", execution_id="e", goal="g", options=RunOptions(), ledger=Ledger(run_id="r"), level=level
    )
    for change in Change:
        asked.clear()
        has = core.has(state, change)
        if level >= change.level:
            assert (has, asked) == (True, [])
        elif change.patch is None:
            assert (has, asked) == (False, [])
        else:
            assert (has, asked) == (answer, [change.patch])
        assert reached(state, change) is (level >= change.level)


def _sources() -> list[Path]:
    files = [*(ROOT / "workflows").rglob("*.py"), *(ROOT / "activities").rglob("*.py"), ROOT / "worker.py"]
    links = {ROOT / "stratagem" / "workflows", ROOT / "stratagem" / "activities"}
    files += [p for p in (ROOT / "stratagem").rglob("*.py") if not any(p.is_relative_to(link) for link in links)]
    return files


def test_no_patch_id_or_level_number_is_written_outside_the_table() -> None:
    patches = [c.patch for c in Change if c.patch]
    asks = re.compile(r"workflow\.patched\(|\blevel\s*[<>]=?\s*\d")
    found = []
    for path in _sources():
        if path.name == "run_levels.py":
            continue
        text = path.read_text()
        found += [f"{path.relative_to(ROOT)}: {p}" for p in patches if f'"{p}"' in text]
        for line in text.splitlines():
            if asks.search(line) and not (path.name == "core.py" and "workflow.patched(change.patch)" in line):
                found.append(f"{path.relative_to(ROOT)}: {line.strip()}")
    assert found == []
