"""One llm step's model calls, held to its allowance of the run's budget.

The workflow gives each llm step an allowance: what of the run's model budgets it may use, set
aside from what the steps beside it were given (`stratagem.domain.usage.share_of`). Before each call,
`CallBudget.hold` counts the request's input (`stratagem.models.tokens`, a bound, or the model's
own exact count where it has one: the scripted model does) and caps the call's output at what
the allowance leaves once that input is paid for, in tokens and in cost.
A call whose input alone does not fit is not sent: the step stops with `BudgetReachedError`, and
the run gives it more once the steps beside it are done, or asks a person to raise the budget.

A model cannot write past its cap, so a step never spends past its allowance, and steps started
together never spend past the run's budget, however many there are and whatever their model
writes. The cap binds only when it is below the call's own cap (the request's, else the
provider's default); an answer the budget cut off is not used: the step stops at its budget.

One case would stop a step for ever: a step given all the budget has left (its allowance is
`whole`: steps started beside it get nothing) whose first call's count does not fit would be
dispatched again at once with the same allowance, since the workflow sees room for a call as
large as the largest so far. The bound is about 4x high for prose, so that call may well fit: it
is sent once with a cap of one token (a probe), the provider reports its real input, and the
step goes on with that figure, or stops at its budget with the probe counted, after which the
run asks a person. The probe is the one call that can pass the budget, by at most its own input
less what was left, plus one token, and only while no other step can spend.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from stratagem.common.errors import BudgetReachedError, ModelOutputError
from stratagem.domain.usage import Allowance, CallUsage, NoRoom, Price, UsageTotals, room_for_call
from stratagem.models import tokens
from stratagem.models.base import Message, ModelRequest, ModelResponse, Purpose

# How providers say an answer stopped at its cap: OpenAI's finish_reason, Anthropic's stop_reason.
CUT_OFF = frozenset({"length", "max_tokens"})


@dataclass(frozen=True)
class _Held:
    request: ModelRequest
    cap: int | None
    by_budget: bool  # the cap is the budget's, below the call's own
    probe: bool


@dataclass(frozen=True)
class _Measured:
    """A call the provider charged `input_tokens` for: a later call that extends its conversation
    (same tools, same schema) is counted from it."""

    messages: tuple[Message, ...]
    tools: list[Any]
    schema: dict[str, Any] | None
    input_tokens: int

    def counts(self, request: ModelRequest) -> int | None:
        sent = self.messages
        if len(request.messages) < len(sent) or request.tools != self.tools or request.response_schema != self.schema:
            return None
        if any(a is not b for a, b in zip(sent, request.messages, strict=False)):
            return None
        return tokens.after(self.input_tokens, request.messages[len(sent) :])


class CallBudget:
    """Holds each model call of one llm step to the step's `allowance` (None: no model budget).

    `prices` prices the step's calls by model string (`price` for any other); `verifier_price` is
    the price of verify calls. `model` is the step's model and `verifier_model` its verifier's:
    their `default_max_output_tokens` (the cap their provider sends when a request names none) and
    `tool_prompt_tokens` (what their provider adds to a request that offers tools) count, where
    they have them."""

    def __init__(
        self,
        allowance: Allowance | None,
        step_id: str,
        *,
        model: Any = None,
        verifier_model: Any = None,
        price: Price | None = None,
        prices: Mapping[str, Price | None] | None = None,
        verifier_price: Price | None = None,
    ):
        self.allowance = allowance
        self.step_id = step_id
        self.price = price
        self.prices = dict(prices or {})
        self.verifier_price = verifier_price
        self.models = {Purpose.execute: model, Purpose.verify: verifier_model or model}
        self._held: _Held | None = None
        self._measured: dict[Purpose, _Measured] = {}  # the last measured call, per purpose

    def input_tokens(self, request: ModelRequest) -> int:
        """The most input tokens `request` can take: the model's own count where it can count
        (`count_input_tokens`), else from the step's last measured call where it extends that
        call's conversation, else the bound of the whole request."""
        model = self.models.get(request.purpose)
        count = getattr(model, "count_input_tokens", None)
        exact = count(request) if callable(count) else None
        if isinstance(exact, int):
            return exact
        measured = self._measured.get(request.purpose)
        counted = measured.counts(request) if measured is not None else None
        if counted is not None:
            return counted
        return tokens.input_tokens(request, _whole_number(model, "tool_prompt_tokens") or 0)

    def hold(self, request: ModelRequest, calls: Sequence[CallUsage], *, may_probe: bool = False) -> ModelRequest:
        """`request` with its output cap held to what the allowance leaves, after `calls` (the
        model calls this dispatch made). Raises BudgetReachedError if it does not fit.
        `may_probe`: the caller can drop a probe's answer and ask again (see the module doc)."""
        left = self.allowance
        if left is None:
            return request
        spent = self._spent(calls)
        counted = self.input_tokens(request)
        room = room_for_call(left, spent, counted, self._price_of(request))
        probe = isinstance(room, NoRoom)
        if isinstance(room, NoRoom) and not (may_probe and self._may_probe(room, calls)):
            raise BudgetReachedError(
                f"step '{self.step_id}' stopped before model call {len(calls) + 1}: {room.describe()}"
            )
        budget = 1 if isinstance(room, NoRoom) else room.output_tokens
        own = request.max_output_tokens or _whole_number(self.models.get(request.purpose), "default_max_output_tokens")
        by_budget = budget is not None and (own is None or budget < own)
        cap = budget if by_budget else own
        held = request.model_copy(update={"max_output_tokens": cap})
        self._held = _Held(held, cap, by_budget, probe)
        return held

    def answered(self, request: ModelRequest, response: ModelResponse) -> bool:
        """After `request` was answered and its usage recorded: False when the answer was a
        probe's, cut off, to be dropped (the step asks again); True to use it. Raises
        BudgetReachedError when the budget's cap cut the answer off: a cut answer is not used."""
        held, self._held = self._held, None
        if held is None or held.request is not request:
            return True
        reported = response.usage.input_tokens
        if reported > 0:  # a server that did not count leaves nothing to count from
            measured = _Measured(tuple(request.messages), list(request.tools), request.response_schema, reported)
            self._measured[request.purpose] = measured
        # Only the stop reason tells: an answer may end exactly at its cap.
        if not (held.by_budget and response.stop_reason in CUT_OFF):
            return True
        if held.probe and reported > 0:
            return False
        if held.probe:
            # Nothing was learned, and a step dispatched again would probe again, for ever.
            raise ModelOutputError(
                f"step '{self.step_id}': the model reported no input tokens for its call, so the step cannot be "
                "held to the run's budget; use a server that reports usage, or run without a model budget"
            )
        raise BudgetReachedError(
            f"step '{self.step_id}' stopped at its budget: the answer to its model call was cut off at "
            f"{held.cap:,} output tokens, all the run's budget had left for it"
        )

    def _may_probe(self, room: NoRoom, calls: Sequence[CallUsage]) -> bool:
        left = self.allowance
        assert left is not None
        # Only the first call of a step that has all the budget left, and only where the bound,
        # not the budget, is short: something must be left for the call's input.
        return left.whole and not calls and room.dimension in ("tokens", "cost_usd") and room.limit > room.used

    def _spent(self, calls: Sequence[CallUsage]) -> UsageTotals:
        spent = UsageTotals(
            calls=len(calls),
            input_tokens=sum(c.input_tokens for c in calls),
            output_tokens=sum(c.output_tokens for c in calls),
        )
        for call in calls:
            price = self.prices.get(call.model, self.price)
            if price is not None:
                spent.cost_usd += price.cost(call.input_tokens, call.output_tokens)
        return spent

    def _price_of(self, request: ModelRequest) -> Price | None:
        if request.purpose is Purpose.verify and self.verifier_price is not None:
            return self.verifier_price
        return self.price


def _whole_number(model: Any, name: str) -> int | None:
    value = getattr(model, name, None) if model is not None else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
