"""Each model call's output cap is held to what is left of its step's share of the run's budget
(issue #35, item 9): the attack, four llm steps started together under a 1,000-token budget
against a model that writes thousands of tokens, performed with the real `openai` and
`anthropic` SDK clients against local wire servers that honour the output cap as the real APIs
do, and through the scripted model. The counting and the arithmetic on their own are in
test_budget_counting.py.

The wire servers keep their own books: they count what they were asked and what they answered,
and record, for every request, how much of the budget was left when it arrived. So the proof
that no request asked for more than was left is the server's, not the engine's.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from support.wire_servers import FakeAnthropic, FakeOpenAI, Reply

from stratagem.domain.ledger import StepStatus
from stratagem.domain.run_types import BudgetInput, DecisionKind, Phase
from stratagem.models import (
    Message,
    ModelRequest,
    ModelRequestError,
    Purpose,
    load_model,
)
from stratagem.models.negotiation import forget_learned

BUDGET = 1_000
GREEDY = 5_000  # what the model writes when nothing stops it
WARM_UP = 20  # the tokens of the step before the four


# --- a model that writes on until its cap, behind each vendor's wire format ----------------------


class Books:
    """What a greedy server was asked and answered, kept by the server under its own lock."""

    def __init__(self, budget: int):
        self.budget = budget
        self.lock = threading.Lock()
        self.served = 0  # input + output tokens of every answer sent
        self.asked: list[tuple[int | None, int]] = []  # (the request's output cap, the budget left for its output)

    def answer(self, prompt: int, cap: int | None, writes: int) -> int:
        """Record a request whose input is `prompt` tokens; the output tokens it gets."""
        with self.lock:
            self.asked.append((cap, self.budget - self.served - prompt))
            output = min(cap or writes, writes)
            self.served += prompt + output
            return output

    def overreaching(self) -> list[tuple[int | None, int]]:
        return [(cap, left) for cap, left in self.asked if cap is None or cap > left]


def prompt_tokens(body: dict[str, Any]) -> int:
    """The input as a real tokenizer counts it, about: 4 characters a token (English), never
    more than one token a byte, and 3 tokens of framing a message, as OpenAI's format has."""
    text = json.dumps(body.get("messages", [])) + json.dumps(body.get("system", "")) + json.dumps(body.get("tools", []))
    return math.ceil(len(text) / 4) + 3 * len(body.get("messages", []))


def greedy_reply(books: Books, body: dict[str, Any], field: str, writes: int) -> tuple[Reply, int, int]:
    cap = body.get(field)
    prompt = prompt_tokens(body)
    output = books.answer(prompt, cap, writes)
    return Reply.text("word " * output, usage=(prompt, output)), output, cap or 0


class GreedyOpenAI(FakeOpenAI):
    """Chat completions from a model that writes `writes` tokens unless `max_tokens` or
    `max_completion_tokens` stops it first (finish_reason "length"), as OpenAI's does."""

    def __init__(self, books: Books, writes: int = GREEDY):
        super().__init__()
        self.books, self.writes = books, writes
        self.responder = lambda body: Reply.text("unused")

    def answer(self, reply: Reply, body: dict[str, Any]) -> dict[str, Any]:
        field = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
        greedy, output, cap = greedy_reply(self.books, body, field, self.writes)
        completion = super().answer(greedy, body)
        completion["choices"][0]["finish_reason"] = "length" if output == cap else "stop"
        return completion


class GreedyAnthropic(FakeAnthropic):
    """Anthropic's Messages API from the same model: `max_tokens` stops it (stop_reason "max_tokens")."""

    def __init__(self, books: Books):
        super().__init__()
        self.books = books
        self.responder = lambda body: Reply.text("unused")

    def answer(self, reply: Reply, body: dict[str, Any]) -> dict[str, Any]:
        greedy, output, cap = greedy_reply(self.books, body, "max_tokens", GREEDY)
        message = super().answer(greedy, body)
        message["stop_reason"] = "max_tokens" if output == cap else "end_turn"
        return message


@pytest.fixture
def no_keys(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    forget_learned()
    yield monkeypatch
    forget_learned()


# A small step first, so the run knows how large a step is and starts the four together, as the
# attack did (with nothing known, the run lets one model step out at a time).
FOUR_STEPS = {
    "goal": "write four long reports",
    "steps": [
        {"id": "w", "title": "Warm up", "kind": "llm", "instructions": "Say ok.", "tier": "cheap"},
        *[
            {
                "id": s,
                "title": f"Report {s}",
                "kind": "llm",
                "instructions": "Write a long report.",
                "depends_on": ["w"],
            }
            for s in "abcd"
        ],
    ],
}


async def attack(harness, executor: str, **options: Any) -> tuple[Any, Any]:
    """Four llm steps started together under a 1,000-token budget: wait until the run asks for more."""
    cheap = harness.script(
        "cheap.yaml", {"executor": {"w": {"text": "ok", "usage": {"input_tokens": 10, "output_tokens": WARM_UP - 10}}}}
    )
    options = {"budget": {"tokens": BUDGET}, **options}
    run = await harness.start(
        FOUR_STEPS, auto_approve=True, executor=executor, tiers={"cheap": cheap}, max_parallel=4, **options
    )
    status = await harness.wait_for(run, lambda s: any(p.kind is DecisionKind.budget for p in s.pending), timeout=60)
    return run, status


def greedy_calls(ledger: Any) -> list[Any]:
    return [c for c in ledger.calls if c.step_id in set("abcd")]


@pytest.mark.workflow
async def test_parallel_steps_on_a_greedy_openai_model_stay_within_the_token_budget(harness, no_keys) -> None:
    books = Books(BUDGET - WARM_UP)
    with GreedyOpenAI(books) as server:
        no_keys.setenv("STRATAGEM_MODEL_URLS", server.base_url)
        run, status = await attack(harness, f"openai:greedy@{server.base_url}")
        ledger = await run.ledger()
        # Before the fix the first step's call went out uncapped: 5,138 tokens of a 1,000-token budget.
        assert ledger.usage.tokens <= BUDGET, ledger.usage.describe()
        assert books.served == ledger.usage.tokens - WARM_UP  # the server's books and the run's agree
        assert server.requests and books.overreaching() == []  # no request asked for more than was left
        assert status.phase is Phase.running
        assert not any(r.status is StepStatus.failed for r in ledger.steps.values())
        # Raised, the run finishes: the steps that stopped at their budget ran again.
        await run.budget(BudgetInput(by="bob", tokens=1_000_000))
        result = await run.result()
        assert result.status is Phase.succeeded and set(result.outputs) == set("abcd")


@pytest.mark.workflow
async def test_parallel_steps_on_a_greedy_anthropic_model_stay_within_the_token_budget(harness, no_keys) -> None:
    books = Books(BUDGET - WARM_UP)
    with GreedyAnthropic(books) as server:
        no_keys.setenv("STRATAGEM_MODEL_URLS", server.base_url)
        run, _ = await attack(harness, f"anthropic:greedy@{server.base_url}")
        ledger = await run.ledger()
        # Before the fix: 4,222 tokens (its provider's default cap, 4,096, was the only one).
        assert ledger.usage.tokens <= BUDGET, ledger.usage.describe()
        assert books.served == ledger.usage.tokens - WARM_UP
        assert server.requests and books.overreaching() == []
        # Every cap is the budget's or, above it, the provider's own default.
        assert all(r.body["max_tokens"] <= 4096 for r in server.requests)


@pytest.mark.workflow
async def test_parallel_steps_on_a_greedy_scripted_model_stay_within_the_token_budget(harness) -> None:
    answer = {"text": "word " * GREEDY, "usage": {"input_tokens": 120, "output_tokens": GREEDY}}
    executor = harness.script("greedy.yaml", {"executor": {s: answer for s in "abcd"}})
    run, _ = await attack(harness, executor)
    ledger = await run.ledger()
    assert ledger.usage.tokens <= BUDGET, ledger.usage.describe()  # before the fix: 5,140
    assert greedy_calls(ledger) and all(c.output_tokens < GREEDY for c in ledger.calls)


@pytest.mark.workflow
async def test_a_cost_budget_caps_output_by_its_price(harness, no_keys) -> None:
    books = Books(10**9)
    with GreedyOpenAI(books) as server:
        no_keys.setenv("STRATAGEM_MODEL_URLS", server.base_url)
        model = f"openai:greedy@{server.base_url}"
        price = {"input_per_mtok": 1.0, "output_per_mtok": 100.0}  # $0.0001 an output token
        run, _ = await attack(harness, model, budget={"cost_usd": 0.05}, prices={model: price})
        ledger = await run.ledger()
        # Before the fix: $2.0005 (four uncapped calls), and the run went on.
        assert 0 < ledger.usage.cost_usd <= 0.05, ledger.usage.describe()
        assert greedy_calls(ledger) and all(r.body["max_tokens"] < 500 for r in server.requests)


@pytest.mark.workflow
async def test_a_verifiers_call_is_held_to_the_steps_budget_too(harness) -> None:
    verdict = json.dumps({"met": True, "reason": "all there " * 2_000})  # ~5,000 tokens of verdict
    executor = harness.script("judged.yaml", {"executor": {"s": "done"}, "verifier": {"s": [{"text": verdict}]}})
    step = {"id": "s", "title": "s", "kind": "llm", "instructions": "Do it.", "success_criteria": ["it is done"]}
    run = await harness.start(
        {"goal": "g", "steps": [step]}, auto_approve=True, executor=executor, budget={"tokens": BUDGET}
    )
    await harness.wait_for(run, lambda s: any(p.kind is DecisionKind.budget for p in s.pending), timeout=60)
    ledger = await run.ledger()
    done, judged = ledger.calls
    # Before the fix: 5,264 tokens (the verdict's 5,000 uncapped), and the run went on.
    assert ledger.usage.tokens <= BUDGET and judged.output_tokens < 1_000
    assert "cut off" in next(e.message for e in ledger.events if e.kind.value == "budget_exhausted")
    await run.budget(BudgetInput(by="bob", tokens=100_000))
    assert (await asyncio.wait_for(run.result(), 60)).status is Phase.succeeded


WORDY = {"goal": "g", "steps": [{"id": "s", "title": "s", "kind": "llm", "instructions": "Read this. " * 360}]}


@pytest.mark.workflow
async def test_a_step_alone_whose_input_the_bound_overstates_is_not_stopped_for_ever(harness, no_keys) -> None:
    """~4,000 bytes of instructions: bounded at ~4,300 tokens, more than the budget; the server
    charges ~1,200. Stopped at its budget, the step would be dispatched again with the same, for
    ever: its first call measures the input instead (one output token), then the step goes on."""
    books = Books(3_000)
    with GreedyOpenAI(books, writes=2) as server:
        no_keys.setenv("STRATAGEM_MODEL_URLS", server.base_url)
        model = f"openai:brief@{server.base_url}"
        run = await harness.start(WORDY, auto_approve=True, executor=model, budget={"tokens": 3_000})
        result = await asyncio.wait_for(run.result(), 60)
        assert result.status is Phase.succeeded and result.outputs == {"s": "word word "}
        ledger = await run.ledger()
        probe, call = ledger.calls
        assert (probe.output_tokens, call.input_tokens) == (1, probe.input_tokens)
        assert ledger.usage.tokens <= 3_000 and books.overreaching() == []
        assert [r.body["max_tokens"] for r in server.requests] == [1, 3_000 - 2 * probe.input_tokens - 1]


@pytest.mark.workflow
async def test_a_step_alone_whose_input_does_not_fit_asks_a_person(harness, no_keys) -> None:
    books = Books(2_000)
    with GreedyOpenAI(books, writes=2) as server:
        no_keys.setenv("STRATAGEM_MODEL_URLS", server.base_url)
        model = f"openai:brief@{server.base_url}"
        run = await harness.start(WORDY, auto_approve=True, executor=model, budget={"tokens": 2_000})
        status = await harness.wait_for(run, lambda s: any(p.kind is DecisionKind.budget for p in s.pending))
        ledger = await run.ledger()
        [probe] = ledger.calls  # measured once (~1,200 in): no room left for an answer
        assert probe.output_tokens == 1 and ledger.usage.tokens <= 2_000 and status.phase is Phase.running
        await run.budget(BudgetInput(by="bob", tokens=20_000))
        assert (await asyncio.wait_for(run.result(), 60)).status is Phase.succeeded


# --- what the providers send, and what they do when a cap is above the model's own -----------------


@pytest.mark.unit
async def test_a_cap_above_the_models_own_limit_is_sent_again_at_that_limit(no_keys) -> None:
    with FakeOpenAI() as server:
        no_keys.setenv("STRATAGEM_MODEL_URLS", server.base_url)
        refusal = "max_tokens is too large: 900000. This model supports at most 16384 completion tokens, whereas you provided 900000."
        server.enqueue(Reply.error(400, refusal), Reply.text("ok"), Reply.text("again"))
        model = load_model(f"openai:small@{server.base_url}")
        ask = ModelRequest(
            purpose=Purpose.execute, messages=[Message(role="user", content="hi")], max_output_tokens=900_000
        )
        assert (await model.complete(ask)).text == "ok"
        assert (await model.complete(ask)).text == "again"  # learned: no second refusal
        assert [r.body["max_tokens"] for r in server.requests] == [900_000, 16_384, 16_384]


@pytest.mark.unit
async def test_anthropic_lowers_a_cap_the_model_refuses(no_keys) -> None:
    with FakeAnthropic() as server:
        no_keys.setenv("STRATAGEM_MODEL_URLS", server.base_url)
        refusal = "max_tokens: 100000 > 8192, which is the maximum allowed number of output tokens for claude-x"
        server.enqueue(Reply.error(400, refusal), Reply.text("ok"))
        model = load_model(f"anthropic:small@{server.base_url}")
        ask = ModelRequest(
            purpose=Purpose.execute, messages=[Message(role="user", content="hi")], max_output_tokens=100_000
        )
        assert (await model.complete(ask)).text == "ok"
        assert [r.body["max_tokens"] for r in server.requests] == [100_000, 8_192]


@pytest.mark.unit
async def test_a_refusal_that_allows_no_less_stands(no_keys) -> None:
    with FakeOpenAI() as server:
        no_keys.setenv("STRATAGEM_MODEL_URLS", server.base_url)
        server.enqueue(Reply.error(400, "This model supports at most 16384 completion tokens"))
        model = load_model(f"openai:small@{server.base_url}")
        ask = ModelRequest(
            purpose=Purpose.execute, messages=[Message(role="user", content="hi")], max_output_tokens=100
        )
        with pytest.raises(ModelRequestError, match="at most 16384"):
            await model.complete(ask)
        assert len(server.requests) == 1
