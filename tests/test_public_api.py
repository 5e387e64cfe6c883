"""The names a user imports from `stratagem`: everything `__all__` promises is there, and the
ones the README, docs/python.md and a worker of one's own need are among them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import stratagem

pytestmark = pytest.mark.unit

PYTHON_PAGE = Path(__file__).resolve().parent.parent / "docs" / "python.md"


def test_every_promised_name_is_importable():
    missing = [name for name in stratagem.__all__ if not hasattr(stratagem, name)]
    assert missing == []


def test_the_names_a_user_needs_to_start_decide_and_serve_are_public():
    needed = {
        "start_run",
        "get_run",
        "connect",
        "RunInput",
        "RunOptions",
        "Phase",
        "Mode",
        "ApproveInput",
        "RejectInput",
        "ReviseInput",
        "AnswerInput",
        "BudgetInput",
        "DecisionOutcome",
        "tool",
        "ToolContext",
        "ToolRegistry",
        "build_worker",
        "run_worker",
        "load_plan_file",
        "validate_plan",
    }
    assert needed <= set(stratagem.__all__)
    assert stratagem.Phase.succeeded.value == "succeeded"
    assert stratagem.ToolRegistry.from_modules([]).catalog().names  # the built-in tools


def test_every_name_the_python_page_uses_is_public():
    """docs/python.md writes `stratagem.X` for everything it uses, code and text alike: each X is
    promised by `__all__`, so an embedding program needs no import from a module inside."""
    used = set(re.findall(r"\bstratagem\.([A-Za-z_]\w*)", PYTHON_PAGE.read_text(encoding="utf-8")))
    used -= {"event_stream"}  # the logger's name, not an import
    assert used, "the page names what it uses as stratagem.X"
    assert sorted(used - set(stratagem.__all__)) == []
    # What following and deciding takes, whatever the page's wording.
    assert {
        "Settings",
        "RunHandle",
        "PlanDraft",
        "Step",
        "EventKind",
        "LedgerEvent",
        "PendingDecision",
        "DecisionKind",
        "DecisionRefusedError",
        "RunUnresponsiveError",
        "RepairInput",
        "RepairAction",
    } <= set(stratagem.__all__)
    assert callable(stratagem.RunHandle.stream)


def test_the_workflows_handler_names_are_the_wire_contract():
    """Runs in flight and other clients (the `temporal` CLI, scripts) call these names: the
    constants keep them, and the workflow registers every one."""
    from temporalio.workflow import _Definition

    from stratagem.domain import handlers
    from stratagem.domain.decisions import KINDS
    from stratagem.workflows import StratagemRun

    updates = {"approve", "reject", "revise", "answer", "budget", "repair"}
    assert updates <= {kind.update for kind in KINDS}
    assert {f"{u}_signal" for u in updates} <= {kind.signal for kind in KINDS}
    definition = _Definition.from_class(StratagemRun)
    assert definition is not None
    assert updates <= set(definition.updates)
    assert {f"{u}_signal" for u in updates} <= set(definition.signals)
    assert (
        {handlers.STATUS, handlers.PLAN, handlers.LEDGER, handlers.PENDING, handlers.EVENTS, handlers.CATALOG}
        == {"status", "plan", "ledger", "pending", "events", "catalog"}
        <= set(definition.queries)
    )
