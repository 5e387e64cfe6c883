"""Capability negotiation: each endpoint is called by the best means it takes, learned from refusals.

The servers here refuse what real ones refuse, with the bodies they send: llama.cpp's Python
server answers a `json_schema` response format with an HTTP 500 whose body names the field, and
some OpenAI-compatible gateways answer `tools` with a 400. Every request goes through the real SDK.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from support.wire_servers import FakeAnthropic, FakeOpenAI, Reply

from stratagem.domain.catalog import ToolSpec
from stratagem.models import Message, ModelRequest, ModelRequestError, Purpose, load_model
from stratagem.models.negotiation import (
    Capabilities,
    StructuredOutput,
    ToolCalling,
    capabilities_for,
    forget_learned,
)

pytestmark = pytest.mark.unit

SCHEMA = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}
GREET = ToolSpec(
    name="greet",
    description="Greet someone.",
    parameters={"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
)
# What llama-cpp-python 0.3's server sends for {"response_format": {"type": "json_schema", ...}}.
LLAMA_CPP_REFUSAL = (
    "1 validation error:\n  {'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), "
    "'msg': \"Input should be 'text' or 'json_object'\", 'input': 'json_schema'}"
)


@pytest.fixture(autouse=True)
def fresh_worker() -> Iterator[None]:
    forget_learned()
    yield
    forget_learned()


@pytest.fixture
def openai_fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        monkeypatch.setenv("STRATAGEM_MODEL_URLS", fake.base_url)
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
        yield fake


def ask(**fields: Any) -> ModelRequest:
    messages = [Message(role="system", content="You help."), Message(role="user", content="What is 6 x 7?")]
    return ModelRequest(purpose=Purpose.execute, messages=fields.pop("messages", messages), **fields)


def llama_cpp(answer: Callable[[dict[str, Any]], Reply]) -> Callable[[dict[str, Any]], Reply]:
    """A responder that refuses a json_schema response format as llama.cpp's server does."""

    def respond(body: dict[str, Any]) -> Reply:
        if (body.get("response_format") or {}).get("type") == "json_schema":
            return Reply.error(500, LLAMA_CPP_REFUSAL)
        return answer(body)

    return respond


async def test_a_refused_json_schema_moves_to_json_mode_with_the_schema_once_per_endpoint(
    openai_fake: FakeOpenAI,
) -> None:
    openai_fake.responder = llama_cpp(lambda body: Reply.json({"answer": 42}))
    model = load_model(f"openai:smollm2@{openai_fake.base_url}")
    response = await model.complete(ask(response_schema=SCHEMA))
    assert json.loads(response.text) == {"answer": 42}
    refused, accepted = openai_fake.requests
    assert refused.body["response_format"]["type"] == "json_schema"
    assert accepted.body["response_format"] == {"type": "json_object", "schema": SCHEMA}
    [note] = response.negotiated
    assert "structured output by json_object+schema" in note and "refused json_schema (HTTP 500)" in note
    # Learned: the next call (another activity, another run) asks the right way at once.
    again = await load_model(f"openai:smollm2@{openai_fake.base_url}").complete(ask(response_schema=SCHEMA))
    assert len(openai_fake.requests) == 3
    assert openai_fake.requests[2].body["response_format"] == {"type": "json_object", "schema": SCHEMA}
    assert again.negotiated == [note]


async def test_each_refusal_moves_one_means_down_to_the_prompt(openai_fake: FakeOpenAI) -> None:
    def respond(body: dict[str, Any]) -> Reply:
        if "response_format" in body:
            return Reply.error(400, "response_format is not supported by this server")
        if "tools" in body:
            return Reply.error(400, "tools are not supported")
        return Reply.text('{"answer": 42}')

    openai_fake.responder = respond
    response = await load_model(f"openai:tiny@{openai_fake.base_url}").complete(ask(response_schema=SCHEMA))
    assert json.loads(response.text) == {"answer": 42}
    sent = [r.body for r in openai_fake.requests]
    assert [b.get("response_format", {}).get("type") for b in sent] == [
        "json_schema",
        "json_object",
        None,
        "json_object",
        None,
    ]
    assert sent[2]["tool_choice"] == {"type": "function", "function": {"name": "answer"}}
    # Not held by the server any more: the schema is in the system prompt.
    system = sent[-1]["messages"][0]["content"]
    assert system.startswith("You help.") and json.dumps(SCHEMA, separators=(",", ":")) in system
    assert len(response.negotiated) == 4 and "structured output by prompt" in response.negotiated[-1]


async def test_a_forced_schema_tool_carries_the_answer(openai_fake: FakeOpenAI) -> None:
    openai_fake.enqueue(Reply.json({"answer": 42}))
    fixed = Capabilities(structured_output=StructuredOutput.tool)
    response = await load_model(f"openai:m@{openai_fake.base_url}", capabilities=fixed).complete(
        ask(response_schema=SCHEMA, schema_name="result")
    )
    assert json.loads(response.text) == {"answer": 42} and response.tool_calls == []
    [sent] = openai_fake.requests
    assert sent.body["tools"][0]["function"]["name"] == "result"
    assert sent.body["tools"][0]["function"]["parameters"] == SCHEMA
    assert "response_format" not in sent.body


async def test_a_refusal_that_names_no_feature_is_not_negotiated(openai_fake: FakeOpenAI) -> None:
    openai_fake.enqueue(Reply.error(404, "The model `nope` does not exist"))
    with pytest.raises(ModelRequestError, match="does not exist"):
        await load_model(f"openai:nope@{openai_fake.base_url}").complete(ask(response_schema=SCHEMA))
    assert len(openai_fake.requests) == 1


async def test_configured_means_are_used_as_they_are_and_a_refusal_of_them_stands(openai_fake: FakeOpenAI) -> None:
    openai_fake.responder = llama_cpp(lambda body: Reply.json({"answer": 1}))
    fixed = Capabilities(structured_output=StructuredOutput.json_schema)
    with pytest.raises(Exception, match="HTTP 500"):
        await load_model(f"openai:m@{openai_fake.base_url}", capabilities=fixed).complete(ask(response_schema=SCHEMA))
    assert len(openai_fake.requests) == 1
    llama = Capabilities(structured_output=StructuredOutput.json_object_schema)
    await load_model(f"openai:m@{openai_fake.base_url}", capabilities=llama).complete(ask(response_schema=SCHEMA))
    assert openai_fake.requests[1].body["response_format"] == {"type": "json_object", "schema": SCHEMA}


async def test_refused_native_tools_move_to_the_prompted_protocol(openai_fake: FakeOpenAI) -> None:
    def respond(body: dict[str, Any]) -> Reply:
        if "tools" in body:
            return Reply.error(400, "this model does not support tools")
        return Reply.text(json.dumps({"tool_calls": [{"name": "greet", "arguments": {"name": "Ada"}}]}))

    openai_fake.responder = respond
    model = load_model(f"openai:m@{openai_fake.base_url}")
    response = await model.complete(ask(tools=[GREET]))
    [call] = response.tool_calls
    assert (call.name, call.arguments, call.id) == ("greet", {"name": "Ada"}, "call_0_0")
    refused, prompted = (r.body for r in openai_fake.requests)
    assert refused["tools"][0]["function"]["name"] == "greet"
    assert "tools" not in prompted
    assert "- greet: Greet someone.; arguments:" in prompted["messages"][0]["content"]
    # The answer is held to a call of an offered tool with its arguments, or a final answer.
    [calls, final] = prompted["response_format"]["json_schema"]["schema"]["anyOf"]
    [member] = calls["properties"]["tool_calls"]["items"]["anyOf"]
    assert member["properties"]["name"] == {"type": "string", "enum": ["greet"]}
    assert member["properties"]["arguments"] == GREET.parameters
    assert final["required"] == ["answer"]
    assert "tools are offered in the prompt" in response.negotiated[0]


async def test_the_prompted_protocol_carries_the_conversation_as_text(openai_fake: FakeOpenAI) -> None:
    openai_fake.enqueue(Reply.json({"answer": "Greeted Ada."}))
    prompted = Capabilities(tool_calling=ToolCalling.prompted, structured_output=StructuredOutput.json_object_schema)
    model = load_model(f"openai:m@{openai_fake.base_url}", capabilities=prompted)
    from stratagem.models import ToolCall

    messages = [
        Message(role="system", content="You help."),
        Message(role="user", content="Greet Ada."),
        Message(role="assistant", tool_calls=[ToolCall(id="call_0_0", name="greet", arguments={"name": "Ada"})]),
        Message(role="tool", tool_call_id="call_0_0", content="Hello, Ada!"),
    ]
    response = await model.complete(ask(messages=messages, tools=[GREET]))
    assert response.text == "Greeted Ada." and response.tool_calls == []
    sent = openai_fake.requests[0].body
    assert sent["response_format"]["type"] == "json_object"
    assert sent["messages"][2] == {
        "role": "assistant",
        "content": json.dumps({"tool_calls": [{"name": "greet", "arguments": {"name": "Ada"}}]}),
    }
    assert sent["messages"][3] == {"role": "user", "content": "Tool call call_0_0 returned:\nHello, Ada!"}


async def test_anthropic_falls_back_from_the_schema_tool_to_the_prompt(monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeAnthropic() as fake:
        monkeypatch.setenv("STRATAGEM_MODEL_URLS", fake.base_url)

        def respond(body: dict[str, Any]) -> Reply:
            if body.get("tool_choice"):
                return Reply.error(400, "tool_choice is not supported")
            return Reply.text('{"answer": 42}')

        fake.responder = respond
        response = await load_model(f"anthropic:m@{fake.base_url}").complete(ask(response_schema=SCHEMA))
        assert json.loads(response.text) == {"answer": 42}
        refused, prompted = (r.body for r in fake.requests)
        assert refused["tool_choice"] == {"type": "tool", "name": "answer"}
        assert "tools" not in prompted and json.dumps(SCHEMA, separators=(",", ":")) in prompted["system"]


def test_capabilities_are_found_by_model_string_with_or_without_the_url() -> None:
    llama = Capabilities(structured_output=StructuredOutput.json_object_schema)
    table = {"openai:smollm2": llama}
    assert capabilities_for("openai:smollm2@http://127.0.0.1:8765/v1", table) is llama
    assert capabilities_for("openai:smollm2", table) is llama
    assert capabilities_for("openai:other", table) is None


async def test_the_output_limit_moves_to_the_name_the_server_asks_for(openai_fake: FakeOpenAI) -> None:
    """OpenAI's reasoning models refuse max_tokens and name the field they want instead."""

    def respond(body: dict[str, Any]) -> Reply:
        if "max_tokens" in body:
            return Reply.error(
                400,
                "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.",
            )
        return Reply.text("ok")

    openai_fake.responder = respond
    model = load_model(f"openai:o-test@{openai_fake.base_url}")
    response = await model.complete(ask(max_output_tokens=64))
    assert response.text == "ok"
    assert [r.body.get("max_completion_tokens") for r in openai_fake.requests] == [None, 64]
    assert "output limit sent as max_completion_tokens" in response.negotiated[0]
    await model.complete(ask(max_output_tokens=64))
    assert openai_fake.requests[-1].body.get("max_completion_tokens") == 64 and len(openai_fake.requests) == 3


def test_openai_itself_gets_max_completion_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    from stratagem.models.openai_provider import OpenAIModel

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-0123456789abcdef")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    official = OpenAIModel("gpt-4.1")
    assert official._token_field() == "max_completion_tokens"
    local = OpenAIModel("smollm2@http://127.0.0.1:8765/v1")
    assert local._token_field() == "max_tokens"


async def test_calls_refused_at_the_same_time_learn_once(openai_fake: FakeOpenAI) -> None:
    """Steps running in parallel hit the same refusal together: one note, and every call answered."""
    import asyncio

    openai_fake.responder = llama_cpp(lambda body: Reply.json({"answer": 1}))
    model = load_model(f"openai:smollm2@{openai_fake.base_url}")
    responses = await asyncio.gather(*(model.complete(ask(response_schema=SCHEMA)) for _ in range(4)))
    assert all(json.loads(r.text) == {"answer": 1} for r in responses)
    assert len({note for r in responses for note in r.negotiated}) == 1
    assert len(responses[-1].negotiated) == 1


async def test_openai_itself_gets_no_output_limit_on_planning_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its reasoning models count their reasoning in the limit; the planner's 4,096 guards against
    local models that run on. The real SDK sends to api.openai.com, and a transport on its HTTP
    client records the body and answers as the API does (nothing leaves the machine)."""
    import httpx

    from stratagem.models.openai_provider import OpenAIModel

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-0123456789abcdef")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    bodies: list[dict[str, Any]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        assert request.url.host == "api.openai.com"
        bodies.append(json.loads(request.content))
        message = {"role": "assistant", "content": "{}"}
        choice = {"index": 0, "message": message, "finish_reason": "stop"}
        return httpx.Response(
            200, json={"id": "c", "object": "chat.completion", "created": 0, "model": "gpt-5", "choices": [choice]}
        )

    monkeypatch.setattr(
        "stratagem.models.openai_provider.http_client",
        lambda provider: httpx.AsyncClient(transport=httpx.MockTransport(answer)),
    )
    official = OpenAIModel("gpt-5")
    try:
        for purpose in (Purpose.plan, Purpose.execute):
            messages = [Message(role="user", content="Plan it.")]
            await official.complete(ModelRequest(purpose=purpose, messages=messages, max_output_tokens=4096))
    finally:  # the client with the recording transport must not serve a later test
        import asyncio

        from stratagem.models import _http

        _http._clients.get(asyncio.get_running_loop(), {}).clear()
    assert "max_completion_tokens" not in bodies[0] and "max_tokens" not in bodies[0]
    assert bodies[1]["max_completion_tokens"] == 4096
