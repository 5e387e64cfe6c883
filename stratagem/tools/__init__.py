"""Tools: plain functions a plan's tool steps call, registered with `@tool`."""

from .registry import ToolContext, ToolDefinition, ToolRegistry, idempotency_key, tool
from ..catalog import ToolCatalog, ToolSpec

__all__ = ["ToolCatalog", "ToolContext", "ToolDefinition", "ToolRegistry", "ToolSpec", "idempotency_key", "tool"]
