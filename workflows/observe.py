"""What a run shows the outside world while it runs: spans, metrics, and its status in visibility.

Workflow code, so deterministic: spans come from the replay-safe tracer (ids from the workflow's
seeded random, nothing exported while replaying history), metrics from `workflow.metric_meter()`
(which records nothing during replay), and the status search attribute is set only for runs
started with `RunOptions.status_search_attribute`, so histories recorded before it replay as
they were.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import MetricCounter, MetricHistogramFloat, MetricMeter, SearchAttributeKey
from temporalio.exceptions import CancelledError as TemporalCancelledError
from temporalio.workflow import ContinueAsNewError

with workflow.unsafe.imports_passed_through():
    from opentelemetry import context as otel_context
    from opentelemetry import trace

    from stratagem.common.telemetry import tracing_enabled, workflow_tracer
    from stratagem.domain.decisions import listed
    from stratagem.domain.run_types import STATUS_SEARCH_ATTRIBUTE, RunState, run_status
    from stratagem.domain.usage import CallRecord

STATUS_KEY = SearchAttributeKey.for_keyword(STATUS_SEARCH_ATTRIBUTE)


def _ends_span(exc: BaseException) -> bool:
    """Whether a span may end as `exc` leaves it. A workflow task that fails on a bug is retried,
    so ending spans then would export them once per retry; a coroutine closed by the garbage
    collector (GeneratorExit) is outside the workflow altogether. (An evicted workflow's tasks
    are cancelled, but Temporal counts eviction as replay, so its spans do not end either.)"""
    if isinstance(exc, GeneratorExit):
        return False
    if isinstance(exc, (asyncio.CancelledError, TemporalCancelledError, ContinueAsNewError)):
        return True
    try:
        return workflow.is_failure_exception(exc)
    except Exception:  # not in the workflow's event loop
        return False


def _detach(token: Any) -> None:
    """Detach a context attached in this block. A coroutine the garbage collector closes runs
    its `finally` in another contextvars.Context, where the token is invalid and there is
    nothing to detach (opentelemetry's own detach would log an error for it)."""
    try:
        token.var.reset(token)
    except ValueError:
        pass


def mark(span: trace.Span, error: str | None) -> None:
    if error is not None:
        span.set_status(trace.Status(trace.StatusCode.ERROR, error[:500]))


T = TypeVar("T")


class Observer:
    def __init__(self, run_id: str) -> None:
        self.run_id = run_id  # on every span, so a trace viewer finds all of a run's spans by it
        self.tracer = workflow_tracer()
        # Without a replay-safe provider every span would be a no-op; skipping them altogether
        # saves the context switching around each step.
        self.tracing = tracing_enabled()
        # Metrics are made when first recorded: six instruments a run cost more than the rest of
        # this set-up, and a run of tool steps records only steps (_counter).
        self._steps: dict[str, MetricCounter] = {}
        self._instruments: dict[str, Any] = {}
        # What visibility already holds: set at start, or carried over by continue-as-new.
        self._status: str | None = workflow.info().typed_search_attributes.get(STATUS_KEY)
        self._waiting: list[dict[str, Any]] | None = workflow.memo_value("waiting", None)

    # ------------------------------------------------------------------ spans

    @contextmanager
    def span(self, name: str, attributes: dict[str, Any], links: Sequence[trace.Link] = ()) -> Iterator[trace.Span]:
        """A span around a block, current inside it, so activities started there are its children."""
        if not self.tracing:
            yield trace.INVALID_SPAN
            return
        span = self.start(name, attributes, links)
        token = otel_context.attach(trace.set_span_in_context(span))
        try:
            yield span
        except BaseException as exc:
            if _ends_span(exc):
                if not isinstance(exc, ContinueAsNewError):
                    mark(span, f"{type(exc).__name__}: {exc}")
                span.end()
            raise
        finally:
            _detach(token)
        span.end()

    def start(self, name: str, attributes: dict[str, Any], links: Sequence[trace.Link] = ()) -> trace.Span:
        """A span under the current one (the run's, or a step's inside a step)."""
        return self.tracer.start_span(name, attributes={"stratagem.run_id": self.run_id, **attributes}, links=links)

    # ------------------------------------------------------------------ metrics

    def _instrument(self, name: str, make: Callable[[MetricMeter], T]) -> T:
        instrument = self._instruments.get(name)
        if instrument is None:
            instrument = self._instruments[name] = make(workflow.metric_meter())
        return instrument  # type: ignore[no-any-return]

    def _counter(self, name: str, description: str) -> MetricCounter:
        return self._instrument(name, lambda meter: meter.create_counter(name, description))

    def step_finished(self, status: str) -> None:
        # One counter per status, its attribute set made once rather than at every step.
        counter = self._steps.get(status)
        if counter is None:
            steps = self._counter("stratagem_steps_finished", "Steps that ended, by status.")
            counter = self._steps[status] = steps.with_additional_attributes({"status": status})
        counter.add(1)

    def replanned(self) -> None:
        self._counter("stratagem_replans", "Plan revisions after a failure.").add(1)

    def calls(self, records: Sequence[CallRecord]) -> None:
        if not records:
            return
        calls = self._counter("stratagem_model_calls", "Model calls, by model and purpose.")
        input_tokens = self._counter("stratagem_model_input_tokens", "Input tokens, by model.")
        output_tokens = self._counter("stratagem_model_output_tokens", "Output tokens, by model.")
        for record in records:
            tags = {"model": record.model, "purpose": record.purpose}
            calls.add(1, tags)
            input_tokens.add(record.input_tokens, tags)
            output_tokens.add(record.output_tokens, tags)
            if record.cost_usd is not None:
                self._cost().record(record.cost_usd, {"model": record.model})

    def _cost(self) -> MetricHistogramFloat:
        return self._instrument(
            "stratagem_model_call_cost",
            lambda meter: meter.create_histogram_float(
                "stratagem_model_call_cost", "Estimated cost of each model call, by model; its sum is the spend.", "USD"
            ),
        )

    # ------------------------------------------------------------------ visibility

    def publish(self, state: RunState) -> None:
        """Keep the status search attribute and the memo's list of waits current (runs started
        with status_search_attribute only). Upserts happen only on a change."""
        if not state.options.status_search_attribute:
            return
        status = run_status(state)
        if status != self._status:
            self._status = status
            workflow.upsert_search_attributes([STATUS_KEY.value_set(status)])
        # Rewritten when what each wait is changes, as it always was (listed.IDENTITY): the keys
        # added for the inbox are written along, never on their own, so no history gains a write.
        waiting = listed.entries(state)
        if listed.identity(waiting) != listed.identity(self._waiting):
            self._waiting = waiting
            workflow.upsert_memo({"waiting": waiting})
