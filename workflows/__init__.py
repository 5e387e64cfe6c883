"""Workflow definitions. Deterministic code only: no I/O, no clocks, no randomness."""

from .run import StratagemRun

__all__ = ["StratagemRun"]
