"""How risky a step is once its tool has had its say.

A plan states each step's risk and whether it needs approval, but a plan is written by a model
or a person the worker does not trust. A tool can declare its own risk (`@tool(risk="high")`),
that every use needs approval (`requires_approval=True`), or that its effects cannot be undone
(`irreversible=True`). Those declarations come from the worker's code, so they are a floor: the
effective risk is the higher of the plan's and the tool's, and a tool that needs approval gates
every step that calls it, however the plan marks the step. Inside an llm step the same tool
waits for a per-call approval instead (stratagem.io.executor).
"""

from __future__ import annotations

from stratagem.domain.catalog import ToolCatalog, ToolSpec
from stratagem.domain.plan import Risk, Step, StepKind

RISK_ORDER = {Risk.low: 0, Risk.medium: 1, Risk.high: 2}


def _tool_of(step: Step, catalog: ToolCatalog) -> ToolSpec | None:
    return catalog.get(step.tool) if step.kind is StepKind.tool and step.tool else None


def effective_risk(step: Step, catalog: ToolCatalog) -> Risk:
    """The higher of the plan's risk and the floor of the tool the step calls."""
    spec = _tool_of(step, catalog)
    floor = spec.floor if spec is not None else None
    if floor is not None and RISK_ORDER[floor] > RISK_ORDER[step.risk]:
        return floor
    return step.risk


def needs_approval(step: Step, catalog: ToolCatalog) -> bool:
    """Whether the step waits for its own approval before it runs."""
    if step.needs_step_approval:
        return True
    spec = _tool_of(step, catalog)
    return spec is not None and (spec.needs_approval or effective_risk(step, catalog) is Risk.high)


def gated_calls(step: Step, catalog: ToolCatalog) -> list[str]:
    """The tools an llm step may call whose every call waits for a person."""
    if step.kind is not StepKind.llm:
        return []
    return [name for name in step.tools if (spec := catalog.get(name)) is not None and spec.needs_approval]


def risk_label(step: Step, catalog: ToolCatalog | None) -> str:
    """A step's risk as a reviewer reads it: the effective level (and the plan's, if the tool raised
    it), whether it waits for approval and by whom, and the tools an llm step asks before calling.
    Without the run's catalogue, what the plan says."""
    if catalog is None:
        return step.risk.value + (" · approval" if step.needs_step_approval else "")
    level = effective_risk(step, catalog)
    text = level.value + (f" (plan: {step.risk.value})" if level is not step.risk else "")
    if needs_approval(step, catalog):
        text += " · approval"
    if step.approvers:
        text += f" by {', '.join(step.approvers)}"
    if step.quorum is not None and step.quorum > 1:
        text += f" · {step.quorum} people"
    if step.four_eyes:
        text += " · four eyes"
    if calls := gated_calls(step, catalog):
        text += f" · asks before {', '.join(calls)}"
    return text


def raised(step: Step, catalog: ToolCatalog) -> str | None:
    """What the tool changes about the step, in words, if anything (for validation and review)."""
    spec = _tool_of(step, catalog)
    if spec is None:
        return None
    risk = effective_risk(step, catalog)
    if risk is not step.risk:
        why = "irreversible" if spec.irreversible else f"risk {risk.value}"
        return f"step '{step.id}' runs at risk {risk.value}, not {step.risk.value}: tool '{spec.name}' is {why}"
    if needs_approval(step, catalog) and not step.needs_step_approval:
        return f"step '{step.id}' waits for approval: tool '{spec.name}' requires it"
    return None
