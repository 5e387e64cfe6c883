"""The jobs every framework runs, and what the shared model answers them (bench/peers/fake_llm.py).

A job is named by the model string each framework is given: `peers-<shape>-<calls>-<size>-<ms>`.
The one local model server reads it from every request, so all frameworks get the same replies:

- `seq`: while the conversation holds fewer than `calls` tool results, one call of `fetch_record`
  with `{"index": k, "size": size, "ms": ms}` (k = results so far); then a text answer.
  `calls` tool calls and `calls + 1` model calls in all.
- `fan`: with no tool result yet, `calls` calls of `fetch_record` in one answer (indexes
  0..calls-1, to run in parallel); then a text answer. Two model calls.
- A planning request (Stratagem's planner: `response_format` is the JSON schema named `plan`): the
  same tool calls as a plan. `seq` is a chain `r0 -> r1 -> ...`, `fan` has no dependencies.

`fetch_record` (bench/peers/tools.py) returns `size` characters, and waits `ms` milliseconds after
recording its effect.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

TOOL = "fetch_record"
PROMPT = "Fetch the records, one call of fetch_record per record, with the arguments you are given."
_MODEL = re.compile(r"^peers-(?P<shape>seq|fan)-(?P<calls>\d+)-(?P<size>\d+)-(?P<ms>\d+)$")


@dataclass(frozen=True)
class Job:
    shape: str  # "seq" or "fan"
    calls: int  # tool calls
    size: int  # characters each tool call returns
    ms: int = 0  # milliseconds each tool call takes (after its effect)

    @property
    def model(self) -> str:
        """The model name every framework sends; the fake server's script for this job."""
        return f"peers-{self.shape}-{self.calls}-{self.size}-{self.ms}"

    @property
    def model_calls(self) -> int:
        return self.calls + 1 if self.shape == "seq" else 2

    @classmethod
    def of_model(cls, model: str) -> Job | None:
        match = _MODEL.match(model.rsplit("/", 1)[-1])
        if match is None:
            return None
        return cls(match["shape"], int(match["calls"]), int(match["size"]), int(match["ms"]))

    def args(self, index: int) -> dict[str, int]:
        return {"index": index, "size": self.size, "ms": self.ms}

    def next_calls(self, tool_results: int) -> list[dict[str, int]]:
        """The tool calls the model makes when the conversation holds `tool_results` results
        (empty: it answers in text)."""
        if self.shape == "seq":
            return [self.args(tool_results)] if tool_results < self.calls else []
        return [self.args(i) for i in range(self.calls)] if tool_results == 0 else []

    def answer(self, tool_results: int) -> str:
        return f"done: {tool_results} records fetched"

    def plan(self) -> dict[str, Any]:
        """The plan Stratagem's planner gets: the same tool calls as steps."""
        steps = []
        for i in range(self.calls):
            depends = [f"r{i - 1}"] if self.shape == "seq" and i else []
            steps.append(
                {"id": f"r{i}", "title": f"fetch record {i}", "tool": TOOL, "args": self.args(i), "depends_on": depends}
            )
        return {"goal": f"fetch {self.calls} records", "steps": steps, "reason": "one step per record"}


# The jobs of `python -m bench --only peers`, full and quick (bench/peers/__init__.py).
JOBS = {
    "tool_heavy": Job("seq", 20, 20_000),
    "tool_heavy_200": Job("seq", 200, 20_000),
    "long_horizon": Job("seq", 99, 4_000),  # 100 model calls
    "parallel": Job("fan", 8, 1_000, 1_000),
    "crash": Job("seq", 20, 20_000, 300),
}
QUICK_JOBS = {
    "tool_heavy": Job("seq", 5, 20_000),
    "tool_heavy_200": Job("seq", 40, 20_000),
    "long_horizon": Job("seq", 19, 4_000),
    "parallel": Job("fan", 4, 1_000, 500),
    "crash": Job("seq", 8, 20_000, 300),
}
ALL_JOBS = sorted({*JOBS.values(), *QUICK_JOBS.values()}, key=lambda j: j.model)
