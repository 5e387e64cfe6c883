"""The bench's results name the commit they measured and any file changed from it; a measure
that runs both sides back to back compares each pair, not each side's median."""

from __future__ import annotations

import argparse
import subprocess

import pytest

from bench import __main__ as bench_main
from bench.common import median, pair_ratios


@pytest.mark.system
def test_the_results_name_every_changed_file_in_full(tmp_path, monkeypatch):
    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    for name in ("BENCHMARKS.md", "core.py"):
        (tmp_path / name).write_text("v1\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "one")
    (tmp_path / "BENCHMARKS.md").write_text("v2\n")  # the first line of `git status --porcelain`
    (tmp_path / "core.py").write_text("v2\n")
    monkeypatch.setattr(bench_main, "REPO", tmp_path)
    meta = bench_main._meta(argparse.Namespace(quick=True, measures=[]))
    assert meta["git_dirty_files"] == ["BENCHMARKS.md", "core.py"]


@pytest.mark.unit
def test_a_paired_ratio_is_not_fooled_by_the_machine_slowing_down():
    # The concurrency measure of one full run (steps/s, in the order run): the machine slowed
    # for the last two pairs, so each side's median came from a different speed.
    stratagem = [136, 143, 157, 95, 89]
    bare = [173, 179, 138, 119, 123]
    assert median(stratagem) / median(bare) == pytest.approx(0.986, abs=0.001)
    assert median(pair_ratios(stratagem, bare)) == pytest.approx(95 / 119)


@pytest.mark.unit
def test_a_paired_ratio_refuses_unpaired_figures():
    with pytest.raises(ValueError, match="one baseline figure for each"):
        pair_ratios([1.0, 2.0], [1.0])
    with pytest.raises(ValueError):
        pair_ratios([], [])
