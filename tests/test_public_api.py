"""The names a user imports from `stratagem`: everything `__all__` promises is there, and the
ones the README and a worker of one's own need are among them."""

from __future__ import annotations

import stratagem


def test_every_promised_name_is_importable():
    missing = [name for name in stratagem.__all__ if not hasattr(stratagem, name)]
    assert missing == []


def test_the_names_a_user_needs_to_start_decide_and_serve_are_public():
    needed = {
        "start_run", "get_run", "connect", "RunInput", "RunOptions", "Phase", "Mode", "ApproveInput", "RejectInput",
        "ReviseInput", "AnswerInput", "BudgetInput", "DecisionOutcome", "tool", "ToolContext", "ToolRegistry",
        "build_worker", "run_worker", "load_plan_file", "validate_plan",
    }
    assert needed <= set(stratagem.__all__)
    assert stratagem.Phase.succeeded.value == "succeeded"
    assert stratagem.ToolRegistry.from_modules([]).catalog().names  # the built-in tools
