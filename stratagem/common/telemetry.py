"""Traces and metrics, configured by the standard OpenTelemetry environment variables.

Traces go through Temporal's own integration (`temporalio.contrib.opentelemetry`): a replay-safe
tracer provider whose span ids inside workflows come from the workflow's deterministic random,
and whose spans are not ended (so not exported) while a worker replays history. A run's trace
is therefore the same however often its workflow is replayed.

- `OTEL_TRACES_EXPORTER`: `otlp`, `console` or `none` (comma-separated for several). Unset, spans
  are exported over OTLP when `OTEL_EXPORTER_OTLP_ENDPOINT` (or the traces-only variant) is set,
  and not at all otherwise. The OTLP exporter reads its own `OTEL_EXPORTER_OTLP_*` settings
  (endpoint, headers, timeout); the protocol is `http/protobuf` unless told `grpc`.
- `OTEL_METRICS_EXPORTER`: `prometheus` serves Temporal's SDK metrics and Stratagem's own on
  `OTEL_EXPORTER_PROMETHEUS_HOST:OTEL_EXPORTER_PROMETHEUS_PORT` (localhost:9464); `otlp` pushes
  them to the OTLP endpoint. Unset, metrics follow the OTLP endpoint as traces do.
- `OTEL_SDK_DISABLED=true` turns both off. `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES` name
  the process (default `stratagem-worker`).

Nothing here runs inside a workflow except `workflow_tracer`, which only reads the global provider.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace

from stratagem.common.errors import ConfigError

SERVICE_NAME = "stratagem-worker"
TRACES_EXPORTERS = ("otlp", "console", "none")
METRICS_EXPORTERS = ("prometheus", "otlp", "none")
OTLP_PROTOCOLS = ("http/protobuf", "grpc")
PROMETHEUS_DEFAULT = ("localhost", 9464)

# The settings a worker reads here; a change must reach the embedded setup's background worker.
TELEMETRY_ENV = (
    "OTEL_SDK_DISABLED",
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_TRACES_EXPORTER",
    "OTEL_METRICS_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_PROMETHEUS_HOST",
    "OTEL_EXPORTER_PROMETHEUS_PORT",
)


def _disabled(env: Mapping[str, str]) -> bool:
    return env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"


def _names(variable: str, env: Mapping[str, str], allowed: tuple[str, ...]) -> list[str] | None:
    """The exporters a comma-separated variable names; None if it is unset or blank."""
    raw = env.get(variable, "").strip()
    if not raw:
        return None
    names = [name.strip().lower() for name in raw.split(",") if name.strip()]
    unknown = [name for name in names if name not in allowed]
    if unknown:
        raise ConfigError(
            f"{variable}={raw} names an exporter Stratagem does not ship: {', '.join(unknown)}; use {', '.join(allowed)}"
        )
    return [] if "none" in names else names


def _protocol(signal: str, env: Mapping[str, str]) -> str:
    variable = f"OTEL_EXPORTER_OTLP_{signal}_PROTOCOL"
    if not env.get(variable):
        variable = "OTEL_EXPORTER_OTLP_PROTOCOL"
    protocol = env.get(variable, "").strip() or "http/protobuf"
    if protocol not in OTLP_PROTOCOLS:
        raise ConfigError(f"{variable}={protocol} is not supported; use {' or '.join(OTLP_PROTOCOLS)}")
    return protocol


def traces_exporters(env: Mapping[str, str] | None = None) -> list[str]:
    """Where spans go, from the environment: [] means nowhere."""
    env = os.environ if env is None else env
    if _disabled(env):
        return []
    names = _names("OTEL_TRACES_EXPORTER", env, TRACES_EXPORTERS)
    if names is not None:
        return names
    return ["otlp"] if env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") else []


def _span_exporter(name: str, env: Mapping[str, str]) -> Any:
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    if _protocol("TRACES", env) == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
                OTLPSpanExporter,  # type: ignore[import-not-found]
            )
        except ImportError:
            raise ConfigError(
                "OTLP over grpc needs the package opentelemetry-exporter-otlp-proto-grpc; install it, "
                "or set OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf"
            ) from None
        return OTLPSpanExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter

    return HttpSpanExporter()


def _resource(service_name: str, env: Mapping[str, str]) -> Any:
    from opentelemetry.sdk.resources import Resource

    named = env.get("OTEL_SERVICE_NAME") or "service.name=" in env.get("OTEL_RESOURCE_ATTRIBUTES", "")
    # Resource.create reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES itself; attributes given
    # here would override them, so the default name is given only when they name nothing.
    return Resource.create({} if named else {"service.name": service_name})


def tracing_enabled() -> bool:
    """True if the global tracer provider is Temporal's replay-safe one (ours, or one an
    embedding application installed with `create_tracer_provider`)."""
    from temporalio.contrib.opentelemetry import ReplaySafeTracerProvider

    return isinstance(trace.get_tracer_provider(), ReplaySafeTracerProvider)


def configure_tracing(service_name: str = SERVICE_NAME, env: Mapping[str, str] | None = None) -> bool:
    """Install a replay-safe global tracer provider exporting where the environment says.
    True if spans are recorded. Idempotent; an application that installed its own replay-safe
    provider keeps it. Raises ConfigError for a setting that cannot work."""
    env = os.environ if env is None else env
    exporters = traces_exporters(env)
    current = trace.get_tracer_provider()
    if isinstance(current, trace.ProxyTracerProvider) and not exporters:
        return False  # the common case, decided without importing the SDK
    if tracing_enabled():
        return True
    if not exporters:
        return False
    if not isinstance(current, trace.ProxyTracerProvider):
        raise ConfigError(
            "another OpenTelemetry tracer provider is already installed; workflow spans need Temporal's replay-safe one "
            "(temporalio.contrib.opentelemetry.create_tracer_provider)"
        )
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    from temporalio.contrib.opentelemetry import create_tracer_provider

    provider = create_tracer_provider(resource=_resource(service_name, env))
    for name in exporters:
        exporter = _span_exporter(name, env)
        # The console is for people watching: print each span as it ends.
        provider.add_span_processor(
            SimpleSpanProcessor(exporter) if name == "console" else BatchSpanProcessor(exporter)
        )
    trace.set_tracer_provider(provider)
    return True


def flush_telemetry(timeout_millis: int = 10_000) -> None:
    """Export the spans still buffered. Call before `os._exit`, which skips atexit hooks."""
    provider = trace.get_tracer_provider()
    force_flush = getattr(provider, "force_flush", None)
    if callable(force_flush):
        force_flush(timeout_millis)


# ---------------------------------------------------------------------- metrics


def _prometheus_address(env: Mapping[str, str]) -> str:
    host = env.get("OTEL_EXPORTER_PROMETHEUS_HOST", "").strip() or PROMETHEUS_DEFAULT[0]
    raw = env.get("OTEL_EXPORTER_PROMETHEUS_PORT", "").strip() or str(PROMETHEUS_DEFAULT[1])
    if not raw.isdigit() or not 1 <= int(raw) <= 65535:
        raise ConfigError(f"OTEL_EXPORTER_PROMETHEUS_PORT={raw} is not a port number (1-65535)")
    return f"{host}:{raw}"


def _headers(env: Mapping[str, str]) -> dict[str, str]:
    raw = env.get("OTEL_EXPORTER_OTLP_METRICS_HEADERS") or env.get("OTEL_EXPORTER_OTLP_HEADERS") or ""
    headers = {}
    for pair in filter(None, (p.strip() for p in raw.split(","))):
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError("OTEL_EXPORTER_OTLP_HEADERS must be key=value pairs separated by commas")
        headers[key.strip()] = value.strip()
    return headers


def metrics_config(env: Mapping[str, str] | None = None) -> Any:
    """The Temporal runtime's metrics configuration the environment asks for, or None."""
    from temporalio.runtime import OpenTelemetryConfig, PrometheusConfig

    env = os.environ if env is None else env
    if _disabled(env):
        return None
    names = _names("OTEL_METRICS_EXPORTER", env, METRICS_EXPORTERS)
    if names is None:
        names = (
            ["otlp"] if env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") else []
        )
    if len(names) > 1:
        raise ConfigError(f"OTEL_METRICS_EXPORTER names {len(names)} exporters; the Temporal runtime serves one")
    if not names:
        return None
    if names[0] == "prometheus":
        return PrometheusConfig(bind_address=_prometheus_address(env), durations_as_seconds=True)
    http = _protocol("METRICS", env) != "grpc"
    url = env.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "").strip()
    if not url:
        base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
        if not base:
            raise ConfigError(
                "OTEL_METRICS_EXPORTER=otlp needs OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_METRICS_ENDPOINT)"
            )
        # The specification's rule for the generic endpoint over HTTP: append the signal's path.
        url = base.rstrip("/") + "/v1/metrics" if http else base
    return OpenTelemetryConfig(url=url, headers=_headers(env), http=http, durations_as_seconds=True)


def metrics_runtime(env: Mapping[str, str] | None = None) -> Any:
    """A Temporal runtime exporting metrics as the environment says, or None (the SDK's default)."""
    config = metrics_config(env)
    if config is None:
        return None
    from temporalio.runtime import LoggingConfig, Runtime, TelemetryConfig, TelemetryFilter

    logging = LoggingConfig(filter=TelemetryFilter(core_level="WARN", other_level="ERROR"))
    try:
        return Runtime(telemetry=TelemetryConfig(logging=logging, metrics=config))
    except Exception as exc:  # the core raises when the Prometheus address cannot be bound
        raise ConfigError(f"cannot start the metrics exporter: {exc}") from None


def workflow_tracer() -> trace.Tracer:
    """The tracer workflow code uses: the global one if it is replay-safe, else a no-op one,
    so a replay can never emit spans twice."""
    if tracing_enabled():
        return trace.get_tracer("stratagem")
    return trace.NoOpTracer()


# ---------------------------------------------------------------------- spans outside workflows
# Activity code runs once per attempt, so it uses the global tracer directly. Attribute names
# follow OpenTelemetry's GenAI semantic conventions where one exists, and `stratagem.*` otherwise.


def _recording() -> bool:
    """Whether a real tracer provider is installed (spans would be recorded somewhere)."""
    return not isinstance(trace.get_tracer_provider(), (trace.ProxyTracerProvider, trace.NoOpTracerProvider))


def _tracer() -> trace.Tracer:
    return trace.get_tracer("stratagem")


def _fail(span: trace.Span, exc: BaseException) -> None:
    span.set_attribute("error.type", type(exc).__name__)
    span.set_status(trace.Status(trace.StatusCode.ERROR, str(exc)[:500]))


@contextmanager
def _span(
    name: str, attributes: Mapping[str, Any], kind: trace.SpanKind = trace.SpanKind.INTERNAL
) -> Iterator[trace.Span]:
    """A current span around a block; an exception marks it failed, with the error's type and
    one-line (already redacted) message. Without a tracer provider nothing is recorded, so
    nothing is started either: each step attempt would otherwise pay for a context switch."""
    if not _recording():
        yield trace.INVALID_SPAN
        return
    with _tracer().start_as_current_span(
        name, kind=kind, attributes=dict(attributes), record_exception=False, set_status_on_exception=False
    ) as span:
        try:
            yield span
        except BaseException as exc:
            _fail(span, exc)
            raise


def attempt_span(name: str, attributes: Mapping[str, Any]) -> Any:
    """The span of one activity attempt (a step attempt, a planner call), beneath the workflow's span for it."""
    return _span(name, attributes)


def model_call_span(provider: str, model: str, *, purpose: str, step_id: str | None, attempt: int) -> Any:
    """`chat <model>`: one model request; `record_response` adds what came back."""
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": provider,
        "gen_ai.request.model": model,
        "stratagem.purpose": purpose,
        "stratagem.attempt": attempt,
    }
    if step_id:
        attributes["stratagem.step.id"] = step_id
    return _span(f"chat {model}", attributes, trace.SpanKind.CLIENT)


def record_response(
    span: trace.Span,
    response_model: str,
    input_tokens: int,
    output_tokens: int,
    stop_reason: str | None,
    price: Any = None,
) -> None:
    """The GenAI response attributes, and the cost when the model has a price (a `stratagem.domain.usage.Price`)."""
    span.set_attribute("gen_ai.response.model", response_model)
    span.set_attribute("gen_ai.usage.input_tokens", input_tokens)
    span.set_attribute("gen_ai.usage.output_tokens", output_tokens)
    if stop_reason:
        span.set_attribute("gen_ai.response.finish_reasons", [stop_reason])
    if price is not None:
        span.set_attribute("stratagem.cost_usd", price.cost(input_tokens, output_tokens))


def tool_call_span(tool: str, *, step_id: str, attempt: int, key: str, call: int | None) -> Any:
    """`execute_tool <tool>`: one tool call, with its idempotency key."""
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": tool,
        "stratagem.step.id": step_id,
        "stratagem.attempt": attempt,
        "stratagem.idempotency_key": key,
    }
    if call is not None:
        attributes["stratagem.tool_call"] = call
    return _span(f"execute_tool {tool}", attributes)
