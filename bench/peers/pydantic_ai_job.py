"""The peers jobs on pydantic-ai's durable agent (`pydantic_ai.durable_exec.temporal`), as its docs say.

An `Agent` with the `TemporalDurability` capability, a workflow subclassing `PydanticAIWorkflow`
that lists it in `__pydantic_ai_agents__`, and `PydanticAIPlugin` on the client (its Pydantic
payload converter and sandbox passthrough; the worker inherits it and registers the agent's model
and tool activities). `fetch_record` is the agent's tool (`Agent(tools=[...])`), so each call is
an activity. The model is `OpenAIChatModel` over `OpenAIProvider` at PEERS_LLM_URL; the job's model
name is chosen per run with `agent.run(model=<name>)`, built on the worker by a `ResolveModelId`
capability (the docs' way to give a model-name string a custom provider in durable mode).

Long runs continue as new the way the docs say: `TemporalDurability(continue_as_new=handler)` is
called before a model request when Temporal suggests it, and the handler continues with no prompt
and the run's `ctx.messages` and `ctx.usage`.
"""

from __future__ import annotations

import os
from importlib.metadata import version
from typing import Any

from temporalio import workflow
from temporalio.client import Client, WorkflowHandle

with workflow.unsafe.imports_passed_through():
    from openai import AsyncOpenAI
    from pydantic_ai import Agent, ModelMessage, RunContext, RunUsage, UsageLimits
    from pydantic_ai.capabilities import ResolveModelId
    from pydantic_ai.durable_exec.temporal import PydanticAIPlugin, PydanticAIWorkflow, TemporalDurability
    from pydantic_ai.models import Model, ModelResolutionContext
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    from .jobs import PROMPT, Job
    from .tools import fetch_record

LLM_URL_ENV = "PEERS_LLM_URL"
VERSION = f"pydantic-ai-slim {version('pydantic-ai-slim')} (pydantic_ai.durable_exec.temporal)"
NOTES = [
    "UsageLimits(request_limit=None) on every run: the default request_limit=50 ends a run of more than 50 model calls.",
    "continue-as-new: TemporalDurability(continue_as_new=handler), called before a model request when Temporal "
    "suggests it; the handler continues with no prompt, ctx.messages and ctx.usage, so each new run's input, and "
    "its first model activity's input, carry the whole conversation so far.",
    "model per job: agent.run(model=job.model) with a ResolveModelId capability that builds "
    "OpenAIChatModel(name, OpenAIProvider(AsyncOpenAI(base_url=PEERS_LLM_URL, api_key='not-used', max_retries=0))) "
    "on the worker; max_retries=0 because the docs advise leaving retries to Temporal.",
    "activity timeouts: the defaults (start_to_close 60 s for every activity, heartbeat_timeout 30 s on model "
    "activities only, unlimited retries). A worker killed mid-tool is recovered when the tool activity's "
    "60 s start_to_close_timeout expires and Temporal retries it; the tool ran once more then (at-least-once).",
    "parallel tool calls: the 8 calls of one model answer are scheduled together as 8 activities and run "
    "concurrently (the agent's default; the sync tool runs in a thread of the activity worker).",
    "no construct for keeping tool results or model inputs out of history: every model activity's input holds the "
    "whole conversation, so history grows quadratically with 20 KB results; the docs' remedy is Temporal's "
    "external storage (a DataConverter storage driver, public preview), not used here.",
    "continue-as-new does not bound the payloads: its input carries the whole conversation, and at 20 KB results it "
    "passes Temporal's 2 MB payload limit after 97 tool calls (the 200-call job cannot complete).",
    "a payload over the 2 MB limit fails the workflow TASK, retried indefinitely (the docs warn of it), and "
    "pydantic-ai has no setting to fail the run instead; so the worker sets Temporal's "
    "Worker(disable_payload_error_limit=True): the oversized command reaches the server, which terminates the "
    "workflow (BadContinueAsNewAttributes ... exceeds size limit) instead of the run hanging.",
]


def _llm_url() -> str:
    # Only the worker process sends requests; a process that only starts workflows needs no URL.
    return os.environ.get(LLM_URL_ENV, "http://127.0.0.1:9/v1")


_PROVIDER = OpenAIProvider(openai_client=AsyncOpenAI(base_url=_llm_url(), api_key="not-used", max_retries=0))


def _job_model(ctx: ModelResolutionContext[None], model_id: str) -> Model | None:
    """The model a job's name selects: that name, on the peers' model server."""
    if Job.of_model(model_id) is None:
        return None
    return OpenAIChatModel(model_id, provider=_PROVIDER)


def _continue_as_new(ctx: RunContext[None]) -> None:
    """Continue the workflow as new with the conversation so far (the docs' handler)."""
    workflow.continue_as_new(args=[ctx.model.model_name, ctx.messages, ctx.usage])


agent = Agent(
    OpenAIChatModel("peers-default", provider=_PROVIDER),  # every run passes its job's model
    name="peers",
    tools=[fetch_record],
    capabilities=[ResolveModelId(_job_model), TemporalDurability(continue_as_new=_continue_as_new)],
)


@workflow.defn(name="PeersPydanticAI")
class PeersPydanticAIWorkflow(PydanticAIWorkflow):
    __pydantic_ai_agents__ = [agent]

    @workflow.run
    async def run(self, model: str, messages: list[ModelMessage] | None = None, usage: RunUsage | None = None) -> str:
        result = await agent.run(
            None if messages else PROMPT,
            model=model,
            message_history=messages,
            usage=usage,
            usage_limits=UsageLimits(request_limit=None),
        )
        return result.output


def client_plugins() -> list[Any]:
    return [PydanticAIPlugin()]


def worker_options() -> dict[str, Any]:
    """The worker's registrations: the workflow (the plugin adds the agent's activities), and the
    server's payload check in place of the worker's, so an oversized payload ends the run (NOTES)."""
    return {"workflows": [PeersPydanticAIWorkflow], "disable_payload_error_limit": True}


async def start(client: Client, job: Job, *, workflow_id: str, task_queue: str) -> WorkflowHandle[Any, Any]:
    return await client.start_workflow(
        PeersPydanticAIWorkflow.run, args=[job.model], id=workflow_id, task_queue=task_queue
    )
