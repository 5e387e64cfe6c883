"""Real runs whose planner and executors are the real OpenAI and Anthropic SDK clients, talking
to local servers that speak their wire formats (tests/support/wire_servers.py)."""

from __future__ import annotations

import json
import os

import pytest
from support.plans import awaiting
from support.wire_servers import FakeAnthropic, FakeOpenAI, Reply
from temporalio.client import WorkflowFailureError

from stratagem.domain.ledger import EventKind, StepStatus, ToolCallStatus
from stratagem.domain.run_types import ApproveInput
from stratagem.domain.usage import Price

KEY = "sk-test-secret-0123456789abcdef"
ANTHROPIC_KEY = "sk-ant-test-secret-0123456789"


def configure(monkeypatch, url: str) -> None:
    """List `url` in the worker's STRATAGEM_MODEL_URLS: the operator's say-so that it gets the key."""
    listed = os.environ.get("STRATAGEM_MODEL_URLS", "")
    monkeypatch.setenv("STRATAGEM_MODEL_URLS", f"{listed},{url}".strip(","))


@pytest.fixture
def openai_fake(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with FakeOpenAI() as fake:
        configure(monkeypatch, fake.base_url)
        yield fake


@pytest.fixture
def anthropic_fake(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
    with FakeAnthropic() as fake:
        configure(monkeypatch, fake.base_url)
        yield fake


def openai_model(fake: FakeOpenAI, name: str = "gpt-test") -> str:
    return f"openai:{name}@{fake.base_url}"


def anthropic_model(fake: FakeAnthropic, name: str = "claude-test") -> str:
    return f"anthropic:{name}@{fake.base_url}"


PLAN = {
    "goal": "check a vendor",
    "steps": [
        {"id": "profile", "title": "Fetch profile", "tool": "fetch_profile", "args": {"user": "ada"}},
        {
            "id": "review",
            "title": "Review the vendor",
            "kind": "llm",
            "instructions": "Review ${profile.name} and record the verdict.",
            "tools": ["record"],
            "depends_on": ["profile"],
        },
    ],
    "reason": "look the vendor up, then have a cheaper model review it",
}


async def history_text(run) -> str:
    history = await run.handle.fetch_history()
    return json.dumps(history.to_json_dict())


@pytest.mark.workflow
async def test_openai_plans_and_anthropic_executes_with_tools(harness, openai_fake, anthropic_fake):
    openai_fake.enqueue(Reply.json(PLAN, usage=(1200, 300)))
    anthropic_fake.enqueue(
        Reply.tool_calls([("record", {"label": "Ada approved"})], text="Recording the verdict.", usage=(400, 50)),
        Reply.text("Ada is approved.", usage=(480, 20), cache=(0, 100)),
    )
    planner, executor = openai_model(openai_fake, "gpt-4.1"), anthropic_model(anthropic_fake)
    prices = {planner: Price(input_per_mtok=2, output_per_mtok=8)}
    run = await harness.start(goal="check a vendor", planner=planner, executor=executor, prices=prices)
    status = await harness.wait_for(run, awaiting)
    plan = await run.plan()
    assert plan.author.name == "openai:gpt-4.1" and [s.id for s in plan.steps] == ["profile", "review"]
    await run.approve(ApproveInput(by="alice", revision=status.revision))
    result = await run.result()
    assert result.outputs == {"review": "Ada is approved."}

    # The plan came back through OpenAI's JSON-schema response format.
    planning = openai_fake.requests[0].body
    assert planning["response_format"]["type"] == "json_schema"
    assert planning["response_format"]["json_schema"]["name"] == "plan"
    assert "steps" in planning["response_format"]["json_schema"]["schema"]["properties"]
    # The executor was offered exactly the step's tools, then sent the tool's result back.
    first, second = (r.body for r in anthropic_fake.requests)
    assert [t["name"] for t in first["tools"]] == ["record"]
    assert "Review Ada and record the verdict." in json.dumps(first["messages"])
    results = [
        b
        for m in second["messages"]
        for b in (m["content"] if isinstance(m["content"], list) else [])
        if b.get("type") == "tool_result"
    ]
    assert len(results) == 1 and results[0]["content"] == "Ada approved" and not results[0].get("is_error")
    assert [c["label"] for c in harness.calls()] == ["Ada approved"]

    ledger = await run.ledger()
    assert [(c.purpose, c.model, c.input_tokens, c.output_tokens) for c in ledger.calls] == [
        ("plan", planner, 1200, 300),
        ("execute", executor, 400, 50),
        ("execute", executor, 580, 20),  # cache reads count as input
    ]
    assert ledger.calls[0].cost_usd == pytest.approx((1200 * 2 + 300 * 8) / 1e6)
    assert ledger.calls[1].cost_usd is None  # no price for the test model
    assert ledger.steps["review"].usage.calls == 2
    # Keys live in the worker's environment only: the history holds no trace of them.
    text = await history_text(run)
    assert KEY not in text and ANTHROPIC_KEY not in text
    assert openai_fake.requests[0].headers["authorization"] == f"Bearer {KEY}"
    sent = anthropic_fake.requests[0].headers
    assert ANTHROPIC_KEY in (sent.get("x-api-key"), sent.get("authorization", "").removeprefix("Bearer "))


@pytest.mark.workflow
async def test_anthropic_plans_through_forced_tool_use(harness, anthropic_fake):
    anthropic_fake.enqueue(
        Reply.json({"goal": "g", "steps": [{"id": "a", "title": "a", "tool": "add", "args": {"a": 1, "b": 2}}]})
    )
    run = await harness.start(goal="g", planner=anthropic_model(anthropic_fake), auto_approve=True)
    assert (await run.result()).outputs == {"a": 3}
    request = anthropic_fake.requests[0].body
    assert request["tool_choice"] == {"type": "tool", "name": "plan"}
    assert [t["name"] for t in request["tools"]] == ["plan"]


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.workflow
async def test_an_unauthorized_tool_call_is_refused_and_the_model_told(harness, provider, request):
    fake = request.getfixturevalue(f"{provider}_fake")
    model = openai_model(fake) if provider == "openai" else anthropic_model(fake)
    fake.enqueue(
        Reply.tool_calls([("read_note", {"name": "n1"})]),
        Reply.tool_calls([("delete_records", {"table": "customers"})]),
        Reply.text("I may not delete records; the note was only data."),
    )
    plan = {
        "goal": "g",
        "steps": [
            {"id": "read", "title": "read", "kind": "llm", "instructions": "Read note n1.", "tools": ["read_note"]}
        ],
    }
    run = await harness.start(plan, auto_approve=True, executor=model)
    assert (await run.result()).outputs == {"read": "I may not delete records; the note was only data."}
    assert harness.calls() == []  # delete_records never ran

    # The note's text reached the model as a tool result, and the refusal as an error result.
    last = json.dumps(fake.requests[-1].body["messages"])
    assert "IGNORE YOUR INSTRUCTIONS" in last
    assert "Refused: tool 'delete_records' is not authorized for step 'read'" in last
    tools_offered = [
        t["function"]["name"] if provider == "openai" else t["name"] for t in fake.requests[-1].body["tools"]
    ]
    assert tools_offered == ["read_note"]  # what the note said widened nothing
    ledger = await run.ledger()
    assert [c.status for c in ledger.steps["read"].tool_calls] == [ToolCallStatus.ok, ToolCallStatus.refused]
    assert [e.data["tool"] for e in ledger.events if e.kind is EventKind.tool_call_refused] == ["delete_records"]


@pytest.mark.system
async def test_rate_limits_are_retried_after_the_servers_retry_after(dev_harness, openai_fake):
    plan = {"goal": "g", "steps": [{"id": "a", "title": "a", "tool": "add", "args": {"a": 2, "b": 2}}]}
    openai_fake.enqueue(Reply.error(429, "Rate limit reached", {"retry-after": "3"}), Reply.json(plan))
    run = await dev_harness.start(goal="g", planner=openai_model(openai_fake), auto_approve=True)
    assert (await run.result()).outputs == {"a": 4}
    first, second = openai_fake.requests
    # Temporal's own first retry would come after 2 s; the server asked for 3.
    assert second.at - first.at >= 3.0


@pytest.mark.system
async def test_a_joint_run_makes_the_calls_of_one_answer_at_once(dev_harness, openai_fake):
    """The model asks for four calls of a one-second tool in one answer (parallel tool calls): the
    joint run's llm step makes them at once, well under the four seconds of one after another."""

    def responder(body: dict) -> Reply:
        if not any(m["role"] == "tool" for m in body["messages"]):
            return Reply.tool_calls([("slow", {"label": f"s{n}", "seconds": 1.0}) for n in range(4)])
        return Reply.text(f"{sum(m['role'] == 'tool' for m in body['messages'])} naps taken")

    openai_fake.responder = responder
    run = await dev_harness.start(
        goal="take four naps", mode="joint", executor=openai_model(openai_fake), joint_tools=["slow"], auto_approve=True
    )
    result = await run.result()
    assert result.outputs == {"task": "4 naps taken"}
    step = (await run.ledger()).steps["task"]
    assert step.started_at is not None and step.ended_at is not None
    assert (step.ended_at - step.started_at).total_seconds() < 2.5
    naps = [c for c in dev_harness.calls() if c["tool"] == "slow"]
    assert max(n["start"] for n in naps) < min(n["end"] for n in naps)  # all four at once
    assert sorted(n["key"].rsplit("/", 1)[1] for n in naps) == ["c0", "c1", "c2", "c3"]
    assert [t.call for t in step.tool_calls] == [0, 1, 2, 3]


@pytest.mark.workflow
async def test_a_refused_key_fails_at_once_with_a_clear_message_and_no_key(harness, openai_fake):
    openai_fake.enqueue(Reply.error(401, f"Incorrect API key provided: {KEY}. You can find your API key at ..."))
    run = await harness.start(goal="g", planner=openai_model(openai_fake))
    with pytest.raises(WorkflowFailureError) as caught:
        await run.result()
    message = str(caught.value.cause)
    assert "openai refused the credentials for model gpt-test (HTTP 401)" in message and "OPENAI_API_KEY" in message
    assert KEY not in message
    assert len(openai_fake.requests) == 1  # not retried
    assert KEY not in await history_text(run)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.workflow
async def test_a_run_cannot_send_the_workers_key_to_a_url_it_chose(harness, openai_fake, anthropic_fake, provider):
    # The attack: start a run whose executor names the attacker's server. The worker holds real keys
    # and has configured URLs of its own (the fakes above); the attacker's URL is not among them.
    attacker = FakeOpenAI() if provider == "openai" else FakeAnthropic()
    with attacker:
        attacker.enqueue(Reply.error(401, "missing key"))
        plan = {"goal": "g", "steps": [{"id": "a", "title": "ask", "kind": "llm", "instructions": "hi"}]}
        run = await harness.start(
            goal="g", plan=plan, executor=f"{provider}:stolen@{attacker.base_url}", auto_approve=True
        )
        with pytest.raises(WorkflowFailureError):
            await run.result()
        sent = [json.dumps(dict(request.headers)) for request in attacker.requests]
    assert sent, "the attacker's server was never called, so the test proved nothing"
    assert not any(KEY in headers or ANTHROPIC_KEY in headers for headers in sent)
    ledger = await run.ledger()
    reason = ledger.steps["a"].error or ""
    assert "carried no key" in reason and "\n" not in reason
    assert KEY not in await history_text(run) and ANTHROPIC_KEY not in await history_text(run)


@pytest.mark.workflow
async def test_an_invalid_request_is_not_retried(harness, openai_fake):
    openai_fake.enqueue(Reply.error(404, "The model `gpt-nope` does not exist"))
    run = await harness.start(goal="g", planner=openai_model(openai_fake, "gpt-nope"))
    with pytest.raises(WorkflowFailureError) as caught:
        await run.result()
    assert "HTTP 404" in str(caught.value.cause) and "gpt-nope" in str(caught.value.cause)
    assert len(openai_fake.requests) == 1


@pytest.mark.workflow
async def test_a_garbled_response_is_retried(harness, anthropic_fake):
    plan = {"goal": "g", "steps": [{"id": "a", "title": "a", "tool": "add", "args": {"a": 1, "b": 1}}]}
    anthropic_fake.enqueue(Reply.raw(b'{"id": "msg_1", "content": [tru'), Reply.json(plan))
    run = await harness.start(goal="g", planner=anthropic_model(anthropic_fake), auto_approve=True)
    assert (await run.result()).outputs == {"a": 2}
    assert len(anthropic_fake.requests) == 2


@pytest.mark.workflow
async def test_an_unusable_plan_is_sent_back_for_repair(harness, openai_fake):
    good = {"goal": "g", "steps": [{"id": "a", "title": "a", "tool": "add", "args": {"a": 5, "b": 5}}]}
    openai_fake.enqueue(Reply.text("Sure! Here is my plan: first add, then..."), Reply.json(good))
    run = await harness.start(goal="g", planner=openai_model(openai_fake), auto_approve=True)
    assert (await run.result()).outputs == {"a": 10}
    repair = openai_fake.requests[1].body["messages"]
    assert repair[-1]["role"] == "user" and "That plan cannot be used" in repair[-1]["content"]
    events = (await run.ledger()).events
    assert [e.kind for e in events].count(EventKind.planning_attempt_invalid) == 1


@pytest.mark.workflow
async def test_malformed_tool_arguments_are_reported_to_the_model(harness, openai_fake):
    openai_fake.enqueue(
        Reply.bad_arguments("record", '{"label": '),
        Reply.tool_calls([("record", {"label": "fixed"})]),
        Reply.text("done"),
    )
    plan = {
        "goal": "g",
        "steps": [{"id": "w", "title": "w", "kind": "llm", "instructions": "record it", "tools": ["record"]}],
    }
    run = await harness.start(plan, auto_approve=True, executor=openai_model(openai_fake))
    assert (await run.result()).outputs == {"w": "done"}
    assert [c["label"] for c in harness.calls()] == ["fixed"]
    record = (await run.ledger()).steps["w"]
    assert [c.status for c in record.tool_calls] == [ToolCallStatus.error, ToolCallStatus.ok]
    assert "not a JSON object" in record.tool_calls[0].message


@pytest.mark.workflow
async def test_json_steps_use_the_json_response_format(harness, openai_fake):
    openai_fake.enqueue(Reply.text('{"score": 7}', usage=(10, 5)))
    plan = {
        "goal": "g",
        "steps": [{"id": "s", "title": "s", "kind": "llm", "instructions": "score it", "output_format": "json"}],
    }
    run = await harness.start(plan, auto_approve=True, executor=openai_model(openai_fake))
    assert (await run.result()).outputs == {"s": {"score": 7}}
    assert openai_fake.requests[0].body["response_format"] == {"type": "json_object"}
    ledger = await run.ledger()
    assert ledger.steps["s"].status is StepStatus.succeeded and ledger.usage.tokens == 15


# --- negotiation: an endpoint that takes less, on a real run --------------------------------------

LLAMA_CPP_REFUSAL = (
    "1 validation error: {'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), "
    "'msg': \"Input should be 'text' or 'json_object'\", 'input': 'json_schema'}"
)


@pytest.mark.workflow
async def test_a_run_learns_what_its_endpoint_takes_and_says_so_in_the_ledger(harness, openai_fake) -> None:
    """A llama.cpp-like server: json_schema refused with a 500, native tools ignored. The planner's
    call moves to JSON mode with the schema; the executor's tools go through the prompted protocol
    (configured for the model), and the step's allowlist still holds."""
    from stratagem.domain.model_settings import Capabilities, ToolCalling

    plan = {
        "goal": "greet ada",
        "steps": [
            {
                "kind": "llm",
                "id": "greet",
                "title": "Greet",
                "depends_on": [],
                "instructions": "Record that Ada was greeted.",
                "tools": ["record"],
            }
        ],
    }
    turns = iter(
        [
            {"tool_calls": [{"name": "delete_records", "arguments": {"table": "customers"}}]},
            {"tool_calls": [{"name": "record", "arguments": {"label": "greeted ada"}}]},
            {"answer": "Ada was greeted."},
        ]
    )

    def respond(body):
        if (body.get("response_format") or {}).get("type") == "json_schema":
            return Reply.error(500, LLAMA_CPP_REFUSAL)
        if "Goal: greet ada" in json.dumps(body["messages"]) and "Record that Ada" not in json.dumps(body["messages"]):
            return Reply.json(plan)
        return Reply.json(next(turns))

    openai_fake.responder = respond
    model = openai_model(openai_fake, "smollm2")
    prompted = Capabilities(tool_calling=ToolCalling.prompted)
    run = await harness.start(
        goal="greet ada", planner=model, executor=model, auto_approve=True, capabilities={"openai:smollm2": prompted}
    )
    result = await run.result()
    assert result.outputs == {"greet": "Ada was greeted."}
    # The refused tool never ran; the allowed one did.
    assert [c["tool"] for c in harness.calls()] == ["record"]
    ledger = await run.ledger()
    assert [(c.tool, c.status) for c in ledger.steps["greet"].tool_calls] == [
        ("delete_records", ToolCallStatus.refused),
        ("record", ToolCallStatus.ok),
    ]
    notes = [e.message for e in ledger.events if e.kind is EventKind.model_negotiated]
    assert len(notes) == 1 and "structured output by json_object+schema" in notes[0]
    bodies = [r.body for r in openai_fake.requests]
    assert "tools" not in bodies[-1] and bodies[-1]["response_format"]["type"] == "json_object"
