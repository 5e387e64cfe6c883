"""What each model endpoint supports, found out once and remembered: capability negotiation.

Servers that speak a vendor's wire format differ in what they accept. OpenAI and vLLM take a
`json_schema` response format; llama.cpp's Python server refuses it but takes `json_object` with a
`schema` (and enforces it with a grammar); some take only JSON mode, some not even that. Tool
calling differs the same way. A request the endpoint cannot take must not fail a run, so:

- Structured output is asked for by the best means left for the endpoint, in the order of
  `STRUCTURED_ORDER`: a JSON-schema response format, JSON mode with a schema, a forced call to a
  tool whose parameters are the schema, JSON mode with the schema in the prompt, and last the
  schema in the prompt alone (the caller's repair loop then catches what the model gets wrong).
- Tools are offered natively, or through a prompted protocol (`prompted_tools`): the tools are
  described in the system prompt and the model answers with a JSON object naming its calls,
  constrained by a schema where the endpoint enforces one. The calls come back as ordinary tool
  calls, so the executor's allowlist and approvals apply to them exactly as to native ones.

A refusal that names the feature (HTTP 400 or 422, or a 5xx whose body names it, as llama.cpp's
server sends) moves the endpoint to the next means, once per endpoint and worker process, and
the call is made again at once. What was learned is kept in `_learned` and reported with every
response (`ModelResponse.negotiated`), so each run's ledger says how its models were called.

A model's settings in the configuration file (`models:` in stratagem.yaml) fix the means instead:
nothing is then tried or learned for it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from enum import Enum
from typing import Any

from pydantic import BaseModel, Field

from stratagem.domain.model_settings import (
    STRUCTURED_ORDER,
    Capabilities,
    StructuredOutput,
    ToolCalling,
    capabilities_for,
)
from stratagem.models._http import Endpoint
from stratagem.models.base import Message, ModelCallError, ModelRequest, ModelRequestError, ModelResponse, ToolCall

__all__ = [
    "STRUCTURED_ORDER",
    "Capabilities",
    "StructuredOutput",
    "ToolCalling",
    "capabilities_for",
    "forget_learned",
    "negotiate",
]


class Feature(str, Enum):
    structured = "structured output"
    tools = "tool calling"


# What a server's refusal names when it cannot take the request's structured output or tools.
_STRUCTURED_WORDS = re.compile(r"response_format|json_schema|json_object|\bschema\b|\bstrict\b|guided_json", re.I)
_TOOL_WORDS = re.compile(r"\btools?\b|tool_choice|function|tool call", re.I)


def refused_feature(exc: Exception, asked: set[Feature]) -> Feature | None:
    """The feature a refusal is about, if it names one the request used; None for any other failure."""
    status = getattr(exc, "status", None)
    if not isinstance(exc, (ModelRequestError, ModelCallError)) or status is None:
        return None
    if status not in (400, 404, 415, 422) and status < 500:
        return None
    text = str(exc)
    # The tools first: a refusal of a forced schema tool is about structured output, and says "tool".
    if Feature.tools in asked and _TOOL_WORDS.search(text) and not _STRUCTURED_WORDS.search(text):
        return Feature.tools
    if Feature.structured in asked and (_STRUCTURED_WORDS.search(text) or _TOOL_WORDS.search(text)):
        return Feature.structured
    return None


class Learned(BaseModel):
    """What one endpoint was found to support in this worker process."""

    structured_output: StructuredOutput | None = None
    tool_calling: ToolCalling | None = None
    token_field: str | None = Field(default=None, description="How the output limit is named (openai only).")
    max_output_tokens: int | None = Field(default=None, description="The most output the model takes a cap of.")
    notes: list[str] = Field(default_factory=list, description="How it was learned, one line each.")


# (provider, base URL, model) -> what this process learned. A worker learns each endpoint once.
_learned: dict[tuple[str, str, str], Learned] = {}


def learned(endpoint: Endpoint) -> Learned:
    """What this process learned of `endpoint` (its provider, base URL and model)."""
    return _learned.setdefault((endpoint.provider.name, endpoint.base_url, endpoint.model), Learned())


def forget_learned() -> None:
    """For tests: start again as a fresh worker would."""
    _learned.clear()


Send = Callable[[ModelRequest, StructuredOutput | None], Awaitable[ModelResponse]]


async def negotiate(
    *,
    endpoint: Endpoint,
    request: ModelRequest,
    configured: Capabilities | None,
    supported: list[StructuredOutput],
    send: Send,
) -> ModelResponse:
    """Make the call by the best means the endpoint is known or configured to take, moving on
    to the next means when a refusal names the one used.

    `supported` is the wire format's means of structured output, best first; `send(request, mode)`
    makes one call with the request as it stands (tools native, the schema by `mode`)."""
    state = learned(endpoint)
    label = f"{endpoint.label} at {endpoint.base_url}"
    configured = configured or Capabilities()
    while True:
        structured = None
        if request.response_schema is not None:
            structured = _structured_mode(configured, state, supported, any_json=request.response_schema == {})
        tools = configured.tool_calling or state.tool_calling or ToolCalling.native
        wire = request
        if request.tools and tools is ToolCalling.prompted:
            wire = prompted_tools(request)
            structured = _structured_mode(configured, state, supported)
        if structured is not None and not structured.enforced:
            wire = schema_in_prompt(wire, structured)
        asked = ({Feature.tools} if wire.tools else set()) | ({Feature.structured} if structured else set())
        try:
            response = await send(wire, structured)
        except (ModelRequestError, ModelCallError) as exc:
            feature = refused_feature(exc, asked)
            if feature is None or not _fall_back(feature, configured, state, structured, supported, label, exc):
                raise
            continue
        if request.tools and tools is ToolCalling.prompted:
            response = read_prompted(response, request)
        return response.model_copy(update={"negotiated": list(state.notes)})


def _structured_mode(
    configured: Capabilities, state: Learned, supported: list[StructuredOutput], *, any_json: bool = False
) -> StructuredOutput:
    mode = configured.structured_output or state.structured_output or supported[0]
    if any_json and mode.enforced and StructuredOutput.json_object in supported:
        return StructuredOutput.json_object  # no schema to hold the answer to: JSON mode is the means
    return mode


def _fall_back(
    feature: Feature,
    configured: Capabilities,
    state: Learned,
    structured: StructuredOutput | None,
    supported: list[StructuredOutput],
    label: str,
    exc: Exception,
) -> bool:
    """Move the endpoint to its next means of `feature`; False when there is none left (or the
    configuration fixed it), and the refusal stands."""
    status = getattr(exc, "status", "?")
    if feature is Feature.tools:
        if configured.tool_calling is not None:
            return False
        if state.tool_calling is ToolCalling.prompted:
            return True  # another call learned it meanwhile (this one went out native)
        state.tool_calling = ToolCalling.prompted
        state.notes.append(
            f"{label}: tools are offered in the prompt: the endpoint refused native tools (HTTP {status})"
        )
        return True
    if configured.structured_output is not None or structured is None:
        return False
    later = supported[supported.index(structured) + 1 :] if structured in supported else []
    if not later:
        return False
    if state.structured_output in later:
        return True  # another call learned it meanwhile (this one went out the older way)
    state.structured_output = later[0]
    state.notes.append(
        f"{label}: structured output by {later[0].value}: the endpoint refused {structured.value} (HTTP {status})"
    )
    return True


# --- structured output in the prompt ------------------------------------------------------------


def schema_in_prompt(request: ModelRequest, mode: StructuredOutput) -> ModelRequest:
    """The request with its schema written into the system prompt, for an endpoint that will not
    hold the answer to it. JSON mode keeps `response_schema` as {} (any JSON); the prompt mode drops it."""
    schema = request.response_schema or {}
    text = "Answer with one JSON value and nothing else."
    if schema:
        text += " It must follow this JSON schema:\n" + json.dumps(schema, separators=(",", ":"))
    messages = _with_system(request.messages, text)
    return request.model_copy(
        update={"messages": messages, "response_schema": {} if mode is StructuredOutput.json_object else None}
    )


def _with_system(messages: list[Message], text: str) -> list[Message]:
    if messages and messages[0].role == "system":
        first = messages[0].model_copy(update={"content": f"{messages[0].content}\n\n{text}"})
        return [first, *messages[1:]]
    return [Message(role="system", content=text), *messages]


# --- the prompted tool-call protocol ------------------------------------------------------------

PROMPTED_TOOLS = """Tools: you may call these, and only these. To call tools, answer with
{{"tool_calls": [{{"name": "<tool>", "arguments": {{...}}}}]}}, and the results come back in the next
message. When you are done, answer with {{"answer": <your final answer>}} instead.
{tools}"""


def prompted_tools(request: ModelRequest) -> ModelRequest:
    """The request for an endpoint without native tools: the tools in the system prompt, the
    earlier calls and results as text, and a schema that allows exactly a call of an offered tool
    with its arguments, or a final answer."""
    listed = "\n".join(
        f"- {t.name}: {t.description.strip()[:500] or '(no description)'}; arguments: "
        + json.dumps(t.parameters, separators=(",", ":"))
        for t in request.tools
    )
    messages = _with_system(request.messages, PROMPTED_TOOLS.format(tools=listed))
    answer: dict[str, Any] = request.response_schema if request.response_schema else {"type": "string"}
    calls = {
        "type": "array",
        "minItems": 1,
        "items": {
            "anyOf": [
                {
                    "type": "object",
                    "properties": {"name": {"type": "string", "enum": [t.name]}, "arguments": t.parameters},
                    "required": ["name", "arguments"],
                }
                for t in request.tools
            ]
        },
    }
    schema = {
        "anyOf": [
            {"type": "object", "properties": {"tool_calls": calls}, "required": ["tool_calls"]},
            {"type": "object", "properties": {"answer": answer}, "required": ["answer"]},
        ]
    }
    return request.model_copy(
        update={
            "messages": [_as_text(m) for m in messages],
            "tools": [],
            "response_schema": schema,
            "schema_name": "turn",
        }
    )


def _as_text(message: Message) -> Message:
    """A native tool turn as the prompted protocol's text."""
    if message.role == "assistant" and message.tool_calls:
        calls = [{"name": c.name, "arguments": c.arguments or c.raw_arguments} for c in message.tool_calls]
        return Message(role="assistant", content=json.dumps({"tool_calls": calls}))
    if message.role == "tool":
        outcome = "failed" if message.is_error else "returned"
        return Message(role="user", content=f"Tool call {message.tool_call_id} {outcome}:\n{message.content}")
    return message


def read_prompted(response: ModelResponse, request: ModelRequest) -> ModelResponse:
    """The prompted protocol's answer as ordinary text or tool calls. An answer that is neither
    is handed back as text: the caller's checks (JSON repairs, criteria) see what the model said."""
    try:
        data = json.loads(_unfenced(response.text))
    except ValueError:
        return response
    if not isinstance(data, dict):
        return response
    calls = data.get("tool_calls")
    if isinstance(calls, list) and calls:
        turn = request.round
        found = []
        for number, call in enumerate(calls):
            if not isinstance(call, dict):
                continue
            name = str(call.get("name", ""))
            arguments = call.get("arguments")
            if isinstance(arguments, dict):
                found.append(ToolCall(id=f"call_{turn}_{number}", name=name, arguments=arguments))
            else:
                raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
                found.append(ToolCall(id=f"call_{turn}_{number}", name=name, arguments=None, raw_arguments=raw))
        if found:
            return response.model_copy(update={"text": "", "tool_calls": found})
    if "answer" in data:
        answer = data["answer"]
        text = answer if isinstance(answer, str) else json.dumps(answer)
        return response.model_copy(update={"text": text})
    return response


def _unfenced(text: str) -> str:
    body = text.strip()
    if body.startswith("```"):
        body = body.strip("`")
        body = body.split("\n", 1)[1] if "\n" in body else ""
    return body
