"""Tools: plain functions a plan's tool steps call, registered with `@tool`."""

from ..catalog import ToolCatalog, ToolSpec
from .registry import ToolContext, ToolDefinition, ToolRegistry, idempotency_key, tool

__all__ = ["ToolCatalog", "ToolContext", "ToolDefinition", "ToolRegistry", "ToolSpec", "idempotency_key", "tool"]
