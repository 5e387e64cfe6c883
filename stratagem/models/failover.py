"""A tier of several models, tried in order: failover.

    executor: [openai:gpt-4.1-mini, anthropic:claude-haiku-4-5]

A call goes to the first model. When that model's provider is out (it cannot be reached, answers
5xx or rate-limits, times out) or refuses the request for good (bad credentials, a request it
will not take), the same call goes to the next model at once, and so on; the last model's
failure is the call's. Once a model has failed, the rest of the activity (an executor's later
turns, a planner's repairs) starts at the model that answered, so one outage costs one failed
call, not one per turn.

Each response says which model string answered (`served_by`) and why an earlier one was passed
over (`failovers`), so the ledger can say which model ran each call and why it changed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from stratagem.models import base
from stratagem.models.base import Model, ModelAuthError, ModelCallError, ModelRequest, ModelRequestError, ModelResponse

# What moves a call to the next model. A garbled answer is a ModelCallError too: another
# provider may well answer properly.
FAILOVER_ERRORS = (ModelCallError, ModelRequestError, ModelAuthError)


def load_model(
    model: str,
    *,
    price: Any = None,
    capabilities: Any = None,
    fallbacks: Sequence[str] = (),
    fallback_capabilities: Mapping[str, Any] | None = None,
) -> Model:
    """`base.load_model`, and with `fallbacks` a failover tier: those models, in order, answer a
    call the first one cannot (their own `capabilities` from `fallback_capabilities`)."""
    primary = base.load_model(model, price=price, capabilities=capabilities)
    if not fallbacks:
        return primary
    more = fallback_capabilities or {}
    members = [(m, base.load_model(m, capabilities=more.get(m))) for m in fallbacks]
    return FailoverModel([(model, primary), *members])


class FailoverModel:
    def __init__(self, members: list[tuple[str, Model]]):
        if not members:
            raise ValueError("a failover tier needs at least one model")
        self.members = members
        self.name = members[0][1].name
        self._first = 0  # the member that answered last: later calls of this activity start there

    @property
    def default_max_output_tokens(self) -> int | None:
        """The first model's: a call is built for it (stratagem.models.budgeted)."""
        return getattr(self.members[0][1], "default_max_output_tokens", None)

    @property
    def tool_prompt_tokens(self) -> int:
        """The most any member's provider adds to a request with tools: any may answer it."""
        return max(getattr(model, "tool_prompt_tokens", 0) for _, model in self.members)

    def count_input_tokens(self, request: ModelRequest) -> int | None:
        """The most any member counts for `request`, where every member can count exactly."""
        counts: list[int] = []
        for _, model in self.members:
            count = getattr(model, "count_input_tokens", None)
            value = count(request) if callable(count) else None
            if not isinstance(value, int):
                return None
            counts.append(value)
        return max(counts)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        passed_over: list[str] = []
        for index in range(self._first, len(self.members)):
            string, model = self.members[index]
            try:
                response = await model.complete(request)
            except FAILOVER_ERRORS as exc:
                if index == len(self.members) - 1:
                    raise
                passed_over.append(f"{string} failed ({_one_line(exc)})")
                continue
            self._first = index
            notes = [f"{note}; {string} answered instead" for note in passed_over]
            return response.model_copy(update={"served_by": string, "failovers": notes})
        raise AssertionError("unreachable: the last member's failure is raised")


def _one_line(exc: Exception) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 300 else text[:299] + "…"
