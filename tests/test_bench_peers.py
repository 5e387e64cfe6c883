"""The peers bench (bench/peers): the one model server answers every framework alike, through the
real openai client; its plans are Stratagem plans; the tool's reconcile check finds an effect by
its key; a job runs on Stratagem's worker process and is measured; the rows compare with the
best peer and keep each goal's direction."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from openai import OpenAI

from bench.peers.fake_llm import FakeLLM, reply
from bench.peers.jobs import JOBS, QUICK_JOBS, TOOL, Job
from bench.peers.measure import rows
from bench.peers.tools import EFFECT_LOG_ENV, logged, record_text
from stratagem.domain.plan import PlanDraft
from stratagem.tools import ToolRegistry
from stratagem.tools.definition import ToolContext

TOOLS = [{"type": "function", "function": {"name": TOOL, "parameters": {"type": "object"}}}]


def _tool_results(n: int) -> list[dict[str, str]]:
    return [{"role": "tool", "tool_call_id": f"call_{i}", "content": "x"} for i in range(n)]


@pytest.mark.unit
def test_a_sequence_job_calls_the_tool_once_per_round_then_answers():
    job = Job("seq", 3, 100, 5)
    for done in range(3):
        status, body = reply({"model": job.model, "tools": TOOLS, "messages": _tool_results(done)})
        [call] = body["choices"][0]["message"]["tool_calls"]
        assert status == 200 and call["function"]["name"] == TOOL
        assert json.loads(call["function"]["arguments"]) == {"index": done, "size": 100, "ms": 5}
    status, body = reply({"model": job.model, "tools": TOOLS, "messages": _tool_results(3)})
    assert body["choices"][0]["message"]["content"] == "done: 3 records fetched"
    assert body["choices"][0]["finish_reason"] == "stop"


@pytest.mark.unit
def test_a_fan_job_asks_for_every_call_in_one_answer():
    job = Job("fan", 8, 10, 1000)
    _, body = reply({"model": job.model, "tools": TOOLS, "messages": []})
    calls = body["choices"][0]["message"]["tool_calls"]
    assert [json.loads(c["function"]["arguments"])["index"] for c in calls] == list(range(8))
    assert len({c["id"] for c in calls}) == 8
    _, body = reply({"model": job.model, "tools": TOOLS, "messages": _tool_results(8)})
    assert body["choices"][0]["message"]["content"] == "done: 8 records fetched"


@pytest.mark.unit
def test_a_planning_request_gets_the_same_calls_as_a_stratagem_plan():
    for job in (Job("seq", 4, 10), Job("fan", 3, 10, 100)):
        body = {
            "model": job.model,
            "messages": [],
            "response_format": {"type": "json_schema", "json_schema": {"name": "plan"}},
        }
        _, answer = reply(body)
        plan = PlanDraft.model_validate(json.loads(answer["choices"][0]["message"]["content"]))
        assert [s.args["index"] for s in plan.steps] == list(range(job.calls))
        chained = [s.depends_on for s in plan.steps]
        assert chained == ([[]] + [[f"r{i}"] for i in range(3)] if job.shape == "seq" else [[]] * 3)


@pytest.mark.unit
def test_a_model_that_is_not_a_job_is_refused():
    status, body = reply({"model": "gpt-4.1", "messages": []})
    assert status == 404 and "not a peers job" in body["error"]["message"]


@pytest.mark.unit
def test_the_real_openai_client_reads_the_servers_answers():
    job = JOBS["tool_heavy"]
    with FakeLLM() as llm:
        client = OpenAI(base_url=llm.base_url, api_key="not-used", max_retries=0)
        first = client.chat.completions.create(
            model=job.model, messages=[{"role": "user", "content": "go"}], tools=TOOLS
        )  # type: ignore[arg-type]
        [call] = first.choices[0].message.tool_calls or []
        assert call.function.name == TOOL and json.loads(call.function.arguments)["size"] == 20_000
        assert first.usage is not None and first.usage.prompt_tokens > 0
        assert llm.seen.of(job.model) and llm.seen.of("other") == []


@pytest.mark.unit
def test_every_job_has_a_model_name_the_server_reads_back():
    for job in {*JOBS.values(), *QUICK_JOBS.values()}:
        assert Job.of_model(job.model) == job
    assert JOBS["long_horizon"].model_calls == 100  # the long horizon


@pytest.mark.unit
def test_the_tool_returns_its_size_and_its_check_finds_an_effect_by_key(tmp_path, monkeypatch):
    log = tmp_path / "effects.log"
    monkeypatch.setenv(EFFECT_LOG_ENV, str(log))
    assert len(record_text(3, 20_000)) == 20_000 and record_text(3, 10) != record_text(4, 10)
    registry = ToolRegistry.from_modules(["bench.peers.tools"])
    definition = registry.get(TOOL)
    assert definition.reconcile is not None
    context = ToolContext(run_id="r", step_id="s", revision=1, attempt=1, workspace=tmp_path, execution_id="e")
    other = ToolContext(run_id="r", step_id="t", revision=1, attempt=1, workspace=tmp_path, execution_id="e")
    args = {"index": 2, "size": 50, "ms": 0}
    assert definition.reconcile(**args, ctx=context) is None
    assert definition.function(**args, ctx=context) == record_text(2, 50)
    assert definition.reconcile(**args, ctx=context) == record_text(2, 50)
    assert definition.reconcile(**args, ctx=other) is None  # another step's key: not this call
    assert logged(Path(log)) == [(2, context.idempotency_key)]


def _result(bytes_per_call: float, wall: float, *, completed: bool = True, twice: int = 0) -> dict:
    calls = 20
    return {
        "completed": completed,
        "tool_calls": calls,
        "wall_s": wall,
        "workflow_cpu_s": 0.01,
        "resume_s": 5.0,
        "peak_rss_kib": 100 * 1024,
        "twice": twice,
        "history": {"bytes": bytes_per_call * calls, "events": 5 * calls, "executions": 1},
    }


@pytest.mark.unit
def test_rows_compare_with_the_best_peer_and_judge_only_stratagem():
    jobs = JOBS
    every = ("tool_heavy", "long_horizon", "parallel", "crash", "tool_heavy_200")
    results = {
        "stratagem": {j: _result(2_000, 0.6) for j in every},
        "stratagem_joint": {j: _result(700, 1.5) for j in every},
        "pydantic_ai": {j: _result(250_000, 0.9, twice=1) for j in every},
        "openai_agents": {j: _result(230_000, 1.2, twice=1) for j in every},
    }
    results["pydantic_ai"]["tool_heavy_200"]["completed"] = False
    table = {r.metric.strip(): r for r in rows(results, jobs)}
    heavy = table["tool-heavy (20 calls × 20 KB): history bytes per tool call"]
    assert heavy.baseline == 230_000 and heavy.ratio == pytest.approx(2_000 / 230_000) and "openai_agents" in heavy.note
    assert heavy.goal is not None and heavy.goal.met(heavy.figure)
    wall = table["wall time per tool call"]
    assert wall.baseline == pytest.approx(900 / 20) and wall.goal is not None and wall.goal.met(wall.figure)
    done = table["completes 200 calls × 20 KB"]
    assert done.stratagem == 1.0 and "pydantic_ai: no" in done.note and "openai_agents: yes" in done.note
    crash = table["crash: tool calls run twice after the kill"]
    assert crash.stratagem == 0 and crash.goal is not None and crash.goal.met(crash.figure)
    results["stratagem"]["crash"]["twice"] = 1
    crash = {r.metric.strip(): r for r in rows(results, jobs)}["crash: tool calls run twice after the kill"]
    assert crash.goal is not None and crash.goal.met(crash.figure) is False


@pytest.mark.system
async def test_a_job_runs_on_stratagems_worker_process_and_is_measured(tmp_path, monkeypatch):
    from bench.common import dev_server
    from bench.peers import stratagem_job
    from bench.peers.harness import Variant, run_job

    monkeypatch.setenv("STRATAGEM_HOME", str(tmp_path / "home"))  # dev_server sets it; restored after
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    job = Job("seq", 3, 30_000)
    async with dev_server(tmp_path / "bench", quick=True) as bench:
        with FakeLLM() as llm:
            for joint in (False, True):
                variant = Variant("s", "Stratagem", "stratagem", stratagem_job, joint=joint)
                done = await run_job(bench, llm.base_url, variant, bench.client, job, name=f"j{joint}", deadline=120)
                assert done["completed"], done
                assert (done["effects"], done["twice"], done["missing"]) == (3, 0, 0)
                assert done["history"]["executions"] == 1 and done["history"]["events"] > 10
                # 90 KB of results, none of it in the history: the store holds them (the joint
                # loop's transcript, where a tool result is cut at 16,000 characters).
                assert done["history"]["bytes"] < 45_000 < done["store_bytes"]
                assert done["peak_rss_kib"] > done["idle_rss_kib"] > 10_000
                assert done["workflow_cpu_s"] > 0 and done["wall_s"] > 0
            # The planner made one call; the joint loop one per tool call and its answer.
            assert len(llm.seen.of(job.model)) == 1 + 4


def _peer_module(name: str):
    """A peer's job module; CI installs the bench-peers extra and sets STRATAGEM_REQUIRE_PEERS, so
    there a missing framework fails the test rather than skipping it."""
    import importlib
    import os

    try:
        return importlib.import_module(f"bench.peers.{name}_job")
    except ImportError as exc:
        if os.environ.get("STRATAGEM_REQUIRE_PEERS"):
            raise
        pytest.skip(f"{exc.name} is not installed: pip install -e '.[bench-peers]'")


@pytest.mark.system
@pytest.mark.parametrize("peer", ["pydantic_ai", "openai_agents"])
async def test_a_job_runs_on_each_peer_as_its_docs_say_and_is_measured(peer, tmp_path, monkeypatch):
    from temporalio.client import Client

    from bench.common import dev_server
    from bench.peers.harness import Variant, run_job

    module = _peer_module(peer)
    monkeypatch.setenv("STRATAGEM_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    job = Job("seq", 3, 30_000)
    async with dev_server(tmp_path / "bench", quick=True) as bench:
        with FakeLLM() as llm:
            client = await Client.connect(bench.address, plugins=module.client_plugins())
            done = await run_job(
                bench, llm.base_url, Variant(peer, peer, peer, module), client, job, name="j", deadline=120
            )
            assert done["completed"] and done["outcome"] == "done: 3 records fetched", done
            assert (done["effects"], done["twice"], done["missing"]) == (3, 0, 0)
            # The peer's way: every model call's input holds the conversation, results included.
            assert done["history"]["bytes"] > 3 * 30_000
            assert len(llm.seen.of(job.model)) == 4  # three tool rounds and the answer
    assert module.VERSION and module.NOTES
