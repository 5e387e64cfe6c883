"""Execution activities: one per step attempt, for tool steps and llm steps."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from temporalio import activity

from stratagem import activity_io as io
from stratagem.errors import ToolError
from stratagem.executor import Executor, ExecutorProgress
from stratagem.models import load_model
from stratagem.models.base import request_timeout_default
from stratagem.tools import ToolContext, ToolRegistry

from .checkpoint import MAX_CHECKPOINT_BYTES, Checkpoint, request_timeout
from .errors import as_application_error

# Step outputs live in workflow history and in the state continue-as-new carries, so one
# output may not crowd out the rest. Larger results belong in a file or a store, with the
# step returning a reference (for example the path `write_file` returns).
MAX_OUTPUT_BYTES = 128 * 1024


class ExecutionActivities:
    def __init__(self, registry: ToolRegistry, workspace: Path, heartbeat_every: float = 5.0):
        self._registry = registry
        self._workspace = workspace
        self._heartbeat_every = heartbeat_every

    @activity.defn(name=io.RUN_TOOL)
    async def run_tool(self, request: io.ToolStepInput) -> io.StepOutput:
        info = activity.info()
        context = ToolContext(
            run_id=request.run_id,
            step_id=request.step_id,
            revision=request.revision,
            attempt=info.attempt,
            workspace=self._workspace,
            execution_id=request.execution_id,
        )
        try:
            output = await Checkpoint(self._heartbeat_every).run(self._registry.invoke(request.tool, request.args, context))
            _check_size(output, request.step_id)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            raise as_application_error(exc) from exc
        return io.StepOutput(output=output, attempt=info.attempt)

    @activity.defn(name=io.RUN_LLM)
    async def run_llm(self, request: io.LlmStepInput) -> io.StepOutput:
        """Run the step's executor loop. Each round is checkpointed, so a retry resumes the
        conversation and the usage of every attempt is reported, whether the step ends well or not."""
        info = activity.info()
        checkpoint = Checkpoint(self._heartbeat_every)
        progress = _resume(checkpoint.previous())
        try:
            executor = Executor(
                load_model(request.model),
                request,
                self._registry,
                workspace=self._workspace,
                attempt=info.attempt,
                progress=progress,
                save=lambda p: checkpoint.save(_checkpoint_of(p)),
                request_timeout=lambda: request_timeout(request_timeout_default()),
            )
            output = await checkpoint.run(executor.run())
            _check_size(output, request.step.id)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # What this attempt did reaches the next attempt (the checkpoint) and, if none
            # follows, the workflow (the failure's details).
            checkpoint.save(_checkpoint_of(progress))
            raise as_application_error(
                exc,
                calls=[c.model_dump(mode="json") for c in progress.calls],
                tool_calls=[t.model_dump(mode="json") for t in progress.tool_calls],
            ) from exc
        return io.StepOutput(
            output=output, attempt=info.attempt, model=request.model, calls=progress.calls, tool_calls=progress.tool_calls
        )


def _resume(previous: Any) -> ExecutorProgress:
    if previous is None:
        return ExecutorProgress()
    try:
        return ExecutorProgress.model_validate(previous)
    except ValidationError:
        activity.logger.warning("ignoring an unreadable checkpoint from the previous attempt")
        return ExecutorProgress()


def _checkpoint_of(progress: ExecutorProgress) -> dict[str, Any]:
    """The progress as heartbeat details; without the conversation if that is too large (the next
    attempt then starts the conversation again, still counting the calls already made)."""
    data = progress.model_dump(mode="json")
    if len(json.dumps(data)) > MAX_CHECKPOINT_BYTES:
        data["messages"] = []
    return data


def _check_size(output: Any, step_id: str) -> None:
    size = len(json.dumps(output, default=str).encode("utf-8"))
    if size > MAX_OUTPUT_BYTES:
        raise ToolError(
            f"step '{step_id}' produced {size // 1024} KiB of output, above the {MAX_OUTPUT_BYTES // 1024} KiB limit "
            "for a step's output; write large results to a file and return its path",
            retryable=False,
        )
