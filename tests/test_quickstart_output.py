"""examples/quickstart.py as a newcomer meets it: `--help` helps, and the failure an example is
built to show reads as one event line, with the SDK's traceback and the server's log lines in
$STRATAGEM_HOME/quickstart.log instead of the terminal."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.system

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "examples" / "quickstart.py"


def quickstart(*args: str, cwd: Path, home: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "STRATAGEM_WORKSPACE"}
    env["STRATAGEM_HOME"] = str(home)
    return subprocess.run(
        [sys.executable, str(QUICKSTART), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
    )


def test_help_says_how_to_run_it(tmp_path):
    done = quickstart("--help", cwd=tmp_path, home=tmp_path / "home")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: python examples/quickstart.py [-h] [PLAN_FILE]")
    assert "answers.yaml" in done.stdout and "quickstart.log" in done.stdout
    assert "does not exist" not in done.stdout + done.stderr
    unknown = quickstart("--verbose", cwd=tmp_path, home=tmp_path / "home")
    assert unknown.returncode == 2 and "unrecognized arguments: --verbose" in unknown.stderr
    missing = quickstart("nope.yaml", cwd=tmp_path, home=tmp_path / "home")
    assert (missing.returncode, missing.stderr) == (2, "error: plan file 'nope.yaml' does not exist\n")


def test_a_failure_the_example_shows_is_one_event_line_and_its_traceback_goes_to_the_log(tmp_path):
    home = tmp_path / "home"
    done = quickstart(str(ROOT / "examples" / "expense_claim" / "plan.yaml"), cwd=tmp_path, home=home)
    assert done.returncode == 0, done.stdout + done.stderr
    # The posting fails on purpose, and the run is repaired: the terminal says so in one line each.
    assert "step_failed post: accounting period 2026-10 is closed" in done.stdout
    assert "succeeded (revision 2)" in done.stdout
    assert done.stderr == ""
    for noise in ("Traceback", "Completing activity as failed", "ERROR", "WARN", "Temporal Server:"):
        assert noise not in done.stdout, noise
    log = home / "quickstart.log"
    assert f"its log and the worker's: {log}" in done.stdout
    written = log.read_text(encoding="utf-8")
    assert "Completing activity as failed" in written and "Traceback" in written
    assert "accounting period 2026-10 is closed" in written
