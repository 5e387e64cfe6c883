"""What a planner and a validator know about a tool: its name, what it does, its JSON schema."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class ToolSpec(BaseModel):
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


class ToolCatalog(BaseModel):
    """The tools a worker offers, as the workflow sees them (no code, only schemas)."""

    tools: list[ToolSpec] = Field(default_factory=list)

    def get(self, name: str) -> ToolSpec | None:
        for spec in self.tools:
            if spec.name == name:
                return spec
        return None

    @property
    def names(self) -> list[str]:
        return [t.name for t in self.tools]
