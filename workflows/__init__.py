"""Workflow definitions. Deterministic code only: no I/O, no clocks, no randomness."""

from .stratagem_run import StratagemRun

__all__ = ["StratagemRun"]
