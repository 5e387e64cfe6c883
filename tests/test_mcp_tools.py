"""MCP servers as tool sources (`--tools mcp:stdio:...`, `mcp:http:...`).

Against the real `mcp-server-time` over stdio, and a small server built with the `mcp` package
(tests/support/mcp_server.py) over stdio and Streamable HTTP where the time server cannot show
something: the idempotency key in `_meta`, annotations, failures, a server that goes away.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import sys
import unicodedata
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import pytest_asyncio
from conftest import harness_for, keyed_home, session_approver_keys
from support import FIXTURE_TOOLS
from support.cli import acli, cli, one_line_error, write_plan
from support.mcp_server import SCRIPT, serving_http
from support.plans import awaiting, step

from stratagem.common.errors import PlanValidationError, ToolArgumentsError, ToolError, ToolRegistrationError
from stratagem.domain.ledger import ToolCallStatus
from stratagem.domain.plan import PlanDraft, Risk
from stratagem.domain.risk import needs_approval
from stratagem.domain.run_types import ApproveInput
from stratagem.domain.validation import validate_plan
from stratagem.models import ModelRequest, ModelResponse, ScriptedModel, register_provider
from stratagem.tools import ToolContext, ToolRegistry, canonical_tool_source
from stratagem.tools.mcp_servers import IDEMPOTENCY_META
from stratagem.tools.mcp_sources import parse_source
from stratagem.tools.mcp_tools import MAX_DESCRIPTION, MAX_OUTPUT_BYTES

TIME = f"mcp:stdio:{sys.executable} -m mcp_server_time --local-timezone UTC"
TEST_SERVER = f"mcp:stdio:{sys.executable} {SCRIPT}"
# These start MCP servers, processes the tests' source does not show: `system` (tests/conftest.py).
starts_servers = pytest.mark.system

SEEN: dict[str, list[ModelRequest]] = {}


class RecordingScripted(ScriptedModel):
    """What the executor model was told, by step id."""

    async def complete(self, request: ModelRequest) -> ModelResponse:
        SEEN.setdefault(request.step_id or request.purpose.value, []).append(request)
        return await super().complete(request)


register_provider("mcp-recording", RecordingScripted)


def context(step_id: str = "s", call: int | None = None) -> ToolContext:
    return ToolContext(
        run_id="run-1", step_id=step_id, revision=1, attempt=1, workspace=Path("."), execution_id="x1", call=call
    )


def llm(id: str, tools: list[str], depends_on: list[str] | None = None) -> dict:
    return {
        "id": id,
        "title": id,
        "kind": "llm",
        "instructions": "find out",
        "tools": tools,
        "depends_on": depends_on or [],
    }


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def time_tools():
    """The fixture tools and the real time server's, one registry (and one server) for the module."""
    registry = ToolRegistry.from_modules([FIXTURE_TOOLS, TIME])
    yield registry
    await registry.aclose()


@pytest.fixture(scope="module")
def http_server():
    with serving_http() as server:
        yield server


# ------------------------------------------------------------------ the real time server, stdio


@starts_servers
def test_the_time_servers_tools_join_the_catalogue_with_their_schemas(time_tools):
    catalog = time_tools.catalog()
    now = catalog.get("get_current_time")
    assert now is not None and now.description == "Get current time in a specific timezone"
    assert now.parameters["required"] == ["timezone"]
    assert now.parameters["properties"]["timezone"]["type"] == "string"
    # readOnlyHint: no side effects, and no risk floor of its own.
    assert now.side_effects is False and now.risk is None and not now.needs_approval
    assert not now.local  # a call to another process is never on the local-activity fast path
    # The output schema becomes `returns`, the $defs inlined, so references into it are checked.
    assert set(now.returns["properties"]) == {"timezone", "datetime", "day_of_week", "is_dst"}
    convert = catalog.get("convert_time")
    assert convert is not None
    assert sorted(convert.parameters["required"]) == ["source_timezone", "target_timezone", "time"]
    assert convert.returns["properties"]["target"]["properties"]["datetime"]["type"] == "string"

    # Plans are validated against those schemas, as against a Python tool's.
    def plan(*steps: dict) -> PlanDraft:
        return PlanDraft.model_validate({"goal": "g", "steps": list(steps)})

    validate_plan(
        plan(step("now", "get_current_time", timezone="UTC"), step("r", "record", ["now"], label="${now.datetime}")),
        catalog,
    )
    with pytest.raises(PlanValidationError) as refused:
        validate_plan(
            plan(
                step("now", "get_current_time"),
                step("then", "convert_time", source_timezone="UTC", time=12, target_timezone="Asia/Tokyo"),
                step("r", "record", ["now"], label="${now.datetme}"),
            ),
            catalog,
        )
    problems = "\n".join(refused.value.problems)
    assert "tool 'get_current_time' is missing required argument 'timezone'" in problems
    assert "argument 'time' of tool 'convert_time' is invalid" in problems
    assert "has no field 'datetme'" in problems


@starts_servers
async def test_invoking_returns_the_servers_real_answer(time_tools):
    now = await time_tools.invoke("get_current_time", {"timezone": "UTC"}, context())
    assert now["timezone"] == "UTC" and set(now) == {"timezone", "datetime", "day_of_week", "is_dst"}
    assert abs(datetime.fromisoformat(now["datetime"]) - datetime.now(UTC)) < timedelta(minutes=2)
    converted = await time_tools.invoke(
        "convert_time", {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}, context()
    )
    assert converted["target"]["datetime"].endswith("T21:00:00+09:00") and converted["time_difference"] == "+9.0h"

    # The tool's own failure (isError) is a ToolError another attempt would not change.
    with pytest.raises(ToolError, match="Invalid timezone") as failed:
        await time_tools.invoke("get_current_time", {"timezone": "Mars/Olympus_Mons"}, context())
    assert failed.value.retryable is False
    # Arguments are checked against the schema before anything is sent.
    with pytest.raises(ToolArgumentsError, match="'timezone' is a required property"):
        await time_tools.invoke("get_current_time", {}, context())
    with pytest.raises(ToolArgumentsError, match="'timezone' 3 is not of type 'string'"):
        await time_tools.invoke("get_current_time", {"timezone": 3}, context())


@starts_servers
async def test_an_approved_plan_calls_the_time_server_and_records_its_answer(time_env, tmp_path, time_tools):
    plan = {
        "goal": "what time is it in Tokyo",
        "steps": [
            step("tokyo", "get_current_time", timezone="Asia/Tokyo"),
            step("note", "record", ["tokyo"], label="Tokyo: ${tokyo.datetime} (${tokyo.day_of_week})"),
        ],
    }
    async with harness_for(time_env, tmp_path, time_tools) as harness:
        run = await harness.start(plan)
        await harness.wait_for(run, awaiting)
        await run.approve(ApproveInput(by="bob", revision=1))
        result = await run.result()
        tokyo = (await run.ledger()).steps["tokyo"].output
        assert tokyo["timezone"] == "Asia/Tokyo" and tokyo["datetime"].endswith("+09:00")
        assert result.outputs == {"note": f"Tokyo: {tokyo['datetime']} ({tokyo['day_of_week']})"}
        assert harness.calls()[0]["label"] == result.outputs["note"]


@starts_servers
async def test_an_executor_calls_the_time_server_through_its_allowlist(time_env, tmp_path, time_tools):
    async with harness_for(time_env, tmp_path, time_tools) as harness:
        model = harness.script(
            "exec.yaml",
            {
                "executor": {
                    "ask": [
                        {"call": {"tool": "get_current_time", "args": {"timezone": "Asia/Tokyo"}}},
                        # Not on the step's allowlist, although the worker has it.
                        {
                            "call": {
                                "tool": "convert_time",
                                "args": {"source_timezone": "UTC", "time": "09:00", "target_timezone": "Asia/Tokyo"},
                            }
                        },
                        {"text": "It is evening in Tokyo."},
                    ]
                }
            },
        ).replace("scripted:", "mcp-recording:")
        run = await harness.start(
            {"goal": "g", "steps": [llm("ask", ["get_current_time"])]}, auto_approve=True, executor=model
        )
        assert (await run.result()).outputs == {"ask": "It is evening in Tokyo."}
        calls = (await run.ledger()).steps["ask"].tool_calls
        assert [(c.tool, c.status) for c in calls] == [
            ("get_current_time", ToolCallStatus.ok),
            ("convert_time", ToolCallStatus.refused),
        ]
    requests = SEEN["ask"]
    # Only the allowed tool is offered, with the schema the server gave.
    assert [[t.name for t in r.tools] for r in requests] == [["get_current_time"]] * 3
    assert requests[0].tools[0].parameters["required"] == ["timezone"]
    answered, refused = [m for m in requests[-1].messages if m.role == "tool"]
    assert not answered.is_error and json.loads(answered.content)["timezone"] == "Asia/Tokyo"
    assert refused.is_error and "not authorized" in refused.content


# ------------------------------------------------------------------ the test server, Streamable HTTP


@pytest.mark.workflow
async def test_the_idempotency_key_reaches_the_server_in_meta(time_env, tmp_path, http_server):
    registry = ToolRegistry.from_modules([FIXTURE_TOOLS, f"mcp:http:{http_server.url}"])
    async with harness_for(time_env, tmp_path, registry) as harness:
        model = harness.script(
            "exec.yaml",
            {"executor": {"ask": [{"call": {"tool": "echo", "args": {"text": "from the model"}}}, {"text": "done"}]}},
        )
        plan = {"goal": "g", "steps": [step("say", "echo", text="hello"), llm("ask", ["echo"], ["say"])]}
        run = await harness.start(plan, auto_approve=True, executor=model)
        await run.result()
        said = (await run.ledger()).steps["say"].output
    await registry.aclose()
    by_text = {c["text"]: c for c in http_server.calls if c["tool"] == "echo"}
    step_key, call_key = by_text["hello"]["key"], by_text["from the model"]["key"]
    execution = step_key.split("/")[1]
    assert step_key == f"{run.id}/{execution}/say/r1" and said == {"text": "hello", "key": step_key}
    assert call_key == f"{run.id}/{execution}/ask/r1/c0"
    assert by_text["hello"]["meta"][IDEMPOTENCY_META] == step_key


@pytest.mark.workflow
async def test_a_retried_step_sends_the_same_key_and_the_server_acts_once(time_env, tmp_path, http_server):
    """The server answers the first call with a protocol error (as a payment service that timed
    out would), the step is retried by Temporal, and the second attempt carries the first's key:
    the key a server needs to recognise the call it may already have carried out."""
    registry = ToolRegistry.from_modules([f"mcp:http:{http_server.url}"])
    async with harness_for(time_env, tmp_path, registry) as harness:
        run = await harness.start(
            {"goal": "g", "steps": [step("pay", "charge", amount=120)]}, auto_approve=True, step_max_attempts=3
        )
        assert (await run.result()).outputs["pay"]["charged"] == 120
        record = (await run.ledger()).steps["pay"]
    await registry.aclose()
    calls = [c for c in http_server.calls if c["tool"] == "charge" and c["key"].startswith(f"{run.id}/")]
    assert record.attempts == 2 and len(calls) == 2
    assert calls[0]["key"] == calls[1]["key"] == f"{run.id}/{run.handle.first_execution_run_id}/pay/r1"
    assert record.output == {"charged": 120, "key": calls[0]["key"]}


@pytest.mark.unit
async def test_annotations_raise_risk_and_the_operator_has_the_last_word(http_server):
    plain = ToolRegistry.from_modules([f"mcp:http:{http_server.url}"], builtins=False).catalog()
    echo, note, wipe = plain.get("echo"), plain.get("add_note"), plain.get("wipe")
    assert echo and note and wipe
    assert (echo.side_effects, echo.risk) == (False, None)  # readOnlyHint
    assert (note.side_effects, note.risk) == (True, None)  # destructiveHint: false
    assert (wipe.side_effects, wipe.risk) == (True, Risk.medium)  # no hints: MCP's default is destructive
    assert not wipe.needs_approval
    # A long description from a server is cut before a planner reads it.
    assert len(plain.get("verbose").description) <= MAX_DESCRIPTION  # type: ignore[union-attr]

    spec = f"mcp[prefix=t,only=echo+add_note+wipe,risk=low,approval=add_note]:http:{http_server.url}"
    tuned = ToolRegistry.from_modules([spec], builtins=False).catalog()
    assert tuned.names == ["t_add_note", "t_echo", "t_wipe"]
    assert tuned.get("t_echo").risk is Risk.low  # type: ignore[union-attr]
    assert tuned.get("t_wipe").risk is Risk.medium  # type: ignore[union-attr]  # the server's hint raises low
    assert tuned.get("t_add_note").needs_approval  # type: ignore[union-attr]
    # A read-only hint does not lower the operator's floor: every call waits for a person.
    high = ToolRegistry.from_modules([f"mcp[risk=high,only=echo]:http:{http_server.url}"], builtins=False).catalog()
    assert high.get("echo").risk is Risk.high and high.get("echo").needs_approval  # type: ignore[union-attr]
    gated = PlanDraft.model_validate({"goal": "g", "steps": [step("e", "echo", text="x")]}).steps[0]
    assert needs_approval(gated, high) and not needs_approval(gated, plain)


@pytest.mark.unit
async def test_failures_and_large_outputs(http_server):
    registry = ToolRegistry.from_modules([f"mcp:http:{http_server.url}"], builtins=False)
    with pytest.raises(ToolError, match="cannot do it: no reason") as failed:
        await registry.invoke("fail", {"reason": "no reason"}, context())
    assert failed.value.retryable is False
    flood = await registry.invoke("flood", {"size": MAX_OUTPUT_BYTES + 10}, context())
    assert len(flood) < MAX_OUTPUT_BYTES + 100 and flood.endswith(f"[cut: {MAX_OUTPUT_BYTES + 10:,} characters in all]")
    await registry.aclose()


@starts_servers
async def test_characters_a_server_hides_in_descriptions_reach_no_planner_catalogue_or_executor(time_env, tmp_path):
    """A stdio server whose tool and parameter descriptions carry bidi controls, zero-width and
    tag characters, and C0/C1 controls (tests/support/mcp_server.py, HIDDEN)."""
    registry = ToolRegistry.from_modules([FIXTURE_TOOLS, f"{TEST_SERVER} --hidden"])
    try:
        pay = registry.catalog().get("pay_invoice")
        assert pay is not None and pay.description == "Pay an invoice.[2J Amounts are in cents."
        described = {name: p["description"] for name, p in pay.parameters["properties"].items()}
        assert described == {"invoice": "The invoice id[2J", "amount": "Cents, never euros"}
        async with harness_for(time_env, tmp_path, registry) as harness:
            model = harness.script(
                "pay.yaml",
                {
                    "planner": [{"plan": {"goal": "pay", "steps": [llm("pay", ["pay_invoice"])]}}],
                    "executor": {
                        "pay": [{"call": {"tool": "pay_invoice", "args": {"invoice": "INV-7"}}}, {"text": "ok"}]
                    },
                },
            ).replace("scripted:", "mcp-recording:")
            run = await harness.start(goal="pay INV-7", planner=model, executor=model, auto_approve=True)
            assert (await run.result()).outputs == {"pay": "ok"}
            recorded = payload_texts((await run.handle.fetch_history()).to_json_dict())
    finally:
        await registry.aclose()
    told = json.dumps([r.model_dump(mode="json") for r in SEEN["plan"] + SEEN["pay"]], ensure_ascii=False)
    assert "Pay an invoice." in told and any("Pay an invoice." in p for p in recorded)  # both were looked at
    for text in (told, *recorded):
        hidden = sorted({hex(ord(c)) for c in text if unicodedata.category(c) in ("Cf", "Cc") and c not in "\n\t"})
        assert hidden == [], hidden


@pytest.mark.unit
def test_a_parameter_name_with_hidden_characters_is_refused_in_one_line():
    """A name cannot be cleaned like a description: the server expects it as it wrote it."""
    from mcp.types import Tool

    from stratagem.tools.mcp_tools import tools_of

    source = parse_source("mcp:http:http://127.0.0.1:9/mcp")
    schema = {"type": "object", "properties": {"payee": {"type": "string"}, "amount\u202e": {"type": "integer"}}}
    with pytest.raises(ToolRegistrationError) as refused:
        tools_of(source, [Tool(name="pay", description="Pay.", inputSchema=schema)])
    message = str(refused.value)
    assert "tool 'pay' has a parameter whose name holds invisible characters ('amount')" in message
    assert "\n" not in message and "\u202e" not in message


def payload_texts(node: object) -> list[str]:
    """Every payload of a history, decoded: what the run recorded (its catalogue among them)."""
    if isinstance(node, dict):
        if "metadata" in node and isinstance(node.get("data"), str):
            text = base64.b64decode(node["data"]).decode(errors="replace")
            try:  # as characters, whether the converter wrote them so or as \u escapes
                return [json.dumps(json.loads(text), ensure_ascii=False)]
            except ValueError:
                return [text]
        return [text for value in node.values() for text in payload_texts(value)]
    if isinstance(node, list):
        return [text for value in node for text in payload_texts(value)]
    return []


# ------------------------------------------------------------------ sessions


@starts_servers
async def test_one_session_per_loop_is_reused_and_replaced_when_its_server_dies():
    registry = ToolRegistry.from_modules([TEST_SERVER], builtins=False)
    try:
        first = (await registry.invoke("pid", {}, context()))["result"]
        assert (await registry.invoke("pid", {}, context()))["result"] == first  # the same session
        many = await asyncio.gather(*(registry.invoke("echo", {"text": str(i)}, context()) for i in range(8)))
        assert [m["text"] for m in many] == [str(i) for i in range(8)]
        os.kill(first, signal.SIGKILL)
        await asyncio.sleep(0.2)
        second = (await registry.invoke("pid", {}, context()))["result"]
        assert second != first
    finally:
        await registry.aclose()
    await asyncio.sleep(0.2)
    with pytest.raises(ProcessLookupError):  # closing stopped the server the worker started
        os.kill(second, 0)


# ------------------------------------------------------------------ mistakes a user can make


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("mcp:ftp:somewhere", "unknown MCP transport 'ftp'; write mcp:stdio:COMMAND [ARGS] or mcp:http:URL"),
        ("mcp:stdio:", "names no command"),
        ("mcp:stdio:python 'unclosed", "cannot split the command"),
        ("mcp:http:localhost:8000/mcp", "is not an http:// or https:// URL"),
        ("mcp:nothing", "names no transport"),
        ("mcp[prefix=1x]:http:http://h/mcp", "prefix '1x' must start with a letter"),
        ("mcp[colour=red]:http:http://h/mcp", "unknown option 'colour'"),
        ("mcp[risk=extreme]:http:http://h/mcp", "risk must be low, medium or high"),
        ("mcp[timeout=0]:http:http://h/mcp", "timeout must be a number of seconds"),
        ("mcp[env=A]:http:http://h/mcp", "env= is for stdio servers"),
        ("mcp[only=a:http:http://h/mcp", "no closing ']'"),
        ("mcp:stdio:no-such-mcp-server --flag", "command 'no-such-mcp-server' was not found on PATH"),
        ("mcp:stdio:./no/such/server", "no such file: ./no/such/server"),
        (
            f"mcp[env=STRATAGEM_NO_SUCH_VARIABLE]:stdio:{sys.executable} -m x",
            "STRATAGEM_NO_SUCH_VARIABLE, which this environment does not set",
        ),
    ],
)
@pytest.mark.unit
def test_a_bad_source_is_one_clear_line(spec, expected):
    with pytest.raises(ToolRegistrationError) as refused:
        ToolRegistry.from_modules([spec], builtins=False)
    assert expected in str(refused.value) and "\n" not in str(refused.value)


@pytest.mark.unit
def test_the_forms_a_source_takes():
    source = parse_source("mcp[prefix=fs, only=read+write, approval, timeout=5]:stdio:npx -y '@scope/server' /data")
    assert source.command == ("npx", "-y", "@scope/server", "/data")
    assert (source.prefix, source.only, source.approval, source.timeout) == ("fs", {"read", "write"}, True, 5.0)
    assert parse_source("mcp:https://example.com/mcp").url == "https://example.com/mcp"
    assert parse_source("mcp:HTTP:http://h:1/mcp").transport == "http"
    assert parse_source("mcp[approval=a+b]:http:http://h/mcp").needs_approval("b")
    # A worker started in another folder starts the same server.
    here = canonical_tool_source(f"mcp[prefix=t]:stdio:.venv/bin/python {os.path.relpath(SCRIPT)} --odd")
    assert here == f"mcp[prefix=t]:stdio:{Path('.venv/bin/python').absolute()} {SCRIPT} --odd"


@starts_servers
def test_servers_that_cannot_start_or_list_are_one_clear_line(tmp_path):
    def refused(spec: str) -> str:
        with pytest.raises(ToolRegistrationError) as error:
            ToolRegistry.from_modules([spec], builtins=False)
        assert "\n" not in str(error.value)
        return str(error.value)

    assert "stopped before it listed its tools; it said: " in refused(f"mcp:stdio:{sys.executable} -m no_such_server")
    assert "No module named no_such_server" in refused(f"mcp:stdio:{sys.executable} -m no_such_server")
    hang = f"mcp[timeout=1]:stdio:{sys.executable} -c 'import time; time.sleep(60)'"
    assert "did not list its tools within 1 s" in refused(hang)
    assert "cannot reach MCP server 'mcp:http:http://127.0.0.1:9/mcp'" in refused("mcp:http:http://127.0.0.1:9/mcp")
    assert "offers a tool named 'odd.name', which models cannot call" in refused(f"{TEST_SERVER} --odd")
    assert "only= names nope, which it does not offer" in refused(f"mcp[only=nope]:stdio:{sys.executable} {SCRIPT}")
    # A name the worker already has: refused, with the way out; a prefix takes it.
    clash = f"mcp[only=read_file]:stdio:{sys.executable} {SCRIPT} --odd"
    with pytest.raises(
        ToolRegistrationError,
        match="offers tool 'read_file', which stratagem.tools.builtin already registered; give the server's tools a prefix",
    ):
        ToolRegistry.from_modules([clash])
    prefixed = ToolRegistry.from_modules([clash.replace("only=", "prefix=odd,only=")])
    assert "odd_read_file" in prefixed and "read_file" in prefixed


@starts_servers
async def test_the_command_line_runs_a_plan_with_a_stdio_server(cli_env, tmp_path):
    env, _ = cli_env
    # A queue of its own: only the worker this command hosts, which has the server's tools, serves it.
    env = {**env, "TEMPORAL_TASK_QUEUE": f"mcp-{uuid.uuid4().hex[:8]}"}
    plan = write_plan(
        tmp_path / "plan.yaml", {"goal": "time", "steps": [step("now", "get_current_time", timezone="UTC")]}
    )
    done = await acli("run", "--plan", plan, "--tools", TIME, "--auto-approve", "--json", "--id", "cli-mcp", env=env)
    assert done.returncode == 0, done.stderr
    # The workers' keys, the one that run just made among them: `wait` hosts the workflow with them.
    waited_out = await acli("wait", "cli-mcp", "--json", env={**env, **session_approver_keys()})
    assert waited_out.returncode == 0, waited_out.stderr
    waited = json.loads(waited_out.stdout)
    assert waited["outputs"]["now"]["timezone"] == "UTC"


@pytest.mark.system
def test_the_command_line_refuses_a_bad_source_in_one_line(tmp_path):
    env = {**os.environ, "STRATAGEM_HOME": keyed_home(tmp_path / "home")}
    plan = write_plan(tmp_path / "plan.yaml", {"goal": "g", "steps": [step("now", "get_current_time", timezone="UTC")]})
    one_line_error(
        cli("run", "--plan", plan, "--tools", "mcp:stdio:no-such-mcp-server", env=env), "was not found on PATH"
    )
    one_line_error(cli("run", "--plan", plan, "--tools", "mcp:carrier-pigeon:coop", env=env), "unknown MCP transport")


@pytest.mark.system
def test_the_command_line_and_the_worker_do_not_import_the_mcp_sdk_until_a_server_is_named() -> None:
    """The SDK takes about 0.6 s to import; every command and worker start would pay it."""
    import subprocess
    import sys

    code = "import sys, stratagem.cli, stratagem.worker, stratagem.activities; print('mcp' in sys.modules)"
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert shown.stdout.strip() == "False"
