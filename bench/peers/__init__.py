"""peers: the same agent jobs on Stratagem and on the agent frameworks that run on Temporal.

The frameworks (the `bench-peers` extra, pinned): pydantic-ai's durable agent
(`pydantic_ai.durable_exec.temporal`) and the OpenAI Agents SDK on Temporal's plugin
(`temporalio.contrib.openai_agents`), each used as its documentation says
(bench/peers/pydantic_ai_job.py, bench/peers/openai_agents_job.py), and Stratagem two ways
(bench/peers/stratagem_job.py): planned (its way: a plan of tool steps) and joint (one model in
a tool-calling loop, the peers' shape). One dev server, one local model server that answers all
of them alike (bench/peers/fake_llm.py), one tool (bench/peers/tools.py), a fresh worker process
per framework and job (bench/peers/harness.py). The jobs (bench/peers/jobs.py):

1. tool-heavy: 20 tool calls in sequence, 20 KB each; and the same with 200 calls;
2. long horizon: 100 model calls, the conversation growing by 4 KB a call;
3. parallel: 8 independent tool calls of 1 s each (critical path: 1 s);
4. crash: tool-heavy with 0.3 s calls, the worker SIGKILLed while the 10th call runs.

Rows are Stratagem (planned, and joint where it differs) ÷ the best peer at that figure.
"""

from __future__ import annotations

from typing import Any

NAME = "peers"
FRAMEWORKS = ("pydantic_ai", "temporalio.openai_agents", "agents")
INSTALL = "pip install -e '.[bench-peers]'"


def missing() -> str | None:
    """What the measure needs that is not installed: the agent frameworks of the extra."""
    import importlib.util

    absent = [name for name in FRAMEWORKS if importlib.util.find_spec(name) is None]
    return f"needs the agent frameworks ({', '.join(absent)} missing): {INSTALL}" if absent else None


async def run(bench: Any) -> dict[str, Any]:
    # Imported here, not above: the peers' workflow sandboxes re-import this package with the
    # job modules, and the measure's imports (Stratagem's client, its crypto) must stay out.
    from .measure import run as measure

    return dict(await measure(bench))
