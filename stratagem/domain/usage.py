"""Token usage, cost estimates and budgets.

Activities report every model call they made (`CallUsage`); the workflow prices each one with
the run's price table and keeps the totals per step and per run in the ledger. Prices travel
with the run's options, so the estimate a run shows was computed with the prices it was
started with, and replaying it computes the same figures.

Budgets bound a run's tokens, cost, model calls and wall-clock time. The rules deciding
whether a dispatch may go ahead are plain functions here; the workflow applies them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from datetime import datetime

from pydantic import BaseModel, Field


class Usage(BaseModel):
    """The tokens of one model response (providers report them; `UsageTotals` adds them up)."""

    input_tokens: int = 0
    output_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens, output_tokens=self.output_tokens + other.output_tokens
        )

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens


class Price(BaseModel):
    """List price of a model in US dollars per million tokens."""

    input_per_mtok: float = Field(ge=0, allow_inf_nan=False)
    output_per_mtok: float = Field(ge=0, allow_inf_nan=False)

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        return (input_tokens * self.input_per_mtok + output_tokens * self.output_per_mtok) / 1_000_000


# Published list prices (USD per million tokens, standard tier, no caching or batch discounts)
# as last checked for this table. Providers change prices: extend or override them under
# `prices:` in the configuration file. Dated variants (gpt-4o-mini-2024-07-18) match by prefix.
DEFAULT_PRICES: dict[str, Price] = {
    name: Price(input_per_mtok=i, output_per_mtok=o)
    for name, (i, o) in {
        "openai:gpt-5": (1.25, 10.0),
        "openai:gpt-5-mini": (0.25, 2.0),
        "openai:gpt-5-nano": (0.05, 0.40),
        "openai:gpt-4.1": (2.0, 8.0),
        "openai:gpt-4.1-mini": (0.40, 1.60),
        "openai:gpt-4.1-nano": (0.10, 0.40),
        "openai:gpt-4o": (2.50, 10.0),
        "openai:gpt-4o-mini": (0.15, 0.60),
        "openai:o3": (2.0, 8.0),
        "openai:o4-mini": (1.10, 4.40),
        "anthropic:claude-opus-4-1": (15.0, 75.0),
        "anthropic:claude-opus-4-5": (5.0, 25.0),
        "anthropic:claude-sonnet-4-5": (3.0, 15.0),
        "anthropic:claude-sonnet-4": (3.0, 15.0),
        "anthropic:claude-haiku-4-5": (1.0, 5.0),
        "anthropic:claude-3-5-haiku": (0.80, 4.0),
    }.items()
}


def price_for(model: str, prices: Mapping[str, Price]) -> Price | None:
    """The price of `model`: an exact entry, else the longest entry its name starts with.

    A base URL (`openai:llama3@http://...`) is ignored for the lookup. Scripted models are
    free unless priced explicitly.
    """
    if model in prices:
        return prices[model]
    bare = _without_base_url(model)
    if bare in prices:
        return prices[bare]
    matches = [key for key in prices if bare.startswith(key + "-") or bare.startswith(key + "@")]
    if matches:
        return prices[max(matches, key=len)]
    if model.startswith("scripted:") or model.startswith("slow:"):
        return Price(input_per_mtok=0, output_per_mtok=0)
    return None


def _without_base_url(model: str) -> str:
    name, at, url = model.rpartition("@")
    return name if at and url.startswith(("http://", "https://")) else model


class CallUsage(BaseModel):
    """One model call, as an activity reports it."""

    model: str
    input_tokens: int = Field(default=0, ge=0)
    output_tokens: int = Field(default=0, ge=0)
    attempt: int = Field(default=1, description="The activity attempt that made the call.")


class CallRecord(CallUsage):
    """One model call, as the ledger keeps it."""

    seq: int
    at: datetime
    purpose: str = Field(description="plan, execute or synthesize")
    step_id: str | None = None
    revision: int | None = None
    cost_usd: float | None = Field(default=None, description="None when the model has no price.")


class UsageTotals(BaseModel):
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    unpriced_calls: int = Field(default=0, description="Calls whose model has no price: cost_usd leaves them out.")

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def add(self, call: CallRecord) -> None:
        self.calls += 1
        self.input_tokens += call.input_tokens
        self.output_tokens += call.output_tokens
        if call.cost_usd is None:
            self.unpriced_calls += 1
        else:
            self.cost_usd += call.cost_usd

    def widen(self, other: UsageTotals) -> None:
        """Keep, per dimension, the larger of the two (the largest step seen so far)."""
        self.calls = max(self.calls, other.calls)
        self.input_tokens = max(self.input_tokens, other.input_tokens)
        self.output_tokens = max(self.output_tokens, other.output_tokens)
        self.cost_usd = max(self.cost_usd, other.cost_usd)

    def describe(self) -> str:
        cost = f"${self.cost_usd:.4f}"
        if self.unpriced_calls:
            cost += f" + {self.unpriced_calls} unpriced call(s)"
        calls = f"{self.calls} call" + ("" if self.calls == 1 else "s")
        return f"{calls}, {self.input_tokens:,} in / {self.output_tokens:,} out tokens, {cost}"


class Budget(BaseModel):
    """Limits for one run. None means no limit."""

    tokens: int | None = Field(default=None, ge=1, description="Input plus output tokens of every model call.")
    cost_usd: float | None = Field(default=None, gt=0, allow_inf_nan=False, description="Estimated cost in US dollars.")
    model_calls: int | None = Field(default=None, ge=1)
    wall_clock_seconds: float | None = Field(
        default=None, gt=0, allow_inf_nan=False, description="Since the run started."
    )

    @property
    def limits_models(self) -> bool:
        return any(v is not None for v in (self.tokens, self.cost_usd, self.model_calls))

    @property
    def is_set(self) -> bool:
        return self.limits_models or self.wall_clock_seconds is not None


class Allowance(BaseModel):
    """What of the run's model budgets one llm step may use (None: that budget is not set)."""

    tokens: int | None = Field(default=None, ge=0)
    cost_usd: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    model_calls: int | None = Field(default=None, ge=0)
    call_tokens: int = Field(
        default=0, ge=0, description="The most tokens one call of the run took: the next may take as many."
    )
    call_cost_usd: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    whole: bool = Field(
        default=False,
        description="It is all the budget has left (steps started beside it get nothing): a step that stopped "
        "before its first call would be dispatched again with the same (stratagem.models.budgeted).",
    )


def allowance(budget: Budget, used: UsageTotals) -> Allowance | None:
    """What is left of the model budgets (tokens, cost, calls): the most one step may use.

    None when no model budget is set. A step is given it when it starts and checks it before
    every model call, so a step that loops cannot run far past the run's budget.
    """
    if not budget.limits_models:
        return None
    left = {
        name: getattr(budget, name) - value
        for name, value in _dimensions(used).items()
        if getattr(budget, name) is not None
    }
    return Allowance(**{name: max(value, 0) for name, value in left.items()})


def share_of(left: Allowance, reserved: Iterable[Allowance], fraction: float) -> Allowance:
    """`fraction` of what is `left` once `reserved` is set aside, per budget (whole tokens and calls)."""
    reserved = list(reserved)
    share: dict[str, float] = {}
    for name in ("tokens", "cost_usd", "model_calls"):
        limit = getattr(left, name)
        if limit is None:
            continue
        free = max(limit - sum(getattr(r, name) or 0 for r in reserved), 0)
        part = free * fraction if name == "cost_usd" else math.ceil(free * fraction)
        # Never less than one call of the size seen so far, where that much is free.
        estimate = {"tokens": left.call_tokens, "cost_usd": left.call_cost_usd, "model_calls": 1}[name]
        share[name] = max(part, min(free, estimate))
    whole = fraction >= 1 and not reserved  # a step alone, or one run again once the others are done
    return Allowance.model_validate(
        {**share, "call_tokens": left.call_tokens, "call_cost_usd": left.call_cost_usd, "whole": whole}
    )


class Room(BaseModel):
    """What one more model call of a step may take: `output_tokens` is the most output the budget
    leaves it once its input is paid for (None: no budget limits it)."""

    output_tokens: int | None = None


class NoRoom(BaseModel):
    """The step may not make its next call: of its allowance `limit` in `dimension` (tokens,
    cost_usd, model_calls) it has `used` so much, and the call `needs` as much as is left or more
    (its input, leaving no room for an answer; or one more call)."""

    dimension: str
    used: float
    limit: float
    needs: float

    def describe(self) -> str:
        left = _figure(self.dimension, max(self.limit - self.used, 0))
        label = _LABELS[self.dimension]
        if self.dimension == "model_calls":
            return f"it made {self.used:,.0f} of the {self.limit:,.0f} model calls the run's budget had left for it"
        what = "its input alone may take" if self.dimension == "tokens" else "its input alone may cost"
        return f"{what} {_figure(self.dimension, self.needs)}, which leaves no room for an answer in the {left} the {label} budget has left for it"


def room_for_call(left: Allowance, spent: UsageTotals, input_tokens: int, price: Price | None) -> Room | NoRoom:
    """Whether a step that has `spent` so much of its allowance `left` may make a call whose input
    takes at most `input_tokens`, and how much output the budget then leaves the call.

    The cap holds the call within the allowance whatever it writes: tokens, input + cap <= what
    is left; cost, the price of the input plus that of the capped output <= what is left. A call
    needs room for one output token at least. A cost budget applies to a priced model only.
    """
    if left.model_calls is not None and spent.calls + 1 > left.model_calls:
        return NoRoom(dimension="model_calls", used=spent.calls, limit=left.model_calls, needs=1)
    caps: list[int] = []
    if left.tokens is not None:
        room = left.tokens - spent.tokens - input_tokens
        if room < 1:
            return NoRoom(dimension="tokens", used=spent.tokens, limit=left.tokens, needs=input_tokens)
        caps.append(room)
    if left.cost_usd is not None and price is not None:
        money = left.cost_usd - spent.cost_usd
        cap = _output_for(money - price.cost(input_tokens, 0), price)
        # Rounding: the bound must hold as the workflow prices the call.
        while cap is not None and cap > 0 and price.cost(input_tokens, cap) > money:
            cap -= 1
        if cap is not None and cap < 1:
            needs = price.cost(input_tokens, 0)
            return NoRoom(dimension="cost_usd", used=spent.cost_usd, limit=left.cost_usd, needs=needs)
        if cap is not None:
            caps.append(cap)
    return Room(output_tokens=min(caps) if caps else None)


def _output_for(money: float, price: Price) -> int | None:
    """The most output tokens `money` buys at `price` (None: output is free, so any; 0 when
    `money` is short even of the input)."""
    if money < 0:
        return 0
    if price.output_per_mtok == 0:
        return None
    return math.floor(money * 1_000_000 / price.output_per_mtok)


def _dimensions(usage: UsageTotals) -> dict[str, float]:
    return {"tokens": usage.tokens, "cost_usd": usage.cost_usd, "model_calls": usage.calls}


_LABELS = {"tokens": "token", "cost_usd": "cost", "model_calls": "model-call", "wall_clock_seconds": "wall-clock"}


def exhausted(budget: Budget, used: UsageTotals, elapsed_seconds: float) -> list[str]:
    """Each budget that is used up, as a sentence; empty when every one has room left."""
    found = []
    for name, value in _dimensions(used).items():
        limit = getattr(budget, name)
        if limit is not None and value >= limit:
            found.append(f"the {_LABELS[name]} budget is used up ({_figure(name, value)} of {_figure(name, limit)})")
    if budget.wall_clock_seconds is not None and elapsed_seconds >= budget.wall_clock_seconds:
        found.append(
            f"the wall-clock budget is used up ({elapsed_seconds:,.0f} s of {budget.wall_clock_seconds:,.0f} s)"
        )
    return found


WARN_AT = 0.8


class BudgetWarning(BaseModel):
    dimension: str
    message: str


def budget_warnings(budget: Budget, used: UsageTotals, already: list[str]) -> list[BudgetWarning]:
    """Budgets that just passed 80% of their limit (each warned about once)."""
    warnings = []
    for name, value in _dimensions(used).items():
        limit = getattr(budget, name)
        if limit is not None and name not in already and WARN_AT * limit <= value < limit:
            warnings.append(
                BudgetWarning(
                    dimension=name,
                    message=f"the {_LABELS[name]} budget is {value / limit:.0%} used ({_figure(name, value)} of {_figure(name, limit)})",
                )
            )
    return warnings


def may_cross(budget: Budget, used: UsageTotals, largest_step: UsageTotals | None, in_flight: int) -> bool:
    """Whether one more model-using step, started now beside `in_flight` others, could take
    usage past a limit. `largest_step` is the most any one step used so far (None: no step
    has finished, so nothing is known and any step could)."""
    if not budget.limits_models:
        return False
    if largest_step is None:
        return True
    estimate = _dimensions(largest_step)
    for name, value in _dimensions(used).items():
        limit = getattr(budget, name)
        if limit is not None and value + (in_flight + 1) * estimate[name] > limit:
            return True
    return False


def _figure(name: str, value: float) -> str:
    if name == "cost_usd":
        return f"${value:,.4f}"
    return f"{value:,.0f}"
