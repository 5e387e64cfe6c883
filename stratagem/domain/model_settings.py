"""How a run's models are called: the settings a configuration file may fix per model.

Which means of structured output and of tool calling an endpoint takes is negotiated by the
providers (stratagem.models.negotiation); a model's entry under `models:` in the configuration
file fixes them instead:

    models:
      openai:smollm2: {structured_output: json_object+schema, tool_calling: prompted}
"""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel, ConfigDict, Field


class StructuredOutput(str, Enum):
    json_schema = "json_schema"
    """response_format {type: json_schema}: OpenAI, vLLM, LM Studio, Ollama."""
    json_object_schema = "json_object+schema"
    """response_format {type: json_object, schema: ...}: llama.cpp's Python server, enforced by a grammar."""
    tool = "tool"
    """A forced call to a tool whose parameters are the schema (Anthropic's way)."""
    json_object = "json_object"
    """JSON mode, the schema in the prompt."""
    prompt = "prompt"
    """The schema in the prompt only."""

    @property
    def enforced(self) -> bool:
        """Whether the endpoint itself holds the answer to the schema."""
        return self in (StructuredOutput.json_schema, StructuredOutput.json_object_schema, StructuredOutput.tool)


STRUCTURED_ORDER = list(StructuredOutput)


class ToolCalling(str, Enum):
    native = "native"
    """The wire format's own tools."""
    prompted = "prompted"
    """The tools described in the prompt; the model names its calls in a JSON answer."""


class Capabilities(BaseModel):
    """How to call one model. Unset: negotiated with the endpoint (the best means first)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    structured_output: StructuredOutput | None = Field(
        default=None, description="json_schema, json_object+schema, tool, json_object or prompt."
    )
    tool_calling: ToolCalling | None = Field(default=None, description="native or prompted.")


def capabilities_for(model: str, table: dict[str, Capabilities]) -> Capabilities | None:
    """The configured settings of `model`: by its whole string, else without its base URL."""
    if model in table:
        return table[model]
    return table.get(model.partition("@")[0]) if "@" in model else None
