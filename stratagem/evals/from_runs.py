"""An eval set from the runs a namespace recorded: each run's goal, with the plan people
approved as its reference and the run's own tool catalogue (`stratagem eval --from-runs`)."""

from __future__ import annotations

from temporalio.client import Client

from stratagem.evals.cases import EvalSet


async def set_from_runs(client: Client, *, query: str | None = None, limit: int = 50) -> EvalSet:
    """The runs matching `query` (a visibility query; default: every run) that had a plan
    approved, newest first, at most `limit`. Raises StratagemError (one line) when none has."""
    raise NotImplementedError  # the from-runs helper writes this
