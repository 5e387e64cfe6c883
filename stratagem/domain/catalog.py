"""What a planner and a validator know about a tool: its name, what it does, its JSON schema."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from stratagem.domain.compact import CompactModel
from stratagem.domain.plan import Risk
from stratagem.domain.secret_bindings import SecretBinding


class ToolSpec(CompactModel):
    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    side_effects: bool = Field(
        default=True, description="False for read-only tools; such tools are safe to call again."
    )
    local: bool = Field(default=False, description="Run as a local activity (the fast path for cheap tools).")
    returns: dict[str, Any] | None = Field(
        default=None,
        description="The output's JSON Schema when the tool's return type names its fields; plan validation "
        "checks references into the output against it.",
    )
    risk: Risk | None = Field(
        default=None, description="The tool's own risk: a floor no plan can lower (the higher of the two counts)."
    )
    requires_approval: bool = Field(
        default=False, description="Every use needs a person's approval: its step, or each call an llm step makes."
    )
    irreversible: bool = Field(
        default=False, description="Its effects cannot be undone: risk high, and every use needs approval."
    )
    compensate: str | None = Field(
        default=None,
        description="The tool that undoes its effect (`@tool(compensate=...)`): called with the same arguments "
        "(and the output, as `original_output`, if it takes one) when a run compensates.",
    )
    reconcile: bool = Field(
        default=False,
        description="It has a reconcile check (`@tool(reconcile=...)`): before retrying an attempt whose outcome is "
        "unknown, the check says whether the effect happened, and its answer becomes the output if it did.",
    )

    @property
    def floor(self) -> Risk | None:
        """The least risk a step using this tool has."""
        return Risk.high if self.irreversible else self.risk

    @property
    def needs_approval(self) -> bool:
        """Whether each use waits for a person, whatever a plan says."""
        return self.requires_approval or self.irreversible or self.risk is Risk.high


class ToolCatalog(CompactModel):
    """The tools a worker offers, as the workflow sees them (no code, only schemas). Every run
    records it in its history, so its payload leaves out what holds a default (CompactModel):
    the bench worker's 20 tools went from 10,939 to 9,078 bytes per run."""

    tools: list[ToolSpec] = Field(default_factory=list)
    notify: bool = Field(
        default=False,
        description="The worker has channels to tell people a run waits for them (stratagem.notify); runs at "
        "level 5 then send a notification per pending decision.",
    )
    secrets: dict[str, SecretBinding] | None = Field(
        default=None,
        description="Where each of the worker's secrets may be sent (names, hosts, headers: never values; "
        "stratagem.domain.secret_bindings), so plan validation refuses `${secret:NAME}` in a request to a host NAME is "
        "not bound to. None: the worker did not say (runs recorded before bindings existed), and only the "
        "check when the request is sent applies; {}: no secret is bound.",
    )

    def get(self, name: str) -> ToolSpec | None:
        for spec in self.tools:
            if spec.name == name:
                return spec
        return None

    @property
    def names(self) -> list[str]:
        return [t.name for t in self.tools]
