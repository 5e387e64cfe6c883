"""Code the tests share, kept apart from the tests: plans, tool modules, fake model servers,
captured spans, golden scenarios, and helpers that drive the `stratagem` command line.

Tests import it as `support.<module>`. pytest's default import mode puts tests/ (the folder of
the rootdir conftest and of every test module, none of them in a package) at the front of
sys.path, so `support` resolves to this folder; tests/capture_golden.py puts tests/ there itself.
Nothing here is collected: pytest collects only test_*.py files.

The tool modules are loaded by file path, by in-process workers and by worker processes alike,
so their paths are named here once.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["CRASH_TOOLS", "FIXTURE_TOOLS", "PAGE_TOOLS", "PAYMENT_TOOLS"]

_HERE = Path(__file__).resolve().parent

FIXTURE_TOOLS = str(_HERE / "fixture_tools.py")
"""The tools most tests run (`--tools` for a CLI or worker process, or `ToolRegistry.from_modules`)."""

CRASH_TOOLS = str(_HERE / "crash_tools.py")
"""The tools of the crash tests (tests/test_crash.py)."""

PAYMENT_TOOLS = str(_HERE / "payment_tools.py")
"""A payment system that is not idempotent, scripted per call (tests/test_in_doubt.py, tests/test_crash_effects.py)."""

PAGE_TOOLS = str(_HERE / "page_tools.py")
"""An archive of 20 KB pages an llm step reads, each fetch logged, reconcilable (tests/test_crash_effects.py)."""
