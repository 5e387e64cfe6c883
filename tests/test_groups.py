"""The test groups (tests/conftest.py): `-m unit` leaves out every test that needs a Temporal
server or starts a process, and the three groups together are the whole suite. Each test names its
group with a marker; collection refuses a test with none, with two, or with fixtures its group
does not allow."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import group_problem

ROOT = Path(__file__).resolve().parent.parent


def collected(markers: list[str | None], scratch: Path) -> list[set[str]]:
    """The tests each marker selects (None: all), each selection pytest's own `-m`, all collected in
    one process (tests/support/selections.py): a collection imports the whole suite, about ten
    seconds, and the later ones find the test modules imported."""
    out = scratch / "selections.json"
    code = "import sys; sys.path.insert(0, 'tests'); from support.selections import main; main()"
    argv = [sys.executable, "-c", code, str(out), *(marker or "" for marker in markers)]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    found = json.loads(out.read_text())
    return [set(found[marker or ""]) for marker in markers]


@pytest.mark.system
def test_the_unit_group_needs_no_server_and_the_groups_cover_the_suite(tmp_path):
    unit, workflow, system, everything = collected(["unit", "workflow", "system", None], tmp_path)
    assert unit | workflow | system == everything
    assert not (unit & workflow) and not (unit & system) and not (workflow & system)
    # A time-skipping test, a dev-server test, one that starts `stratagem` through a helper, a pure one.
    assert any(t.startswith("tests/test_workflow_review.py::") for t in workflow)
    assert all(not t.startswith("tests/test_catalog.py::") for t in unit)
    assert "tests/test_examples.py::test_quickstart_runs_the_example[vendor_onboarding]" in system
    assert any(t.startswith("tests/test_compact.py::") for t in unit)


@pytest.mark.unit
def test_a_test_without_a_group_is_refused_with_the_fix():
    problem = group_problem("tests/test_x.py::test_y", ["parametrize", "asyncio"], set())
    assert problem and problem.startswith("tests/test_x.py::test_y has no test group")
    assert "pytestmark = pytest.mark.<group>" in problem and "unit, workflow, system" in problem


@pytest.mark.unit
def test_a_test_in_two_groups_is_refused_even_twice_the_same():
    # A module's `pytestmark` and the test's own marker both count: the test must not say it twice.
    problem = group_problem("tests/test_x.py::test_y", ["system", "unit"], set())
    assert problem and "in 2 test groups (system, unit)" in problem
    assert group_problem("tests/test_x.py::test_y", ["unit", "unit"], set())


@pytest.mark.unit
def test_a_test_whose_fixtures_need_a_server_is_refused_in_a_group_without_one():
    problem = group_problem("tests/test_x.py::test_y", ["unit"], {"harness", "time_env", "tmp_path"})
    assert problem == "tests/test_x.py::test_y is marked unit but uses harness, time_env: mark it workflow"
    problem = group_problem("tests/test_x.py::test_y", ["workflow"], {"cli_env", "dev_env", "harness"})
    assert problem == "tests/test_x.py::test_y is marked workflow but uses cli_env, dev_env: mark it system"
    assert "mark it system" in (group_problem("t", ["unit"], {"dev_harness"}) or "")


@pytest.mark.unit
def test_a_test_may_be_in_a_heavier_group_than_its_fixtures_need():
    # A test that starts a process shows no fixture for it: `system` is its author's word.
    assert group_problem("t", ["unit"], {"tmp_path"}) is None
    assert group_problem("t", ["workflow"], {"harness"}) is None
    assert group_problem("t", ["system"], set()) is None
    assert group_problem("t", ["system", "timeout"], {"harness"}) is None
