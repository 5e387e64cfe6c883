"""Execution activities: one per step attempt, for tool steps and llm steps.

Outputs above the inline limit, and every executor transcript, go to the output store; the
step's record keeps a reference. Inputs that refer to stored outputs are loaded here, where
I/O is allowed, never in the workflow.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from temporalio import activity

from stratagem.common.config import WORKSPACE_ROOTS_ENV
from stratagem.common.errors import ConfigError
from stratagem.common.telemetry import attempt_span
from stratagem.domain import activity_io
from stratagem.domain.references import resolve_step
from stratagem.io.executor import AwaitingApproval, Executor, ExecutorProgress
from stratagem.io.store import OutputStore, default_store, externalize, hydrate, store_value
from stratagem.io.verifier import Verifier
from stratagem.models import load_model
from stratagem.models.base import request_timeout_default
from stratagem.tools import ToolContext, ToolRegistry
from stratagem.tools.outcome import outcome_unknown

from .checkpoint import Checkpoint, request_timeout
from .errors import as_application_error
from .llm_progress import ProgressSlot


class ExecutionActivities:
    def __init__(
        self, registry: ToolRegistry, workspace: Path, store: OutputStore | None = None, heartbeat_every: float = 5.0
    ):
        self._registry = registry
        self._workspace = workspace
        self._store = store or default_store()
        self._heartbeat_every = heartbeat_every

    def _workspace_of(self, requested: str | None) -> Path:
        """The run's own workspace if it names one this worker allows, else the worker's."""
        if requested is None:
            return self._workspace
        wanted = Path(requested)
        roots = [Path(r).resolve() for r in os.environ.get(WORKSPACE_ROOTS_ENV, "").split(os.pathsep) if r.strip()]
        if wanted.is_absolute() and wanted.resolve() == self._workspace.resolve():
            return self._workspace
        if not wanted.is_absolute() or not any(wanted.resolve().is_relative_to(root) for root in roots):
            raise ConfigError(
                f"the run asks for workspace {requested}, which this worker does not allow; "
                f"list it (or a folder above it) in {WORKSPACE_ROOTS_ENV} on the worker"
            )
        return wanted.resolve()

    @activity.defn(name=activity_io.RUN_TOOL)
    async def run_tool(self, request: activity_io.ToolStepInput) -> activity_io.StepOutput:
        with attempt_span(*_attempt(request.run_id, request.step_id, request.revision, "tool")):
            return await self._run_tool(request)

    async def _run_tool(self, request: activity_io.ToolStepInput) -> activity_io.StepOutput:
        info = activity.info()
        # Level 10 counts a reconcilable or irreversible tool's attempts in the workflow, one per
        # activity; the tool sees that count, as it saw Temporal's.
        attempt = request.attempt or info.attempt
        # Until the check has said "no effect", a failure leaves the earlier attempt's outcome unknown.
        checking = request.reconcile_first
        try:
            context = ToolContext(
                run_id=request.run_id,
                step_id=request.step_id,
                revision=request.revision,
                attempt=attempt,
                workspace=self._workspace_of(request.workspace),
                execution_id=request.execution_id,
            )
            match request.arguments:
                case activity_io.ResolvedArgs(values):
                    args = hydrate(self._store, values)
                case activity_io.TemplateArgs(templates, outputs):
                    args, _ = resolve_step(hydrate(self._store, templates), "", hydrate(self._store, outputs))
            checkpoint = Checkpoint(self._heartbeat_every)
            if request.reconcile_first:
                # An earlier attempt may have had its effect: the check says, with the same
                # arguments and key, before the tool may run again.
                found = await checkpoint.run(self._registry.reconcile(request.tool, args, context))
                if found is not None:
                    found = externalize(self._store, _key(request.run_id, request.step_id), found)
                    return activity_io.StepOutput(output=found, attempt=attempt, reconciled=True)
                if request.check_only:
                    return activity_io.StepOutput(attempt=attempt)
                checking = False  # no effect: from here on, the tool's own attempt
            output = await checkpoint.run(self._registry.invoke(request.tool, args, context))
            output = externalize(self._store, _key(request.run_id, request.step_id), output)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # What the workflow needs to tell "it did not happen" from "it may have" (level 10).
            said = {"reconcile_failed": True} if checking else {"outcome_unknown": True} if outcome_unknown(exc) else {}
            raise as_application_error(exc, **said)  # its cause is a redacted copy (activities/errors.py)
        return activity_io.StepOutput(output=output, attempt=attempt)

    @activity.defn(name=activity_io.RUN_LLM)
    async def run_llm(self, request: activity_io.LlmStepInput) -> activity_io.StepOutput:
        """Run the step's executor loop. Each round is checkpointed, so a retry resumes the
        conversation and the usage of every attempt is reported, whether the step ends well or not.

        Before a tool call that needs a person's approval, and for which `call_decisions` holds no
        decision, the loop stops: the output then has `awaiting` (the call) and `resume` (the
        progress, always in the store), and no `output`. Dispatching the step again with that
        `resume` and the decision goes on from the same call. The model and tool calls an output
        or a failure reports are those made since the dispatch began: a pause reported its own."""
        with attempt_span(*_attempt(request.run_id, request.step.id, request.revision, "llm", request.model)):
            return await self._run_llm(request)

    async def _run_llm(self, request: activity_io.LlmStepInput) -> activity_io.StepOutput:
        info = activity.info()
        checkpoint = Checkpoint(self._heartbeat_every)
        key = _key(request.run_id, request.step.id)
        slot = ProgressSlot(self._store, key)
        progress = ExecutorProgress()
        if request.resume is None and request.call_decisions:
            # Call ids are positions in one conversation: a fresh one starts again at 0, where a
            # decision about an earlier conversation's call must not approve a different call.
            activity.logger.warning("ignoring call decisions sent without the conversation they decide on")
            request = request.model_copy(update={"call_decisions": {}})
        try:
            progress = slot.resume(checkpoint.previous(), request)
            request = _materialized(request, self._store)
            verifier = None
            if request.step.success_criteria:
                judge = request.verifier or request.model
                verifier = Verifier(
                    load_model(
                        judge,
                        price=request.verifier_price if request.verifier else request.price,
                        capabilities=request.capabilities.get(judge),
                        fallbacks=request.fallbacks.get(judge, ()),
                        fallback_capabilities=request.capabilities,
                    ),
                    judge,
                    attempt=info.attempt,
                    request_timeout=_request_timeout,
                    before_call=lambda request: executor.check_allowance(request),
                    after_call=lambda request, response: executor.check_answer(request, response),
                )
            executor = Executor(
                load_model(
                    request.model,
                    price=request.price,
                    capabilities=request.capabilities.get(request.model),
                    fallbacks=request.fallbacks.get(request.model, ()),
                    fallback_capabilities=request.capabilities,
                ),
                request,
                self._registry,
                workspace=self._workspace_of(request.workspace),
                attempt=info.attempt,
                progress=progress,
                save=lambda p: checkpoint.save(slot.details(p)),
                request_timeout=_request_timeout,
                verifier=verifier,
            )
            # At once: the attempt's first heartbeat, which the SDK does not hold back, takes the
            # reference to the stored progress to the server before any round the store could lose.
            executor.save(progress)
            try:
                output = await checkpoint.run(executor.run())
            except AwaitingApproval as paused:
                # Not a failure: the step waits for a person. The progress goes to the store, not
                # history (a conversation can be large), and the next dispatch goes on from it.
                resume = store_value(self._store, f"{key}/progress", progress.model_dump(mode="json"))
                return activity_io.StepOutput(
                    attempt=info.attempt,
                    model=request.model,
                    calls=progress.new_calls,
                    tool_calls=progress.new_tool_calls,
                    awaiting=paused.awaited,
                    resume=resume,
                    negotiated=progress.negotiated,
                    failovers=progress.failovers,
                )
            output = externalize(self._store, key, output)
            transcript = _transcript(self._store, key, progress)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # What this attempt did reaches the next attempt (the checkpoint) and, if none
            # follows, the workflow (the failure's details).
            checkpoint.save(slot.details(progress))
            raise as_application_error(
                exc,
                calls=[c.model_dump(mode="json") for c in progress.new_calls],
                tool_calls=[t.model_dump(mode="json") for t in progress.new_tool_calls],
            )
        return activity_io.StepOutput(
            output=output,
            attempt=info.attempt,
            model=request.model,
            calls=progress.new_calls,
            tool_calls=progress.new_tool_calls,
            transcript=transcript,
            negotiated=progress.negotiated,
            failovers=progress.failovers,
        )


def _request_timeout() -> float | None:
    """One model request's time limit, cut to end before the attempt's (activities/checkpoint.py)."""
    return request_timeout(request_timeout_default())


def _attempt(
    run_id: str, step_id: str, revision: int, kind: str, model: str | None = None
) -> tuple[str, dict[str, Any]]:
    """The name and attributes of a step attempt's span."""
    attempt = activity.info().attempt
    attributes: dict[str, Any] = {
        "stratagem.run_id": run_id,
        "stratagem.step.id": step_id,
        "stratagem.step.kind": kind,
        "stratagem.revision": revision,
        "stratagem.attempt": attempt,
    }
    if model:
        attributes["stratagem.model"] = model
    return f"step {step_id} attempt {attempt}", attributes


def _key(run_id: str, step_id: str) -> str:
    return f"runs/{run_id}/{step_id}"


def _materialized(request: activity_io.LlmStepInput, store: OutputStore) -> activity_io.LlmStepInput:
    """The request with stored inputs loaded and deferred references resolved: the workflow
    resolves them itself when every output they name is in its ledger; otherwise it sends the
    outputs named, and they are resolved here, where the store is read."""
    match request.instructions_given:
        case activity_io.ResolvedInstructions(text):
            instructions = text
        case activity_io.TemplateInstructions(template, outputs):
            _, instructions = resolve_step({}, template, hydrate(store, outputs))
    inputs = hydrate(store, request.inputs)
    return request.model_copy(update={"inputs": inputs, "instructions": instructions, "references": None})


def _transcript(store: OutputStore, key: str, progress: ExecutorProgress) -> dict[str, Any] | None:
    """The conversation, in the store: audits can read it, history only holds its reference."""
    if not progress.messages:
        return None
    return store_value(store, f"{key}/transcripts", [m.model_dump(mode="json") for m in progress.messages])
