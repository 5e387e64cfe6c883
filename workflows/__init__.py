"""Workflow definitions. Deterministic code only: no I/O, no clocks, no randomness."""

from .standing_registry import StandingApprovals
from .stratagem_run import StratagemRun

__all__ = ["StandingApprovals", "StratagemRun"]
