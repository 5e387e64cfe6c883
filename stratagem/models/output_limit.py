"""The most output a server lets a request ask for, read from its refusal of more.

A run's budget caps a call's output at what the budget leaves (`stratagem.models.budgeted`),
which can be more than the model can write, and servers refuse that rather than write less:
OpenAI ("max_tokens is too large: 100000. This model supports at most 16384 completion tokens"),
Anthropic ("max_tokens: 100000 > 64000, which is the maximum allowed number of output tokens"),
vLLM ("This model's maximum context length is 8192 tokens. However, you requested 100024 tokens
(24 in the messages, 100000 in the completion)", or "... and your request has 24 input tokens").
A cap above what a model can write limits nothing, so the providers send the call again at once
with the most the server allows, and remember a model's own limit for its endpoint
(`negotiation.Learned.max_output_tokens`). Lowering a cap never lets a call spend more.
"""

from __future__ import annotations

import re

from stratagem.models._http import Endpoint
from stratagem.models.negotiation import learned

_MODEL_LIMIT = [
    re.compile(r"supports at most (\d+) (?:completion |output )?tokens", re.I),
    re.compile(r"max_tokens:\s*\d+\s*>\s*(\d+), which is the maximum", re.I),
]
_CONTEXT = re.compile(r"maximum context length is (\d+) tokens", re.I)
_PROMPT = re.compile(r"(\d+) in the messages|request has (\d+) input tokens", re.I)


def allowed_output(message: str) -> tuple[int, bool] | None:
    """From a refusal: the most output tokens the server allows, and whether that is the model's
    own limit (True) or this request's, its context less its input (False). None when the
    refusal says neither."""
    for pattern in _MODEL_LIMIT:
        match = pattern.search(message)
        if match:
            return int(match[1]), True
    context, prompt = _CONTEXT.search(message), _PROMPT.search(message)
    if context and prompt:
        return int(context[1]) - int(prompt[1] or prompt[2]), False
    return None


def within_limit(endpoint: Endpoint, cap: int) -> int:
    """`cap`, or less: the model's own limit where the endpoint is known to refuse more."""
    limit = learned(endpoint).max_output_tokens
    return min(cap, limit) if limit else cap


def lower_cap(endpoint: Endpoint, refusal: str, cap: int) -> int | None:
    """The cap to ask again with, after `refusal` of `cap` (None: the refusal is about
    something else, or allows no less). A model's own limit is remembered for the endpoint."""
    allowed = allowed_output(refusal)
    if allowed is None or not 1 <= allowed[0] < cap:
        return None
    most, model_wide = allowed
    if model_wide:
        state = learned(endpoint)
        state.max_output_tokens = most
        state.notes.append(f"{endpoint.label} at {endpoint.base_url}: writes at most {most:,} output tokens a call")
    return most
