"""Counting a model call's input before it is sent, and holding its output cap to what the
step's allowance leaves (issue #35, item 9): the bound, the arithmetic, and `CallBudget`, on their
own. The attacks these serve are performed in test_budget_caps.py."""

from __future__ import annotations

import json

import pytest

from stratagem.common.errors import BudgetReachedError
from stratagem.domain.catalog import ToolSpec
from stratagem.domain.usage import Allowance, CallUsage, NoRoom, Price, Room, UsageTotals, room_for_call, share_of
from stratagem.models import Message, ModelRequest, ModelResponse, Purpose, ToolCall, Usage
from stratagem.models.budgeted import CallBudget
from stratagem.models.failover import FailoverModel
from stratagem.models.output_limit import allowed_output
from stratagem.models.scripted import ScriptedModel
from stratagem.models.tokens import (
    CALL_TOKENS,
    MESSAGE_TOKENS,
    REPLY_TOKENS,
    input_tokens,
    messages_tokens,
    text_tokens,
)

pytestmark = pytest.mark.unit


def test_the_limits_servers_state_are_read() -> None:
    assert allowed_output("This model supports at most 4096 completion tokens, whereas you provided 9999.") == (
        4096,
        True,
    )
    assert allowed_output("max_tokens: 9999 > 8192, which is the maximum allowed number of output tokens") == (
        8192,
        True,
    )
    vllm_old = "This model's maximum context length is 8192 tokens. However, you requested 10050 tokens (50 in the messages, 10000 in the completion)."
    vllm_new = "'max_tokens' is too large: 10000. This model's maximum context length is 8192 tokens and your request has 50 input tokens (10000 > 8192 - 50)."
    assert allowed_output(vllm_old) == allowed_output(vllm_new) == (8142, False)
    assert allowed_output("Unsupported parameter: 'max_tokens' is not supported with this model.") is None


async def test_the_scripted_model_stops_at_its_cap_as_a_real_model_does(tmp_path) -> None:
    script = tmp_path / "s.yaml"
    script.write_text(
        json.dumps(
            {
                "executor": {
                    "long": {"text": "x" * 4000, "usage": {"input_tokens": 10, "output_tokens": 1000}},
                    "estimated": "y" * 4000,
                    "call": {"call": {"tool": "pay", "args": {"memo": "z" * 400}}},
                }
            }
        )
    )
    model = ScriptedModel(str(script))

    def ask(step: str, cap: int | None) -> ModelRequest:
        return ModelRequest(
            purpose=Purpose.execute, step_id=step, messages=[Message(role="user", content="go")], max_output_tokens=cap
        )

    cut = await model.complete(ask("long", 50))
    assert (cut.usage, cut.text, cut.stop_reason) == (Usage(input_tokens=10, output_tokens=50), "x" * 200, "length")
    estimated = await model.complete(ask("estimated", 100))
    assert (estimated.usage.output_tokens, len(estimated.text), estimated.stop_reason) == (100, 400, "length")
    whole = await model.complete(ask("long", 1000))
    assert (whole.usage.output_tokens, len(whole.text), whole.stop_reason) == (1000, 4000, None)
    [call] = (await model.complete(ask("call", 20))).tool_calls
    assert call.arguments is None and len(call.raw_arguments) == 80  # cut mid-JSON, as a real model's would be


# --- counting the input ---------------------------------------------------------------------------


def test_text_takes_at_most_a_token_a_byte() -> None:
    assert text_tokens("hello") == 5
    assert text_tokens("预算") == 6 and text_tokens("😀") == 4  # rare characters take more tokens than characters


def test_the_input_bound_counts_framing_tools_twice_and_the_schema_twice() -> None:
    messages = [Message(role="system", content="Be brief."), Message(role="user", content="hi")]
    bare = ModelRequest(purpose=Purpose.execute, messages=messages)
    assert input_tokens(bare) == REPLY_TOKENS + 2 * MESSAGE_TOKENS + len("Be brief.") + len("hi")
    tool = ToolSpec(name="pay", description="Pay.", parameters={"type": "object"})
    spec = len(json.dumps({"name": "pay", "description": "Pay.", "parameters": {"type": "object"}}))
    with_tool = bare.model_copy(update={"tools": [tool]})
    assert input_tokens(with_tool) - input_tokens(bare) >= 2 * spec
    # A provider's hidden tool prompt counts where tools (or a schema, sent as a forced tool) are offered.
    assert input_tokens(with_tool, hidden_tool_tokens=346) - input_tokens(with_tool) == 346
    assert input_tokens(bare, hidden_tool_tokens=346) == input_tokens(bare)
    schema = {"type": "object", "properties": {"met": {"type": "boolean"}}}
    with_schema = bare.model_copy(update={"response_schema": schema})
    assert input_tokens(with_schema) - input_tokens(bare) >= 2 * len(json.dumps(schema))


def test_tool_calls_and_results_count_with_their_ids_and_arguments() -> None:
    call = ToolCall(id="call_0_0", name="add", arguments={"a": 1})
    turn = Message(role="assistant", tool_calls=[call])
    result = Message(role="tool", tool_call_id="call_0_0", content="2")
    expected = 2 * MESSAGE_TOKENS + CALL_TOKENS + len("call_0_0") * 2 + len("add") + len('{"a": 1}') + 1
    assert messages_tokens([turn, result]) == expected


def test_the_bound_is_never_below_what_the_scripted_model_charges() -> None:
    messages = [Message(role="user", content="Summarise: " + "lorem ipsum " * 200)]
    request = ModelRequest(purpose=Purpose.execute, messages=messages)
    assert input_tokens(request) >= sum(len(m.content) for m in messages) // 4


# --- the arithmetic ---------------------------------------------------------------------------------


def spent(tokens: int = 0, cost: float = 0.0, calls: int = 0) -> UsageTotals:
    return UsageTotals(calls=calls, input_tokens=tokens, cost_usd=cost)


def test_the_cap_is_what_is_left_less_the_input() -> None:
    left = Allowance(tokens=1000)
    assert room_for_call(left, spent(300), 200, None) == Room(output_tokens=500)
    assert room_for_call(left, spent(300), 699, None) == Room(output_tokens=1)
    short = room_for_call(left, spent(300), 700, None)
    assert isinstance(short, NoRoom) and short.dimension == "tokens"
    assert short.describe() == (
        "its input alone may take 700, which leaves no room for an answer in the 700 the token budget has left for it"
    )
    assert room_for_call(Allowance(), spent(10**9), 10**9, None) == Room(output_tokens=None)


def test_the_cost_cap_is_the_output_the_money_left_buys() -> None:
    price = Price(input_per_mtok=3.0, output_per_mtok=15.0)
    left = Allowance(cost_usd=0.01)
    room = room_for_call(left, spent(cost=0.004), 1000, price)  # $0.006 left, $0.003 of it the input
    assert room == Room(output_tokens=200)
    assert 0.004 + price.cost(1000, 200) <= 0.01 < 0.004 + price.cost(1000, 201)
    assert isinstance(room_for_call(left, spent(cost=0.004), 2000, price), NoRoom)  # the input takes all
    # Free output: the cost budget caps nothing once the input fits.
    assert room_for_call(left, spent(), 1000, Price(input_per_mtok=1, output_per_mtok=0)) == Room()
    # An unpriced model: a cost budget cannot apply (a run with one refuses it at start).
    assert room_for_call(left, spent(cost=1.0), 1000, None) == Room()


def test_the_tighter_budget_sets_the_cap_and_calls_count_too() -> None:
    price = Price(input_per_mtok=0, output_per_mtok=1000.0)  # $0.001 an output token
    left = Allowance(tokens=10_000, cost_usd=0.05, model_calls=3)
    assert room_for_call(left, spent(calls=2), 100, price) == Room(output_tokens=50)
    calls = room_for_call(left, spent(calls=3), 100, price)
    assert isinstance(calls, NoRoom) and calls.dimension == "model_calls"


def test_a_step_alone_gets_a_whole_allowance() -> None:
    left = Allowance(tokens=1000)
    assert share_of(left, [], 1.0).whole
    assert not share_of(left, [], 0.5).whole
    assert not share_of(left, [Allowance(tokens=100)], 1.0).whole


# --- holding a step's calls ---------------------------------------------------------------------------


def request(*contents: str) -> ModelRequest:
    return ModelRequest(purpose=Purpose.execute, messages=[Message(role="user", content=c) for c in contents])


def answer(input_tokens: int, output_tokens: int, stop: str | None = None) -> ModelResponse:
    return ModelResponse(
        model="m", usage=Usage(input_tokens=input_tokens, output_tokens=output_tokens), stop_reason=stop
    )


def test_a_call_is_capped_by_the_budget_below_its_own_cap_only() -> None:
    class Provider:
        default_max_output_tokens = 4096

    budget = CallBudget(Allowance(tokens=1000), "s", model=Provider())
    first = request("x" * 100)
    held = budget.hold(first, [])
    assert held.max_output_tokens == 1000 - input_tokens(first)
    roomy = CallBudget(Allowance(tokens=100_000), "s", model=Provider())
    assert roomy.hold(first, []).max_output_tokens == 4096  # the provider's own default, unchanged
    assert CallBudget(None, "s").hold(first, []) is first  # no budget: the request as it was


def test_an_answer_the_budget_cut_off_stops_the_step() -> None:
    budget = CallBudget(Allowance(tokens=1000), "s")
    held = budget.hold(request("x" * 100), [])
    with pytest.raises(BudgetReachedError, match="cut off at"):
        budget.answered(held, answer(30, held.max_output_tokens or 0, "length"))
    again = budget.hold(request("x" * 100), [])
    assert budget.answered(again, answer(30, 5, "stop"))


def test_later_calls_are_counted_from_what_the_provider_charged() -> None:
    budget = CallBudget(Allowance(tokens=1000), "s")
    first = request("x" * 400)
    held = budget.hold(first, [])
    assert budget.answered(held, answer(100, 10))
    grown = first.model_copy(update={"messages": [*first.messages, Message(role="assistant", content="ok")]})
    assert budget.input_tokens(grown) == 100 + MESSAGE_TOKENS + 2  # not the 400-byte message again
    calls = [CallUsage(model="m", input_tokens=100, output_tokens=10)]
    assert budget.hold(grown, calls).max_output_tokens == 1000 - 110 - (100 + MESSAGE_TOKENS + 2)
    other = request("y" * 400)  # not the same conversation: counted whole
    assert budget.input_tokens(other) == input_tokens(other)


def test_a_whole_allowance_probes_a_first_call_the_bound_says_does_not_fit() -> None:
    big = request("x" * 2000)  # bounded at ~2,000 tokens; the provider will charge 300
    budget = CallBudget(Allowance(tokens=1000, whole=True), "s")
    probe = budget.hold(big, [], may_probe=True)
    assert probe.max_output_tokens == 1
    assert budget.answered(probe, answer(300, 1, "length")) is False  # dropped: the step asks again
    calls = [CallUsage(model="m", input_tokens=300, output_tokens=1)]
    assert budget.hold(big, calls, may_probe=True).max_output_tokens == 1000 - 301 - 300
    # Beside other steps (not whole), or without a caller that can drop the answer: it stops.
    with pytest.raises(BudgetReachedError, match="its input alone may take"):
        CallBudget(Allowance(tokens=1000), "s").hold(big, [], may_probe=True)
    with pytest.raises(BudgetReachedError):
        CallBudget(Allowance(tokens=1000, whole=True), "s").hold(big, [])
    # Once it made a call, a step that runs out stops: only a first call is probed.
    with pytest.raises(BudgetReachedError):
        CallBudget(Allowance(tokens=1000, whole=True), "s").hold(big, calls, may_probe=True)


async def test_the_scripted_model_counts_its_input_exactly_before_the_call(tmp_path) -> None:
    script = tmp_path / "s.yaml"
    script.write_text(
        json.dumps({"executor": {"given": {"text": "ok", "usage": {"input_tokens": 77}}, "guessed": "ok"}})
    )
    model = ScriptedModel(str(script))
    for step in ("given", "guessed"):
        ask = ModelRequest(purpose=Purpose.execute, step_id=step, messages=[Message(role="user", content="go " * 50)])
        assert model.count_input_tokens(ask) == (await model.complete(ask)).usage.input_tokens
    unknown = ModelRequest(purpose=Purpose.execute, step_id="nope", messages=[Message(role="user", content="go")])
    assert model.count_input_tokens(unknown) is None  # the call itself says what is wrong
    # A failover tier counts exactly only where every member can: the most any of them counts.
    assert FailoverModel([("a", model), ("b", model)]).count_input_tokens(ask) == 37

    class Uncounted:
        name = "u"

    assert FailoverModel([("a", model), ("u", Uncounted())]).count_input_tokens(ask) is None
