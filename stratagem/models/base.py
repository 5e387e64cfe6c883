"""The model interface every provider implements, and the `provider:name` model strings.

A provider turns a `ModelRequest` (messages, the tools the caller offers, an optional JSON
schema for structured output) into a `ModelResponse` (text and/or tool calls, plus token
usage). Providers live on the worker: they may read files and API keys, which never travel
through workflow history.

Failures are classified here, once, for every provider:

- `ModelCallError`: another attempt may succeed (429, 5xx, timeouts, a garbled response).
  `retry_after` carries the server's Retry-After, which Temporal's next retry honours.
- `ModelAuthError`: the credentials were refused. Retrying cannot help.
- `ModelRequestError`: the provider refused the request itself (400, unknown model...).
- `ModelConfigError`: the model string or the worker's configuration is wrong.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from enum import Enum
from typing import Any, Protocol

from pydantic import BaseModel, Field

from stratagem.common.errors import ModelAuthError as ModelAuthError  # with the other errors: retry policies name it
from stratagem.common.errors import ModelConfigError
from stratagem.common.errors import ModelRequestError as ModelRequestError  # likewise
from stratagem.common.telemetry import model_call_span, record_response
from stratagem.domain.catalog import ToolSpec
from stratagem.domain.redaction import redact as redact  # where every model error message is masked
from stratagem.domain.redaction import without_secrets as without_secrets
from stratagem.domain.usage import Usage


class Purpose(str, Enum):
    plan = "plan"
    execute = "execute"
    synthesize = "synthesize"
    verify = "verify"


class ToolCall(BaseModel):
    """A tool call a model asked for."""

    id: str
    name: str
    arguments: dict[str, Any] | None = Field(
        default=None, description="The arguments, or None when the model's arguments were not a JSON object."
    )
    raw_arguments: str = Field(default="", description="The arguments as the model sent them, when they did not parse.")


class Message(BaseModel):
    role: str = Field(description="system, user, assistant or tool")
    content: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list, description="Assistant turns: the tools it called.")
    tool_call_id: str | None = Field(default=None, description="Tool turns: the call this result answers.")
    is_error: bool = Field(default=False, description="Tool turns: the call was refused or failed.")


class ModelRequest(BaseModel):
    purpose: Purpose
    messages: list[Message]
    response_schema: dict[str, Any] | None = Field(
        default=None,
        description="JSON schema the answer must follow (structured output). {} asks for any JSON value; "
        "None for free text.",
    )
    schema_name: str = Field(default="answer", description="A name for the schema, where the provider wants one.")
    tools: list[ToolSpec] = Field(default_factory=list, description="Tools the model may call in its answer.")
    step_id: str | None = None
    call_index: int = Field(
        default=0,
        description="How many calls of this purpose the run made before this one. Deterministic, so "
        "a retried activity asks for the same response.",
    )
    attempt: int = 1
    timeout_seconds: float | None = Field(default=None, gt=0, description="Limit for this one HTTP request.")
    max_output_tokens: int | None = Field(default=None, ge=1)

    @property
    def round(self) -> int:
        """How many assistant turns the conversation already holds (0 for the first call)."""
        return sum(1 for m in self.messages if m.role == "assistant")


class ModelResponse(BaseModel):
    text: str = ""
    model: str
    usage: Usage = Field(default_factory=Usage)
    tool_calls: list[ToolCall] = Field(default_factory=list)
    stop_reason: str | None = None
    negotiated: list[str] = Field(
        default_factory=list, description="How the endpoint's capabilities were learned (models.negotiation)."
    )
    served_by: str | None = Field(default=None, description="The model string that answered, in a failover tier.")
    failovers: list[str] = Field(default_factory=list, description="Models passed over for this call, and why.")


class ModelCallError(Exception):
    """A call failed in a way another attempt may fix (rate limits, timeouts, server errors)."""

    def __init__(self, message: str, *, retry_after: float | None = None, status: int | None = None):
        super().__init__(message)
        self.retry_after = retry_after
        self.status = status


class ModelTimeout(ModelCallError):
    """The call did not finish within its time limit. The planner counts it as an attempt to
    repair (ask for a shorter plan) rather than one to repeat as it was."""


class Model(Protocol):
    name: str

    async def complete(self, request: ModelRequest) -> ModelResponse: ...


ProviderFactory = Callable[[str], Model]
_providers: dict[str, ProviderFactory] = {}


def register_provider(name: str, factory: ProviderFactory) -> None:
    """Make `name:<model>` strings resolve through `factory(<model>)`."""
    _providers[name] = factory


def split_model_string(model: str) -> tuple[str, str]:
    provider, sep, name = model.partition(":")
    if not sep or not provider or not name:
        raise ModelConfigError(
            f"model '{model}' is not of the form provider:name (for example openai:gpt-4.1-mini or scripted:script.yaml)"
        )
    return provider, name


def load_model(model: str, *, price: Any = None, capabilities: Any = None) -> Model:
    """The model a `provider:name` string names. Every call it makes is a `chat <model>` span,
    costed with `price` (a `stratagem.domain.usage.Price`) when one is given. `capabilities`
    (`negotiation.Capabilities`) fixes how a provider that negotiates calls its endpoint.
    `stratagem.models.load_model` also takes a failover tier's other models."""
    return _load_one(model, price, capabilities)


def _load_one(model: str, price: Any, capabilities: Any) -> Model:
    provider, name = split_model_string(model)
    if provider not in _providers:
        known = ", ".join(sorted(_providers)) or "none"
        raise ModelConfigError(f"unknown model provider '{provider}' in '{model}' (known: {known})")
    instance = _providers[provider](name)
    if capabilities is not None and hasattr(instance, "capabilities"):
        instance.capabilities = capabilities
    return TracedModel(instance, provider, name.partition("@")[0], price)


class TracedModel:
    """A model whose every call is a span with the GenAI semantic-convention attributes."""

    def __init__(self, model: Model, provider: str, name: str, price: Any = None):
        self.model, self.provider, self.request_model, self.price = model, provider, name, price
        self.name = model.name

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self.model, attribute)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        with model_call_span(
            self.provider,
            self.request_model,
            purpose=request.purpose.value,
            step_id=request.step_id,
            attempt=request.attempt,
        ) as span:
            response = await self.model.complete(request)
            usage = response.usage
            record_response(
                span, response.model, usage.input_tokens, usage.output_tokens, response.stop_reason, self.price
            )
        return response


def known_providers() -> list[str]:
    return sorted(_providers)


DEFAULT_REQUEST_TIMEOUT = 120.0
REQUEST_TIMEOUT_ENV = "STRATAGEM_REQUEST_TIMEOUT"


def request_timeout_default() -> float:
    """Seconds one HTTP request to a model may take: STRATAGEM_REQUEST_TIMEOUT, else 120."""
    raw = os.environ.get(REQUEST_TIMEOUT_ENV, "").strip()
    if not raw:
        return DEFAULT_REQUEST_TIMEOUT
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise ModelConfigError(f"{REQUEST_TIMEOUT_ENV} must be a number of seconds greater than 0, not '{raw}'")
    return seconds
