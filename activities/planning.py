"""Planning activities: the tool catalogue, the planner model call, the final synthesis."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

from pydantic import ValidationError
from temporalio import activity

from stratagem.common.telemetry import attempt_span
from stratagem.domain import activity_io
from stratagem.domain.identity_cache import ByIdentity
from stratagem.domain.secret_bindings import binding_variables, bindings_from_env
from stratagem.domain.usage import CallUsage
from stratagem.io.notify import NotifyConfig
from stratagem.io.planner import Progress, plan_with_repairs
from stratagem.io.store import OutputStore, default_store, hydrate
from stratagem.io.verifier import goal_verdict
from stratagem.models import Message, ModelRequest, Purpose, load_model
from stratagem.models.base import request_timeout_default
from stratagem.tools import ToolCatalog, ToolRegistry

from .checkpoint import Checkpoint, request_timeout
from .errors import as_application_error


class PlanningActivities:
    def __init__(self, registry: ToolRegistry, store: OutputStore | None = None):
        self._registry = registry
        self._store = store or default_store()

    @activity.defn(name=activity_io.DESCRIBE_TOOLS)
    async def describe_tools(self) -> ToolCatalog:
        return _as_served(self._registry.catalog())

    @activity.defn(name=activity_io.PLAN)
    async def plan(self, request: activity_io.PlanningInput) -> activity_io.PlanningOutput:
        with attempt_span(f"planner attempt {activity.info().attempt}", _attributes(request.model)):
            return await self._plan(request)

    async def _plan(self, request: activity_io.PlanningInput) -> activity_io.PlanningOutput:
        checkpoint = Checkpoint()
        spent = _spent_before(checkpoint)

        def record(call: CallUsage) -> None:
            # Checkpointed at once, so a retried attempt still counts what this one spent.
            spent.append(call)
            checkpoint.save({"calls": [c.model_dump(mode="json") for c in spent]})

        try:
            model = load_model(
                request.model, price=request.price, capabilities=request.capabilities, fallbacks=request.fallbacks
            )
            progress = None
            if request.current is not None:
                progress = Progress(
                    plan=request.current,
                    records=request.records,
                    failure=request.failure or "",
                    history=request.history,
                )
            outcome = await checkpoint.run(
                plan_with_repairs(
                    model,
                    request.goal,
                    request.catalog,
                    progress=progress,
                    max_repairs=request.max_repairs,
                    first_call_index=request.first_call_index,
                    has_executor=request.has_executor,
                    tiers=request.tiers,
                    approvers=request.approvers,
                    groups=request.groups,
                    model_name=request.model,
                    on_call=record,
                    activity_attempt=activity.info().attempt,
                    request_timeout=lambda: request_timeout(request_timeout_default()),
                )
            )
        except Exception as exc:
            raise as_application_error(exc, calls=[c.model_dump(mode="json") for c in spent])
        return activity_io.PlanningOutput(
            draft=outcome.draft,
            model=outcome.model,
            calls=outcome.calls,
            usage=outcome.usage,
            rejected_attempts=outcome.rejected_attempts,
            call_usage=spent,
            negotiated=outcome.negotiated,
            failovers=outcome.failovers,
            repairs=outcome.repairs,
        )

    @activity.defn(name=activity_io.SYNTHESIZE)
    async def synthesize(self, request: activity_io.SynthesisInput) -> activity_io.SynthesisOutput:
        with attempt_span(f"synthesis attempt {activity.info().attempt}", _attributes(request.model)):
            return await self._synthesize(request)

    async def _synthesize(self, request: activity_io.SynthesisInput) -> activity_io.SynthesisOutput:
        try:
            model = load_model(
                request.model, price=request.price, capabilities=request.capabilities, fallbacks=request.fallbacks
            )
            outputs = json.dumps(hydrate(self._store, request.outputs), indent=1, default=str, ensure_ascii=False)
            attempt = activity.info().attempt
            response = await model.complete(
                ModelRequest(
                    purpose=Purpose.synthesize,
                    messages=[
                        Message(
                            role="system",
                            content="Summarise the outcome of a finished business process for the person who asked for it.",
                        ),
                        Message(role="user", content=f"Goal: {request.goal}\n\nResults of the final steps:\n{outputs}"),
                    ],
                    attempt=attempt,
                    timeout_seconds=request_timeout(request_timeout_default()),
                )
            )
        except Exception as exc:
            raise as_application_error(exc)  # its cause is a redacted copy (activities/errors.py)
        call = CallUsage(
            model=response.served_by or request.model,
            input_tokens=response.usage.input_tokens,
            output_tokens=response.usage.output_tokens,
            attempt=attempt,
        )
        return activity_io.SynthesisOutput(
            text=response.text, usage=response.usage, model=response.model, calls=[call], failovers=response.failovers
        )

    @activity.defn(name=activity_io.CHECK_GOAL)
    async def check_goal(self, request: activity_io.GoalCheckInput) -> activity_io.GoalCheckOutput:
        """The run's final check: a verifier model judges the final outputs against the goal."""
        with attempt_span(f"final check attempt {activity.info().attempt}", _attributes(request.model)):
            try:
                model = load_model(
                    request.model, price=request.price, capabilities=request.capabilities, fallbacks=request.fallbacks
                )
                outputs = hydrate(self._store, request.outputs)
                attempt = activity.info().attempt
                met, reason, response = await goal_verdict(
                    model,
                    request.goal,
                    outputs,
                    attempt=attempt,
                    call_index=request.call_index,
                    timeout_seconds=request_timeout(request_timeout_default()),
                )
            except Exception as exc:
                raise as_application_error(exc)
        call = CallUsage(
            model=response.served_by or request.model,
            input_tokens=response.usage.input_tokens,
            output_tokens=response.usage.output_tokens,
            attempt=attempt,
        )
        return activity_io.GoalCheckOutput(
            met=met, reason=reason, calls=[call], negotiated=response.negotiated, failovers=response.failovers
        )


def _attributes(model: str) -> dict[str, object]:
    info = activity.info()
    return {"stratagem.run_id": info.workflow_id or "", "stratagem.attempt": info.attempt, "stratagem.model": model}


def _spent_before(checkpoint: Checkpoint) -> list[CallUsage]:
    previous = checkpoint.previous()
    if not isinstance(previous, dict):
        return []
    try:
        return [CallUsage.model_validate(c) for c in previous.get("calls", [])]
    except ValidationError:
        return []


# The catalogue as this worker serves it, one object per catalogue and configuration: every run
# gets the same object, as the registry's own, so its payload is written once (stratagem.io.payloads).
_served: ByIdentity[ToolCatalog, dict[tuple[bool, tuple[tuple[str, str], ...]], ToolCatalog]] = ByIdentity(limit=8)


def _as_served(catalog: ToolCatalog) -> ToolCatalog:
    """The catalogue, saying whether this worker has channels to notify people on, and where
    each of its secrets may be sent (so plan validation refuses a secret sent elsewhere). Read
    from the environment for every run (19 us, 10 of them the notification channels'), so a
    change applies; the catalogue is worked out once per configuration."""
    key = (NotifyConfig.from_env().configured, binding_variables())
    variants = _served.get(catalog, lambda _: {})
    served = variants.get(key)
    if served is None:
        if len(variants) >= 8:
            variants.clear()  # only a worker whose environment keeps changing (the tests) comes here
        secrets = bindings_from_env(dict(key[1]))
        served = variants[key] = catalog.model_copy(update={"notify": key[0], "secrets": secrets})
    return served


def describe_tools_here(registry: ToolRegistry | None) -> Callable[[], Awaitable[ToolCatalog | None]]:
    """The catalogue as a local activity of the workflow role: `registry` when this process
    serves the tools role too (its tools are the ones the run's steps reach), None otherwise,
    and the run asks the tools role with an activity. One round trip fewer per run for a worker
    that serves every role; its result is recorded, so replaying on any worker gives the same."""

    @activity.defn(name=activity_io.DESCRIBE_TOOLS_HERE)
    async def describe_here() -> ToolCatalog | None:
        return _as_served(registry.catalog()) if registry is not None else None

    return describe_here
