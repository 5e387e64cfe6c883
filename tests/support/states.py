"""A run's state built by hand, for the rules that take a RunState and the time (stratagem.domain.decisions,
stratagem.domain.transitions), tested without Temporal."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from stratagem.domain.catalog import ToolCatalog, ToolSpec
from stratagem.domain.ledger import Ledger
from stratagem.domain.plan import Author, AuthorKind, Plan, PlanDraft
from stratagem.domain.run_types import Phase, RunOptions, RunState

NOW = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
"""The time the rules are told it is."""


def draft(*steps: dict[str, Any]) -> PlanDraft:
    return PlanDraft.model_validate({"goal": "goal", "steps": list(steps)})


def tool_step(step_id: str, label: str = "x") -> dict[str, Any]:
    return {"id": step_id, "title": step_id, "tool": "record", "args": {"label": label}}


def make_state(phase: Phase = Phase.awaiting_approval, revisions: int = 1, executor: str | None = None) -> RunState:
    ledger = Ledger(run_id="run-1")
    for revision in range(1, revisions + 1):
        plan = draft(tool_step("first"), tool_step("second"))
        ledger.add_revision(
            Plan.from_draft(plan, revision=revision, author=Author(kind=AuthorKind.human, name="ann"), reason="r")
        )
    return RunState(
        run_id="run-1",
        execution_id="exec-1",
        goal="goal",
        options=RunOptions(executor=executor),
        phase=phase,
        ledger=ledger,
        catalog=ToolCatalog(tools=[ToolSpec(name="record")]),
    )
