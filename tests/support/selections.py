"""The tests that each of several `-m` selections collects, in one process (tests/test_groups.py).

A collection imports the whole suite, about ten seconds of CPU. Four `pytest --collect-only`
processes, one per selection, cost four of those; here pytest collects four times in one
process, and only the first imports the test modules: the rest find them in sys.modules. Each
selection is still pytest's own: its `-m` deselects, and the conftest's group check runs.

Run as `python -c "from support.selections import main; main()" OUT MARKER...` from the
repository's root with tests/ on sys.path; a MARKER of "" selects everything. OUT gets a JSON
object from each marker to the node ids it selected.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest


class _Selected:
    """The node ids left once the selection has deselected (collection_finish comes after
    collection_modifyitems, where `-m` and the conftest's check run)."""

    def __init__(self) -> None:
        self.ids: list[str] = []

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.ids = [item.nodeid for item in session.items]


def main() -> None:
    out, markers = Path(sys.argv[1]), sys.argv[2:]
    found: dict[str, list[str]] = {}
    for marker in markers:
        selected = _Selected()
        argv = ["-p", "no:cacheprovider", "--collect-only", "-q", *(["-m", marker] if marker else [])]
        code = pytest.main(argv, plugins=[selected])
        if code != pytest.ExitCode.OK:
            sys.exit(f"collecting {marker or 'everything'} exited {code}")
        found[marker] = selected.ids
    out.write_text(json.dumps(found))
