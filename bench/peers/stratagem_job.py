"""Stratagem's side of the peers bench: the job as a run, the way Stratagem's docs say.

Two ways, both on the same worker (`python -m bench.peers.worker stratagem`, which is
`python worker.py --tools bench.peers.tools`):

- **planned** (Stratagem's way): the planner, a model, writes the task graph in one call (the
  model server answers a planning request with the job's tool calls as steps), the plan is
  approved (`auto_approve`: the peers have no review, so this run approves itself), and each
  step runs as its own activity, the independent ones in parallel (`max_parallel` raised to the
  fan-out). Tool calls: the job's; model calls: one.
- **joint**: one model in a tool-calling loop (`mode: joint`), the agent the peers run: the job's
  tool calls and as many model calls as the peers make, all in one llm step (one activity that
  checkpoints its conversation after every round); the calls of one answer run at once
  (`max_parallel` raised to the fan-out, as for planned).

Both read the model from the job's model string at the local server (`openai:<job.model>@URL`):
the URL in the string, so the worker sends no API key.
"""

from __future__ import annotations

import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

from temporalio.client import Client, WorkflowHandle

from stratagem.client import start_run
from stratagem.domain.run_options import Mode
from stratagem.domain.run_types import RunInput, RunOptions

from .jobs import PROMPT, Job


def _version() -> str:
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).parent, capture_output=True, text=True
    ).stdout.strip()
    return f"stratagem {metadata.version('stratagem')} (commit {commit or 'unknown'})"


VERSION = _version()
NOTES = [
    "planned: the plan approves itself (auto_approve); a person's review is Stratagem's way, and the peers have no "
    "construct for it",
    "max_parallel set to the fan-out: planned, the steps running at once; joint, the calls of one model answer "
    "(the default runs 4 at once)",
    "joint: max_tool_rounds set to the job's model calls (default 12)",
    "fetch_record is declared with a reconcile check (it reads the effect log by idempotency key): an attempt of "
    "unknown outcome is checked before it is retried",
]


def options(job: Job, llm_url: str, *, joint: bool) -> RunOptions:
    model = f"openai:{job.model}@{llm_url}"
    if joint:
        return RunOptions(
            mode=Mode.joint,
            executor=model,
            joint_tools=["fetch_record"],
            max_tool_rounds=job.model_calls,
            auto_approve=True,
            max_parallel=_parallel(job),
        )
    return RunOptions(planner=model, auto_approve=True, max_parallel=_parallel(job))


def _parallel(job: Job) -> int:
    """The fan-out, as many calls at once as the job asks for in one go (the default runs 4)."""
    return max(4, job.calls if job.shape == "fan" else 1)


async def start(
    client: Client, job: Job, *, workflow_id: str, task_queue: str, llm_url: str, joint: bool
) -> WorkflowHandle[Any, Any]:
    run = RunInput(goal=PROMPT, options=options(job, llm_url, joint=joint))
    handle = await start_run(client, run, task_queue=task_queue, run_id=workflow_id)
    return handle.handle
