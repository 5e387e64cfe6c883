"""bench.valid_plans, the small-planner measure of issue #44: its two goal sets, and its figures and
--check against a local server speaking OpenAI's wire format (streamed, as planning calls are)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.wire_servers import FakeOpenAI, Reply

from bench import valid_plans

pytestmark = pytest.mark.unit


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with FakeOpenAI() as server:
        yield server


def test_the_fresh_goals_are_twenty_and_apart_from_the_tuned_ones() -> None:
    fresh = valid_plans.fresh_goals()
    assert len(fresh) == 20 == len(valid_plans.GOALS) and not set(fresh) & set(valid_plans.GOALS)


def plan(body: Any) -> Reply:
    goal = body["messages"][1]["content"]
    steps = [{"tool": "write_file", "title": "Write it", "args": {"path": "a.txt", "content": "x"}}]
    return Reply.json({"goal": goal, "steps": steps}, usage=(500, 40))


def test_figures_and_check_pass_when_every_plan_is_valid(fake: FakeOpenAI, tmp_path: Path) -> None:
    fake.responder = plan
    out = tmp_path / "vp.json"
    code = valid_plans.main(["--model", f"openai:m@{fake.base_url}", "--goals", "2", "--json", str(out), "--check"])
    figures = json.loads(out.read_text())
    assert code == 0 and set(figures) == {"bench", "fresh"}
    for summary in figures.values():
        assert (summary["valid"], summary["calls"], summary["input_tokens_per_call"]) == (2, 2, 500)
        assert summary["results"][0]["calls"][0]["stop"] == "stop"
    calls = [r for r in fake.requests if r.path == fake.path]
    assert len(calls) == 4 and all(r.body["stream"] for r in calls)
    # The server has no tokenizer endpoint (llama-cpp-python's has): asked once a set, its own
    # counts stand.
    assert [r.path for r in fake.requests].count("/extras/tokenize/count") == 2


def test_check_fails_and_says_why_when_plans_are_invalid(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.responder = lambda body: Reply.text("not a plan", usage=(1000, 5))
    code = valid_plans.main(["--model", f"openai:m@{fake.base_url}", "--goals", "1", "--set", "fresh", "--check"])
    err = capsys.readouterr().err
    assert code == 1
    assert "fresh: valid plans 0% < 80%" in err and "1,000 input tokens per call > 904" in err
