"""Export configuration from the standard OTEL_* variables, and a worker process that exports
spans over OTLP to a local collector and serves Prometheus metrics."""

from __future__ import annotations

import asyncio
import gzip
import os
import socket
import subprocess
import sys
import threading
import urllib.request
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from support.plans import GREETING
from temporalio.runtime import OpenTelemetryConfig, PrometheusConfig

from stratagem.client import start_run
from stratagem.common.errors import ConfigError
from stratagem.common.telemetry import metrics_config, traces_exporters
from stratagem.domain.plan import Author, AuthorKind, PlanDraft
from stratagem.domain.run_types import Phase, RunInput, RunOptions
from stratagem.domain.usage import Price

ROOT = Path(__file__).resolve().parent.parent


# --- configuration ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "env, expected",
    [
        ({}, []),  # nothing set: nothing exported
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, ["otlp"]),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, ["otlp"]),
        ({"OTEL_TRACES_EXPORTER": "console"}, ["console"]),
        ({"OTEL_TRACES_EXPORTER": "otlp, Console"}, ["otlp", "console"]),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, []),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "console"}, []),
    ],
)
@pytest.mark.unit
def test_traces_exporters_follow_the_standard_variables(env, expected):
    assert traces_exporters(env) == expected


@pytest.mark.unit
def test_an_exporter_stratagem_does_not_ship_is_one_clear_error():
    with pytest.raises(
        ConfigError,
        match="OTEL_TRACES_EXPORTER=zipkin names an exporter Stratagem does not ship: zipkin; use otlp, console, none",
    ):
        traces_exporters({"OTEL_TRACES_EXPORTER": "zipkin"})


@pytest.mark.unit
def test_metrics_configuration():
    assert metrics_config({}) is None
    prometheus = metrics_config({"OTEL_METRICS_EXPORTER": "prometheus"})
    assert isinstance(prometheus, PrometheusConfig) and prometheus.bind_address == "localhost:9464"
    custom = metrics_config(
        {
            "OTEL_METRICS_EXPORTER": "prometheus",
            "OTEL_EXPORTER_PROMETHEUS_HOST": "0.0.0.0",
            "OTEL_EXPORTER_PROMETHEUS_PORT": "9000",
        }
    )
    assert custom.bind_address == "0.0.0.0:9000"
    # Unset, metrics follow the OTLP endpoint; over HTTP the signal's path is appended.
    otlp = metrics_config(
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/", "OTEL_EXPORTER_OTLP_HEADERS": "api-key=abc"}
    )
    assert isinstance(otlp, OpenTelemetryConfig) and otlp.url == "http://collector:4318/v1/metrics" and otlp.http
    assert otlp.headers == {"api-key": "abc"}
    grpc = metrics_config(
        {
            "OTEL_METRICS_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        }
    )
    assert grpc.url == "http://collector:4317" and not grpc.http
    with pytest.raises(ConfigError, match="OTEL_EXPORTER_PROMETHEUS_PORT=99999 is not a port number"):
        metrics_config({"OTEL_METRICS_EXPORTER": "prometheus", "OTEL_EXPORTER_PROMETHEUS_PORT": "99999"})
    with pytest.raises(ConfigError, match="OTEL_METRICS_EXPORTER=otlp needs OTEL_EXPORTER_OTLP_ENDPOINT"):
        metrics_config({"OTEL_METRICS_EXPORTER": "otlp"})
    with pytest.raises(ConfigError, match="OTEL_EXPORTER_OTLP_PROTOCOL=http/json is not supported"):
        metrics_config(
            {
                "OTEL_METRICS_EXPORTER": "otlp",
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json",
            }
        )
    with pytest.raises(ConfigError, match="the Temporal runtime serves one"):
        metrics_config({"OTEL_METRICS_EXPORTER": "prometheus,otlp"})


# --- a worker process ---------------------------------------------------------------------------


class Collector:
    """An OTLP/HTTP trace receiver: what a collector would get, decoded."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        received = self.requests

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                received.append(request)
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200 if self.path == "/v1/traces" else 404)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def spans(self) -> list[tuple[dict, object]]:
        """(resource attributes, span) for every span received."""
        found = []
        for request in self.requests:
            for resource_spans in request.resource_spans:
                resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
                for scope in resource_spans.scope_spans:
                    found.extend((resource, span) for span in scope.spans)
        return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port: int) -> list[str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return response.read().decode().splitlines()


def sample(lines: list[str], name: str, **labels: str) -> float | None:
    """The value of the Prometheus sample `name{...}` whose labels include `labels`."""
    for line in lines:
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


@pytest.mark.system
async def test_a_worker_process_exports_spans_over_otlp_and_serves_prometheus_metrics(dev_env, tmp_path):
    collector = Collector()
    port = free_port()
    task_queue = f"otel-{uuid.uuid4().hex[:8]}"
    executor = tmp_path / "executor.yaml"
    executor.write_text(
        "executor:\n  draft:\n    - text: Welcome aboard.\n      usage: {input_tokens: 1200, output_tokens: 300}\n"
    )
    model = f"scripted:{executor}"
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": dev_env.client.service_client.config.target_host,
        "TEMPORAL_TASK_QUEUE": task_queue,
        "STRATAGEM_WORKSPACE": str(tmp_path / "ws"),
        "STRATAGEM_STORE": str(tmp_path / "store"),
        "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url,
        "OTEL_SERVICE_NAME": "stratagem-test-worker",
        "OTEL_METRICS_EXPORTER": "prometheus",
        "OTEL_EXPORTER_PROMETHEUS_HOST": "127.0.0.1",
        "OTEL_EXPORTER_PROMETHEUS_PORT": str(port),
        "STRATAGEM_INBOX_POLL_SECONDS": "0.5",
    }
    worker = subprocess.Popen(
        [sys.executable, "worker.py", "--tools", "tests/support/fixture_tools.py"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        draft = {
            "id": "draft",
            "title": "Draft",
            "kind": "llm",
            "instructions": "Welcome ${fetch_profile.name}",
            "depends_on": ["fetch_profile"],
        }
        plan = PlanDraft.model_validate({"goal": "greet", "steps": [*GREETING["steps"], draft]})
        options = RunOptions(
            auto_approve=True, executor=model, prices={model: Price(input_per_mtok=1.0, output_per_mtok=2.0)}
        )
        run = await start_run(
            dev_env.client,
            RunInput(plan=plan, author=Author(kind=AuthorKind.human, name="ops"), options=options),
            task_queue=task_queue,
        )
        result = await asyncio.wait_for(run.result(), timeout=60)
        assert result.status is Phase.succeeded

        # Prometheus: the engine's metrics and Temporal's own, from the same endpoint.
        lines: list[str] = []
        for _ in range(100):
            lines = await asyncio.to_thread(scrape, port)
            # The SDK counts the completed workflow once the server took the last workflow task,
            # which can be a moment after the client saw the result.
            if (
                sample(lines, "stratagem_steps_finished", status="succeeded", task_queue=task_queue) == 4
                and sample(lines, "temporal_workflow_completed", task_queue=task_queue) == 1
            ):
                break
            await asyncio.sleep(0.2)
        assert sample(lines, "stratagem_steps_finished", status="succeeded", task_queue=task_queue) == 4, "\n".join(
            lines
        )
        assert sample(lines, "stratagem_model_input_tokens", model=model, purpose="execute") == 1200
        assert sample(lines, "stratagem_model_output_tokens", model=model, purpose="execute") == 300
        assert sample(lines, "stratagem_model_call_cost_sum", model=model) == pytest.approx(
            (1200 * 1.0 + 300 * 2.0) / 1e6
        )
        assert sample(lines, "temporal_workflow_completed", task_queue=task_queue) == 1
        assert any(line.startswith("stratagem_runs_awaiting_approval") for line in lines)
    finally:
        worker.terminate()  # SIGTERM: the worker shuts down and exports what it still holds
        output, _ = worker.communicate(timeout=30)
    assert worker.returncode == 0, output

    spans = collector.spans()
    names = {span.name for _, span in spans}
    assert {
        f"run {run.id}",
        "step greet",
        "step greet attempt 1",
        "execute_tool greet",
        "step draft attempt 1",
    } <= names, names
    assert {resource["service.name"] for resource, _ in spans} == {"stratagem-test-worker"}
    assert len({span.trace_id for _, span in spans if span.name.startswith(("run ", "step "))}) == 1
    chat = next(span for _, span in spans if span.name.startswith("chat "))
    attributes = {a.key: a.value for a in chat.attributes}
    assert attributes["gen_ai.usage.input_tokens"].int_value == 1200
    assert attributes["stratagem.cost_usd"].double_value == pytest.approx(0.0018)


@pytest.mark.system
def test_a_bad_exporter_setting_stops_the_command_line_with_one_line():
    env = {**os.environ, "OTEL_TRACES_EXPORTER": "zipkin", "TEMPORAL_ADDRESS": "127.0.0.1:1"}
    done = subprocess.run(
        [sys.executable, "-m", "stratagem.cli", "list"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip() == (
        "error: OTEL_TRACES_EXPORTER=zipkin names an exporter Stratagem does not ship: zipkin; use otlp, console, none"
    )
