"""The test groups (tests/conftest.py): `-m unit` leaves out every test that needs a Temporal
server or starts a process, and the three groups together are the whole suite."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def collected(markers: list[str | None]) -> list[set[str]]:
    """The tests each marker selects (None: all), collected at once: each collection imports the
    whole suite, about ten seconds."""
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q"]
    processes = [
        subprocess.Popen(
            argv + (["-m", marker] if marker else []),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for marker in markers
    ]
    found = []
    for process in processes:
        out, err = process.communicate(timeout=180)
        assert process.returncode == 0, out + err
        found.append({line for line in out.splitlines() if "::" in line})
    return found


def test_the_unit_group_needs_no_server_and_the_groups_cover_the_suite():
    unit, workflow, system, everything = collected(["unit", "workflow", "system", None])
    assert unit | workflow | system == everything
    assert not (unit & workflow) and not (unit & system) and not (workflow & system)
    # A time-skipping test, a dev-server test, one that starts `stratagem` through a helper, a pure one.
    assert any(t.startswith("tests/test_workflow_review.py::") for t in workflow)
    assert all(not t.startswith("tests/test_catalog.py::") for t in unit)
    assert "tests/test_examples.py::test_quickstart_runs_the_example[vendor_onboarding]" in system
    assert any(t.startswith("tests/test_compact.py::") for t in unit)
