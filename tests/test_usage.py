"""Prices, totals and the budget rules."""

from __future__ import annotations

import pytest

from stratagem.domain.usage import DEFAULT_PRICES, Budget, Price, UsageTotals, exhausted, may_cross, price_for

pytestmark = pytest.mark.unit


def totals(calls: int = 0, i: int = 0, o: int = 0, cost: float = 0.0) -> UsageTotals:
    return UsageTotals(calls=calls, input_tokens=i, output_tokens=o, cost_usd=cost)


def test_prices_match_exactly_then_by_the_longest_prefix():
    table = {
        "openai:gpt-4.1": Price(input_per_mtok=2, output_per_mtok=8),
        "openai:gpt-4.1-mini": Price(input_per_mtok=0.4, output_per_mtok=1.6),
    }
    assert price_for("openai:gpt-4.1-mini-2025-04-14", table).input_per_mtok == 0.4
    assert price_for("openai:gpt-4.1-2025-04-14", table).input_per_mtok == 2
    assert price_for("openai:gpt-4.1@http://127.0.0.1:9/v1", table).input_per_mtok == 2
    assert price_for("openai:gpt-4", table) is None  # a prefix of a key is not a match
    assert price_for("scripted:/x.yaml", table) == Price(input_per_mtok=0, output_per_mtok=0)


def test_cost_is_per_million_tokens():
    assert Price(input_per_mtok=3, output_per_mtok=15).cost(1_000_000, 200_000) == pytest.approx(6.0)
    assert price_for("anthropic:claude-sonnet-4-5-20250929", DEFAULT_PRICES).output_per_mtok == 15.0


def test_exhausted_names_every_used_up_budget():
    budget = Budget(tokens=100, cost_usd=1.0, model_calls=5, wall_clock_seconds=60)
    assert exhausted(budget, totals(4, 50, 49, 0.99), 59.9) == []
    found = exhausted(budget, totals(5, 60, 40, 1.5), 61)
    assert found == [
        "the token budget is used up (100 of 100)",
        "the cost budget is used up ($1.5000 of $1.0000)",
        "the model-call budget is used up (5 of 5)",
        "the wall-clock budget is used up (61 s of 60 s)",
    ]
    assert exhausted(Budget(), totals(10**6, 10**9, 10**9, 10**6), 10**9) == []


def test_may_cross_projects_the_largest_step_over_the_steps_in_flight():
    budget = Budget(tokens=1000)
    used, largest = totals(2, 300, 100), totals(1, 150, 50)
    assert not may_cross(budget, used, largest, in_flight=1)  # 400 + 2 * 200 = 800
    assert not may_cross(budget, used, largest, in_flight=2)  # 400 + 3 * 200 = 1000: reaches, not past
    assert may_cross(budget, used, largest, in_flight=3)  # 400 + 4 * 200 = 1200
    assert may_cross(budget, used, None, in_flight=1)  # nothing known yet
    assert not may_cross(Budget(wall_clock_seconds=5), used, None, in_flight=3)  # no model budget


def test_totals_add_and_widen():
    a = totals(2, 10, 5, 0.5)
    a.widen(totals(1, 20, 1, 0.1))
    assert (a.calls, a.input_tokens, a.output_tokens, a.cost_usd) == (2, 20, 5, 0.5)
    assert a.describe() == "2 calls, 20 in / 5 out tokens, $0.5000"
