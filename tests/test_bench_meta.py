"""The bench's results name the commit they measured and any file changed from it."""

from __future__ import annotations

import argparse
import subprocess

from bench import __main__ as bench_main


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
