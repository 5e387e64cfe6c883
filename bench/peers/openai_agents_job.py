"""The peers' jobs on the OpenAI Agents SDK under Temporal's OpenAI Agents plugin
(temporalio-openai-agents, imported as `temporalio.contrib.openai_agents`), set up as its README shows.

- The client carries `OpenAIAgentsPlugin(model_params=ModelActivityParameters(start_to_close_timeout=...),
  model_provider=OpenAIProvider(openai_client=AsyncOpenAI(base_url=PEERS_LLM_URL, ...), use_responses=False))`:
  its payload converter, and, on a worker built from that client, the model activity (every model call runs
  as the activity `invoke_model_activity` with that provider), the agents runner that routes model calls to
  it, and the sandbox passthrough of `agents`/`openai`.
- The workflow builds the `Agent` (model name = the job's, passed to the provider unchanged; the fake
  server reads the job from it) with one tool: the activity `fetch_record`, made a tool by `activity_as_tool`.
  `Runner.run(agent, PROMPT, max_turns=...)` returns the final text.

The starter (`start`) and the worker both use `client_plugins()`; the model provider only matters where
the model activity runs, the worker, which must have PEERS_LLM_URL.
"""

from __future__ import annotations

import os

# No trace export to OpenAI's servers: read when the SDK's (and the plugin's) trace provider is first used.
os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")

from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from importlib.metadata import version
from typing import Any

from temporalio import activity, workflow
from temporalio.client import Client, WorkflowHandle

with workflow.unsafe.imports_passed_through():
    from agents import Agent, Runner, set_tracing_disabled
    from agents.models.openai_provider import OpenAIProvider
    from openai import AsyncOpenAI
    from temporalio.contrib.openai_agents import ModelActivityParameters, OpenAIAgentsPlugin
    from temporalio.contrib.openai_agents.workflow import activity_as_tool

    from . import tools
    from .jobs import PROMPT, Job

LLM_URL_ENV = "PEERS_LLM_URL"
VERSION = f"openai-agents {version('openai-agents')} + temporalio-openai-agents {version('temporalio-openai-agents')}"

# The README's examples: 30 s for a model call (ModelActivityParameters), 10 s for an activity tool
# (activity_as_tool(get_weather, start_to_close_timeout=timedelta(seconds=10))). Retry policy: Temporal's
# default (unlimited attempts, 1 s doubling to 100 s), as in the README.
MODEL_TIMEOUT = timedelta(seconds=30)
TOOL_TIMEOUT = timedelta(seconds=10)
# fetch_record is a plain (blocking) function, so a sync activity: the worker needs a thread pool, and the
# default one (min(32, cpus + 4) threads: 6 here) would hold back an 8-call fan-out.
TOOL_THREADS = 32

NOTES = [
    "max_turns = the job's model calls (Runner.run's default is 10; past it MaxTurnsExceeded fails the workflow TASK, "
    "which Temporal retries forever: the run hangs instead of failing)",
    f"model activity start_to_close_timeout={MODEL_TIMEOUT.total_seconds():.0f}s, as in the README "
    "(a custom model_provider must set one; the plugin refuses it without)",
    f"tool activity start_to_close_timeout={TOOL_TIMEOUT.total_seconds():.0f}s, as in the README's activity_as_tool "
    "example; no heartbeat, so after a worker SIGKILL mid-tool this timeout bounds when Temporal retries it "
    "(default retry policy)",
    "AsyncOpenAI(max_retries=0): retries are Temporal's (the model activity's default retry policy)",
    f"fetch_record is a sync activity: Worker(activity_executor=ThreadPoolExecutor({TOOL_THREADS}))",
    "the 8 tool calls of one model answer run concurrently (the SDK starts all function tools of a turn at once; "
    "each is its own activity)",
    "tracing off: OPENAI_AGENTS_DISABLE_TRACING=1 and agents.set_tracing_disabled(True) (else it exports to OpenAI)",
    "use_responses=False: chat.completions (the local server has no Responses API)",
    "every model activity's input is the whole conversation, so history grows quadratically; past the server's "
    "50 MB history limit the server terminates the workflow (TerminatedError), it does not hang",
    "no continue-as-new: the plugin documents none (Runner.run is one workflow; its whole conversation is every "
    "model activity's input); nor external payload storage (temporalio's DataConverter(external_storage=...) "
    "exists, the plugin's README does not mention it); neither used",
]


@activity.defn
def fetch_record(index: int, size: int, ms: int) -> str:
    """Fetch record `index`: `size` characters."""
    return tools.fetch_record(index, size, ms)


@workflow.defn
class RecordsAgent:
    @workflow.run
    async def run(self, model: str, max_turns: int) -> str:
        agent = Agent(
            name="records",
            instructions="Fetch the records you are asked for with fetch_record.",
            model=model,
            tools=[activity_as_tool(fetch_record, start_to_close_timeout=TOOL_TIMEOUT)],
        )
        result = await Runner.run(agent, PROMPT, max_turns=max_turns)
        return str(result.final_output)


def client_plugins() -> list[Any]:
    set_tracing_disabled(True)
    # The provider is used only by the model activity, on the worker; a starter without PEERS_LLM_URL
    # gets one that is never called.
    base_url = os.environ.get(LLM_URL_ENV, "http://127.0.0.1:9/v1")
    provider = OpenAIProvider(
        openai_client=AsyncOpenAI(base_url=base_url, api_key="not-used", max_retries=0), use_responses=False
    )
    return [
        OpenAIAgentsPlugin(
            model_params=ModelActivityParameters(start_to_close_timeout=MODEL_TIMEOUT), model_provider=provider
        )
    ]


def worker_options() -> dict[str, Any]:
    """The plugin on the worker's client registers the model activity; this adds the workflow and the tool."""
    if not os.environ.get(LLM_URL_ENV):
        raise RuntimeError(f"{LLM_URL_ENV} must name the model server")
    set_tracing_disabled(True)
    return {
        "workflows": [RecordsAgent],
        "activities": [fetch_record],
        "activity_executor": ThreadPoolExecutor(max_workers=TOOL_THREADS),
    }


async def start(client: Client, job: Job, *, workflow_id: str, task_queue: str) -> WorkflowHandle[Any, Any]:
    return await client.start_workflow(
        RecordsAgent.run, args=[job.model, job.model_calls], id=workflow_id, task_queue=task_queue
    )
