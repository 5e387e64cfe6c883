"""Planning activities: the tool catalogue, the planner model call, the final synthesis."""

from __future__ import annotations

import json

from temporalio import activity

from stratagem import activity_io as io
from stratagem.models import Message, ModelRequest, Purpose, load_model
from stratagem.planner import Progress, plan_with_repairs
from stratagem.tools import ToolCatalog, ToolRegistry

from .errors import as_application_error


class PlanningActivities:
    def __init__(self, registry: ToolRegistry):
        self._registry = registry

    @activity.defn(name=io.DESCRIBE_TOOLS)
    async def describe_tools(self) -> ToolCatalog:
        return self._registry.catalog()

    @activity.defn(name=io.PLAN)
    async def plan(self, request: io.PlanningInput) -> io.PlanningOutput:
        try:
            model = load_model(request.model)
            progress = None
            if request.current is not None:
                progress = Progress(
                    plan=request.current, records=request.records, failure=request.failure or "", history=request.history
                )
            outcome = await plan_with_repairs(
                model,
                request.goal,
                request.catalog,
                progress=progress,
                max_repairs=request.max_repairs,
                first_call_index=request.first_call_index,
                has_executor=request.has_executor,
            )
        except Exception as exc:
            raise as_application_error(exc) from exc
        return io.PlanningOutput(
            draft=outcome.draft,
            model=outcome.model,
            calls=outcome.calls,
            usage=outcome.usage,
            rejected_attempts=outcome.rejected_attempts,
        )

    @activity.defn(name=io.SYNTHESIZE)
    async def synthesize(self, request: io.SynthesisInput) -> io.SynthesisOutput:
        try:
            model = load_model(request.model)
            outputs = json.dumps(request.outputs, indent=1, default=str)
            response = await model.complete(
                ModelRequest(
                    purpose=Purpose.synthesize,
                    messages=[
                        Message(role="system", content="Summarise the outcome of a finished business process for the person who asked for it."),
                        Message(role="user", content=f"Goal: {request.goal}\n\nResults of the final steps:\n{outputs}"),
                    ],
                    attempt=activity.info().attempt,
                )
            )
        except Exception as exc:
            raise as_application_error(exc) from exc
        return io.SynthesisOutput(text=response.text, usage=response.usage, model=response.model)
