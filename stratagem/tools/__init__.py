"""Tools: plain functions a plan's tool steps call, registered with `@tool`, and the tools of
MCP servers (`--tools mcp:stdio:COMMAND` or `mcp:http:URL`)."""

from stratagem.domain.catalog import ToolCatalog, ToolSpec
from stratagem.tools.definition import ToolContext, ToolDefinition, idempotency_key, tool
from stratagem.tools.outcome import OutcomeUnknown
from stratagem.tools.registry import ToolRegistry, canonical_tool_source

__all__ = [
    "OutcomeUnknown",
    "ToolCatalog",
    "ToolContext",
    "ToolDefinition",
    "ToolRegistry",
    "ToolSpec",
    "canonical_tool_source",
    "idempotency_key",
    "tool",
]
