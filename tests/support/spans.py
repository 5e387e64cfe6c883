"""Spans of the tests' in-process workers, captured in memory.

conftest installs Temporal's replay-safe tracer provider once for the whole session, so every
workflow test runs traced (and its replay checks run with tracing on). `CAPTURE` keeps the ended
spans; a test picks out its run's trace by the run id.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor


class SpanCapture(SpanProcessor):
    def __init__(self, keep: int = 50_000):
        self._spans: list[ReadableSpan] = []
        self._lock = threading.Lock()
        self._keep = keep

    def on_end(self, span: ReadableSpan) -> None:
        with self._lock:
            self._spans.append(span)
            if len(self._spans) > self._keep:
                del self._spans[: len(self._spans) - self._keep]

    @property
    def spans(self) -> list[ReadableSpan]:
        with self._lock:
            return list(self._spans)

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True

    def trace_of(self, run_id: str) -> Trace:
        """The trace of a run: every span sharing the trace id of the spans that name the run."""
        spans = self.spans
        named = {s.context.trace_id for s in spans if (s.attributes or {}).get("stratagem.run_id") == run_id}
        assert len(named) == 1, f"{len(named)} traces name run {run_id}"
        trace_id = named.pop()
        return Trace([s for s in spans if s.context.trace_id == trace_id])


CAPTURE = SpanCapture()


@dataclass
class Trace:
    spans: list[ReadableSpan]

    def named(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.spans if s.name == name]

    def one(self, name: str) -> ReadableSpan:
        found = self.named(name)
        assert len(found) == 1, f"{len(found)} spans named {name!r}; all: {sorted(s.name for s in self.spans)}"
        return found[0]

    def parent_of(self, span: ReadableSpan) -> ReadableSpan | None:
        if span.parent is None:
            return None
        matches = [s for s in self.spans if s.context.span_id == span.parent.span_id]
        assert len(matches) == 1, f"parent of {span.name!r} is not in the trace exactly once ({len(matches)})"
        return matches[0]

    def children(self, span: ReadableSpan) -> list[ReadableSpan]:
        return [s for s in self.spans if s.parent is not None and s.parent.span_id == span.context.span_id]

    def check_tree(self) -> ReadableSpan:
        """One root, every span id unique, every parent present: the trace is a tree. Returns the root."""
        ids = Counter(s.context.span_id for s in self.spans)
        assert max(ids.values()) == 1, (
            f"a span was exported twice: {[s.name for s in self.spans if ids[s.context.span_id] > 1]}"
        )
        roots = [s for s in self.spans if s.parent is None]
        assert len(roots) == 1, f"{len(roots)} roots: {[r.name for r in roots]}"
        for span in self.spans:
            self.parent_of(span)
        return roots[0]
