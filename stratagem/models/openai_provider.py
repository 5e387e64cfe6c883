"""`openai:<model>[@<base url>]`: OpenAI's chat completions, and every server that speaks them.

vLLM, Ollama, LM Studio and many gateways implement the same endpoint, so one provider covers
them: `openai:llama3.1:8b@http://127.0.0.1:11434/v1`. Configuration, clients and error handling
are shared with the anthropic provider in `_http`; this module only translates messages, tools
and structured output to and from the chat-completions wire format.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from stratagem.models._http import (
    OPENAI,
    Endpoint,
    client_for,
    http_client,
    reading,
    resolve_endpoint,
    send,
    stream,
)
from stratagem.models.base import Message, ModelRequest, ModelRequestError, ModelResponse, Purpose, ToolCall, Usage
from stratagem.models.negotiation import STRUCTURED_ORDER, Capabilities, StructuredOutput, learned, negotiate
from stratagem.models.output_limit import lower_cap, within_limit


class OpenAIModel:
    def __init__(self, spec: str):
        self.endpoint = resolve_endpoint(OPENAI, spec)
        self.name = self.endpoint.label
        self.capabilities: Capabilities | None = None

    async def complete(self, request: ModelRequest) -> ModelResponse:
        return await negotiate(
            endpoint=self.endpoint,
            request=request,
            configured=self.capabilities,
            supported=STRUCTURED_ORDER,
            send=self._send,
        )

    async def _send(self, request: ModelRequest, structured: StructuredOutput | None) -> ModelResponse:
        client = client_for(self.endpoint, _make_client)
        arguments = _arguments(self.endpoint.model, request, structured)
        limited = request.max_output_tokens is not None
        if limited and request.purpose is Purpose.plan and trusted_default(self.endpoint):
            # The planner's limit guards against local models that write on until their context
            # is full. OpenAI's own reasoning models count their reasoning in it, and a plan
            # worth reviewing could be cut off; they need no such guard.
            arguments.pop("max_completion_tokens")
            limited = False
        elif limited:
            field = self._token_field()
            arguments[field] = within_limit(self.endpoint, arguments.pop("max_completion_tokens"))
        schema_tool = request.schema_name if structured is StructuredOutput.tool else None
        # A refused output limit is sent again once by its other name, and once lowered to the
        # model's own limit (a budget's cap can be above it): each learned for the endpoint.
        tries = 3 if limited else 1
        for tried in range(tries):
            try:
                if limited and request.purpose is Purpose.plan:
                    # Streamed, so a plan still being written at the time limit is kept, cut, for
                    # the planner to repair; a plain call would lose it all to the timeout.
                    return await self._streamed(client, request, arguments, schema_tool)
                completion = await send(self.endpoint, request, client.chat.completions.create, arguments)
                break
            except ModelRequestError as exc:
                if tried == tries - 1 or not self._adjusted(exc, arguments):
                    raise
        with reading(self.endpoint):
            return _response(completion, self.name, schema_tool)

    async def _streamed(
        self, client: Any, request: ModelRequest, arguments: dict[str, Any], schema_tool: str | None
    ) -> ModelResponse:
        answer = _StreamedAnswer()
        body = {**arguments, "stream_options": {"include_usage": True}}
        if await stream(self.endpoint, request, client.chat.completions.create, body, answer.read):
            answer.finish = "deadline"
        with reading(self.endpoint):
            return answer.response(self.name, schema_tool, request)

    def _adjusted(self, exc: ModelRequestError, arguments: dict[str, Any]) -> bool:
        """Whether `arguments` now carry the output limit as the refusal `exc` asks: lowered to
        what the server allows, or under its other name. False: the refusal is about something else."""
        field = "max_tokens" if "max_tokens" in arguments else "max_completion_tokens"
        lower = lower_cap(self.endpoint, str(exc), arguments[field])
        if lower is not None:
            arguments[field] = lower
            return True
        other = "max_tokens" if field == "max_completion_tokens" else "max_completion_tokens"
        if other not in str(exc):
            return False
        # "Unsupported parameter: 'max_tokens' ... Use 'max_completion_tokens' instead."
        state = learned(self.endpoint)
        state.token_field = other
        state.notes.append(f"{self.name} at {self.endpoint.base_url}: output limit sent as {other} (HTTP {exc.status})")
        arguments[other] = arguments.pop(field)
        return True

    def _token_field(self) -> str:
        """How the output limit is named: OpenAI's own API wants max_completion_tokens (its
        reasoning models refuse max_tokens); servers that copy the format mostly read only
        max_tokens, and llama.cpp's Python server ignores the other name without a word."""
        known = learned(self.endpoint).token_field
        if known:
            return known
        official = trusted_default(self.endpoint)
        return "max_completion_tokens" if official else "max_tokens"


def trusted_default(endpoint: Endpoint) -> bool:
    return endpoint.base_url.rstrip("/") == OPENAI.default_url.rstrip("/")


def _make_client(endpoint: Endpoint) -> Any:
    from openai import AsyncOpenAI

    # Temporal retries the activity, with backoff and Retry-After; the SDK must not retry too.
    return AsyncOpenAI(
        api_key=endpoint.api_key, base_url=endpoint.base_url, max_retries=0, http_client=http_client(OPENAI)
    )


SCHEMA_TOOL_DESCRIPTION = (
    "Give your answer by calling this tool; its arguments are the answer, in the required structure."
)


def _arguments(model: str, request: ModelRequest, structured: StructuredOutput | None) -> dict[str, Any]:
    """The chat-completions body; the schema (if any) asked for by `structured`."""
    arguments: dict[str, Any] = {"model": model, "messages": [_message(m) for m in request.messages]}
    tools = [
        {"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}
        for t in request.tools
    ]
    schema = request.response_schema
    if schema and structured is StructuredOutput.json_schema:
        arguments["response_format"] = {
            "type": "json_schema",
            # Not strict: OpenAI's strict mode wants every object closed, and plans hold open ones
            # (a tool's free-form arguments, an output schema); the validation that follows holds
            # the answer to the rules either way.
            "json_schema": {"name": request.schema_name, "schema": schema, "strict": False},
        }
    elif schema and structured is StructuredOutput.json_object_schema:
        arguments["response_format"] = {"type": "json_object", "schema": schema}
    elif schema and structured is StructuredOutput.tool:
        function = {"name": request.schema_name, "description": SCHEMA_TOOL_DESCRIPTION, "parameters": schema}
        tools.append({"type": "function", "function": function})
        if not request.tools:  # only the answer is wanted: make the model call the schema tool
            arguments["tool_choice"] = {"type": "function", "function": {"name": request.schema_name}}
    elif schema is not None and structured is not StructuredOutput.prompt:
        arguments["response_format"] = {"type": "json_object"}
    if tools:
        arguments["tools"] = tools
    if request.max_output_tokens is not None:
        arguments["max_completion_tokens"] = request.max_output_tokens
    return arguments


def _message(message: Message) -> dict[str, Any]:
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    if message.role == "assistant" and message.tool_calls:
        return {
            "role": "assistant",
            "content": message.content or None,
            "tool_calls": [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": _arguments_text(c)}}
                for c in message.tool_calls
            ],
        }
    return {"role": message.role, "content": message.content}


def _arguments_text(call: ToolCall) -> str:
    """The arguments as the model sent them: re-encoded when they parsed, else the raw text."""
    return json.dumps(call.arguments) if call.arguments is not None else call.raw_arguments


def _response(completion: Any, name: str, schema_tool: str | None) -> ModelResponse:
    choice = completion.choices[0]
    text = choice.message.content or ""
    calls = []
    for call in choice.message.tool_calls or []:
        if schema_tool is not None and call.function.name == schema_tool:
            text = call.function.arguments or ""  # the answer, as the schema tool's arguments
        else:
            calls.append(_tool_call(call))
    return ModelResponse(
        text=text, model=name, usage=_usage(completion.usage), tool_calls=calls, stop_reason=choice.finish_reason
    )


class _StreamedAnswer:
    """A chat completion put together from its stream's chunks."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish: str | None = None
        self.usage: Any = None
        self.chunks = 0

    def read(self, chunk: Any) -> None:
        if getattr(chunk, "usage", None) is not None:
            self.usage = chunk.usage
        for choice in chunk.choices or []:
            delta = choice.delta
            if delta is not None and delta.content:
                self.text.append(delta.content)
                self.chunks += 1
            for call in (delta.tool_calls if delta is not None else None) or []:
                entry = self.calls.setdefault(call.index, {"id": "", "name": "", "arguments": []})
                if call.id:
                    entry["id"] = call.id
                if call.function is not None and call.function.name:
                    entry["name"] = call.function.name
                if call.function is not None and call.function.arguments:
                    entry["arguments"].append(call.function.arguments)
                    self.chunks += 1
            if choice.finish_reason:
                self.finish = choice.finish_reason

    def response(self, name: str, schema_tool: str | None, request: ModelRequest) -> ModelResponse:
        text = "".join(self.text)
        calls = []
        for entry in self.calls.values():
            raw = "".join(entry["arguments"])
            if schema_tool is not None and entry["name"] == schema_tool:
                text = raw
            else:
                function = SimpleNamespace(name=entry["name"], arguments=raw)
                calls.append(_tool_call(SimpleNamespace(id=entry["id"], function=function)))
        usage = _usage(self.usage)
        if self.usage is None:
            # A cut stream ends before its usage, and some servers (llama-cpp-python's) never send
            # it: an estimate, four characters a token and a few a message. The schema is left out:
            # a server holding the answer to it by a grammar does not put it in the prompt.
            sent = sum(len(m.content) // 4 + 4 for m in request.messages)
            usage = Usage(input_tokens=sent, output_tokens=self.chunks)
        return ModelResponse(text=text, model=name, usage=usage, tool_calls=calls, stop_reason=self.finish)


def _usage(usage: Any) -> Usage:
    """Zeros when the server did not count (some local servers leave usage out)."""
    if usage is None:
        return Usage()
    return Usage(input_tokens=usage.prompt_tokens or 0, output_tokens=usage.completion_tokens or 0)


def _tool_call(call: Any) -> ToolCall:
    raw = call.function.arguments or ""
    try:
        arguments = json.loads(raw or "{}")  # some servers send "" for a call without arguments
    except ValueError:
        arguments = None
    if isinstance(arguments, dict):
        return ToolCall(id=call.id, name=call.function.name, arguments=arguments)
    return ToolCall(id=call.id, name=call.function.name, arguments=None, raw_arguments=raw)
