"""`anthropic:<model>[@<base url>]`: Anthropic's Messages API.

Configuration, clients and error handling are shared with the openai provider in `_http`; this
module only translates to and from the Messages wire format, which differs from chat completions:
system prompts travel apart from the turns, tool results are blocks of a user turn, and
`max_tokens` is required.

Structured output uses tool use, which every Claude model supports: the schema becomes a tool
the model is made to call, and the call's input is the answer.
"""

from __future__ import annotations

import json
from typing import Any

from stratagem.models._http import (
    ANTHROPIC,
    Endpoint,
    client_for,
    http_client,
    reading,
    resolve_endpoint,
    send,
    stream,
)
from stratagem.models.base import Message, ModelRequest, ModelRequestError, ModelResponse, Purpose, ToolCall, Usage
from stratagem.models.negotiation import Capabilities, StructuredOutput, negotiate
from stratagem.models.output_limit import lower_cap, within_limit

# The Messages API has no response format: a forced tool call holds the answer to the schema.
SUPPORTED = [StructuredOutput.tool, StructuredOutput.prompt]

DEFAULT_MAX_TOKENS = 4096
# The system prompt Anthropic adds to a request with tools, in input tokens (Claude 3.5 to 4.x,
# with tool_choice auto or none; 313 with any or tool): what the request's own text does not show.
TOOL_PROMPT_TOKENS = 346
SCHEMA_TOOL_DESCRIPTION = "Give your answer by calling this tool; its input is the answer, in the required structure."


class AnthropicModel:
    def __init__(self, spec: str):
        self.endpoint = resolve_endpoint(ANTHROPIC, spec)
        self.name = self.endpoint.label
        self.capabilities: Capabilities | None = None
        # What a run's budget counts before a call (stratagem.models.budgeted).
        self.default_max_output_tokens = DEFAULT_MAX_TOKENS
        self.tool_prompt_tokens = TOOL_PROMPT_TOKENS

    async def complete(self, request: ModelRequest) -> ModelResponse:
        return await negotiate(
            endpoint=self.endpoint,
            request=request,
            configured=self.capabilities,
            supported=SUPPORTED,
            send=self._send,
        )

    async def _send(self, request: ModelRequest, structured: StructuredOutput | None) -> ModelResponse:
        client = client_for(self.endpoint, _make_client)
        if structured is not StructuredOutput.tool:
            request = request.model_copy(update={"response_schema": None})  # in the prompt already
        arguments = _arguments(self.endpoint.model, request)
        arguments["max_tokens"] = within_limit(self.endpoint, arguments["max_tokens"])
        schema_tool = request.schema_name if request.response_schema else None
        for tried in range(2):
            try:
                if request.purpose is Purpose.plan:
                    # Streamed, so a plan still being written at the time limit is kept, cut, for
                    # the planner to repair; a plain call would lose it all to the timeout.
                    return await self._streamed(client, request, arguments, schema_tool)
                message = await send(self.endpoint, request, client.messages.create, arguments)
                break
            except ModelRequestError as exc:
                # A cap above the model's own limit (a budget's can be): sent again at that limit.
                lower = lower_cap(self.endpoint, str(exc), arguments["max_tokens"])
                if lower is None or tried:
                    raise
                arguments["max_tokens"] = lower
        with reading(self.endpoint):
            return _response(message, self.name, schema_tool)

    async def _streamed(
        self, client: Any, request: ModelRequest, arguments: dict[str, Any], schema_tool: str | None
    ) -> ModelResponse:
        answer = _StreamedMessage()
        if await stream(self.endpoint, request, client.messages.create, arguments, answer.read):
            answer.stop = "deadline"
        with reading(self.endpoint):
            return answer.response(self.name, schema_tool)


def _make_client(endpoint: Endpoint) -> Any:
    from anthropic import AsyncAnthropic

    # Temporal retries the activity, with backoff and Retry-After; the SDK must not retry too.
    return AsyncAnthropic(
        api_key=endpoint.api_key, base_url=endpoint.base_url, max_retries=0, http_client=http_client(ANTHROPIC)
    )


def _arguments(model: str, request: ModelRequest) -> dict[str, Any]:
    system, turns = _conversation(request.messages)
    arguments: dict[str, Any] = {
        "model": model,
        "max_tokens": request.max_output_tokens or DEFAULT_MAX_TOKENS,
        "messages": turns,
    }
    if system:
        arguments["system"] = system
    tools = [{"name": t.name, "description": t.description, "input_schema": t.parameters} for t in request.tools]
    if request.response_schema:
        schema = request.response_schema
        tools.append({"name": request.schema_name, "description": SCHEMA_TOOL_DESCRIPTION, "input_schema": schema})
        if not request.tools:
            # Only the answer is wanted: make the model call the schema tool.
            arguments["tool_choice"] = {"type": "tool", "name": request.schema_name}
    if tools:
        arguments["tools"] = tools
    return arguments


def _conversation(messages: list[Message]) -> tuple[str, list[dict[str, Any]]]:
    """The system prompt, and the turns: consecutive tool results become one user turn of blocks."""
    system = "\n\n".join(m.content for m in messages if m.role == "system" and m.content)
    turns: list[dict[str, Any]] = []
    previous = None
    for message in messages:
        if message.role == "system":
            continue
        if message.role == "tool":
            block = {
                "type": "tool_result",
                "tool_use_id": message.tool_call_id,
                "content": message.content,
                "is_error": message.is_error,
            }
            if previous == "tool":
                turns[-1]["content"].append(block)
            else:
                turns.append({"role": "user", "content": [block]})
        elif message.role == "assistant" and message.tool_calls:
            turns.append({"role": "assistant", "content": _assistant_blocks(message)})
        else:
            turns.append({"role": message.role, "content": message.content})
        previous = message.role
    return system, turns


def _assistant_blocks(message: Message) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = [{"type": "text", "text": message.content}] if message.content else []
    for call in message.tool_calls:
        # The API wants an object: arguments that did not parse are sent as an empty one.
        blocks.append({"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments or {}})
    return blocks


def _response(message: Any, name: str, schema_tool: str | None) -> ModelResponse:
    text = "".join(block.text for block in message.content if block.type == "text")
    calls: list[ToolCall] = []
    for block in message.content:
        if block.type != "tool_use":
            continue
        if block.name == schema_tool:
            text = json.dumps(block.input)
        else:
            calls.append(_tool_call(block))
    usage = _usage(message.usage)
    return ModelResponse(text=text, model=name, usage=usage, tool_calls=calls, stop_reason=message.stop_reason)


class _StreamedMessage:
    """A message put together from its stream's events: its blocks' text and tool inputs (as JSON
    text, whole or cut), its usage and its stop reason."""

    def __init__(self) -> None:
        self.blocks: dict[int, dict[str, Any]] = {}
        self.usage = Usage()
        self.stop: str | None = None

    def read(self, event: Any) -> None:
        kind = event.type
        if kind == "message_start":
            self.usage = _usage(event.message.usage)
        elif kind == "content_block_start":
            block = event.content_block
            self.blocks[event.index] = {
                "type": block.type,
                "text": [getattr(block, "text", "") or ""],
                "id": getattr(block, "id", ""),
                "name": getattr(block, "name", ""),
            }
        elif kind == "content_block_delta":
            piece = getattr(event.delta, "text", None) or getattr(event.delta, "partial_json", None) or ""
            self.blocks.setdefault(event.index, {"type": "text", "text": [], "id": "", "name": ""})["text"].append(
                piece
            )
        elif kind == "message_delta":
            self.stop = event.delta.stop_reason or self.stop
            if event.usage is not None and event.usage.output_tokens is not None:
                self.usage = Usage(input_tokens=self.usage.input_tokens, output_tokens=event.usage.output_tokens)

    def response(self, name: str, schema_tool: str | None) -> ModelResponse:
        text = "".join("".join(b["text"]) for b in self.blocks.values() if b["type"] == "text")
        calls: list[ToolCall] = []
        for block in self.blocks.values():
            if block["type"] != "tool_use":
                continue
            raw = "".join(block["text"])
            if block["name"] == schema_tool:
                text = raw
                continue
            try:
                arguments = json.loads(raw or "{}")
            except ValueError:
                arguments = None
            if isinstance(arguments, dict):
                calls.append(ToolCall(id=block["id"], name=block["name"], arguments=arguments))
            else:
                calls.append(ToolCall(id=block["id"], name=block["name"], arguments=None, raw_arguments=raw))
        return ModelResponse(text=text, model=name, usage=self.usage, tool_calls=calls, stop_reason=self.stop)


def _tool_call(block: Any) -> ToolCall:
    if isinstance(block.input, dict):
        return ToolCall(id=block.id, name=block.name, arguments=block.input)
    raw = block.input if isinstance(block.input, str) else json.dumps(block.input)
    return ToolCall(id=block.id, name=block.name, arguments=None, raw_arguments=raw)


def _usage(usage: Any) -> Usage:
    """Input tokens include the prompt cache's: Anthropic counts cached and uncached ones apart."""
    cached = (usage.cache_creation_input_tokens or 0) + (usage.cache_read_input_tokens or 0)
    return Usage(input_tokens=usage.input_tokens + cached, output_tokens=usage.output_tokens)
