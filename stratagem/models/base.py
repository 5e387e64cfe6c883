"""The model interface every provider implements, and the `provider:name` model strings.

A provider turns a `ModelRequest` (messages, an optional JSON schema for structured output)
into a `ModelResponse` (text plus token usage). Providers live on the worker: they may read
files and API keys, which never travel through workflow history.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Callable, Protocol

from pydantic import BaseModel, Field

from ..errors import ModelConfigError


class Purpose(str, Enum):
    plan = "plan"
    execute = "execute"
    synthesize = "synthesize"


class Message(BaseModel):
    role: str = Field(description="system, user or assistant")
    content: str


class Usage(BaseModel):
    input_tokens: int = 0
    output_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(input_tokens=self.input_tokens + other.input_tokens, output_tokens=self.output_tokens + other.output_tokens)


class ModelRequest(BaseModel):
    purpose: Purpose
    messages: list[Message]
    response_schema: dict[str, Any] | None = Field(
        default=None, description="JSON schema the answer must follow (structured output), if any."
    )
    step_id: str | None = None
    call_index: int = Field(
        default=0,
        description="How many calls of this purpose the run made before this one. Deterministic, so "
        "a retried activity asks for the same response.",
    )
    attempt: int = 1


class ModelResponse(BaseModel):
    text: str
    model: str
    usage: Usage = Field(default_factory=Usage)


class ModelCallError(Exception):
    """A call failed in a way another attempt may fix (rate limits, timeouts, server errors)."""


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
            f"model '{model}' is not of the form provider:name (for example scripted:script.yaml)"
        )
    return provider, name


def load_model(model: str) -> Model:
    provider, name = split_model_string(model)
    if provider not in _providers:
        known = ", ".join(sorted(_providers)) or "none"
        raise ModelConfigError(f"unknown model provider '{provider}' in '{model}' (known: {known})")
    return _providers[provider](name)
