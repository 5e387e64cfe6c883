"""What an MCP server's tools and results become in this worker: catalogue entries with the
source's options applied, and step outputs.

What a server says is untrusted: its descriptions and schemas lose their invisible characters
(bidi controls, zero-width characters: stratagem.domain.visible_text) and are cut to size before a
planner, the catalogue or a reviewer sees them, its annotations can raise a tool's risk but
never lower what the worker's operator set, and its output is bounded before it enters a run.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from jsonschema.exceptions import SchemaError
from jsonschema.validators import validator_for
from mcp.types import CallToolResult, ImageContent, TextContent, Tool, ToolAnnotations

from stratagem.common.errors import ToolError, ToolRegistrationError
from stratagem.domain.plan import Risk
from stratagem.domain.risk import RISK_ORDER
from stratagem.domain.visible_text import visible
from stratagem.tools.mcp_sources import McpSource

MAX_DESCRIPTION = 1024
"""Characters of a description (a tool's, or a parameter's) a planner is shown."""
MAX_SCHEMA_BYTES = 64 * 1024
MAX_OUTPUT_BYTES = 1024 * 1024
"""The most of a call's output that enters a run: longer text is cut; larger structured content
gives way to its text, or is an error when there is none."""
MAX_ERROR_CHARS = 2000
TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
"""What every model provider accepts as a function name."""


@dataclass(frozen=True)
class McpTool:
    """One of a server's tools, as this worker registers it."""

    name: str
    remote: str
    description: str
    parameters: dict[str, Any]
    output_schema: dict[str, Any] | None
    side_effects: bool
    risk: Risk | None
    requires_approval: bool


def tools_of(source: McpSource, listed: list[Tool]) -> list[McpTool]:
    """The listed tools this worker registers, with the source's options applied."""
    names = [t.name for t in listed]
    if not listed:
        raise ToolRegistrationError(f"MCP server '{source.label}' offers no tools")
    for option, wanted in (("only", source.only), ("approval", source.approval)):
        unknown = sorted(set(wanted) - set(names)) if isinstance(wanted, frozenset) else []
        if unknown:
            raise ToolRegistrationError(
                f"MCP server '{source.label}': {option}= names {', '.join(unknown)}, which it does not offer "
                f"(it offers: {', '.join(sorted(names))})"
            )
    tools = []
    for tool in listed:
        if source.only is not None and tool.name not in source.only:
            continue
        name = f"{source.prefix}_{tool.name}" if source.prefix else tool.name
        if not TOOL_NAME.match(name):
            raise ToolRegistrationError(
                f"MCP server '{source.label}' offers a tool named {clean(tool.name, 80)!r}, which models cannot call "
                "(letters, digits, '_' and '-', at most 64); leave it out with mcp[only=...]:..."
            )
        tools.append(
            McpTool(
                name=name,
                remote=tool.name,
                description=clean(tool.description or tool.title or "", MAX_DESCRIPTION),
                parameters=_parameters(source, name, tool.input_schema),
                output_schema=_output_schema(tool.output_schema),
                side_effects=not _read_only(tool.annotations),
                risk=_risk(source, tool.annotations),
                requires_approval=source.needs_approval(tool.name),
            )
        )
    return tools


def _read_only(annotations: ToolAnnotations | None) -> bool:
    return annotations is not None and annotations.read_only_hint is True


def _risk(source: McpSource, annotations: ToolAnnotations | None) -> Risk | None:
    """The operator's `risk=`, raised to medium for a tool that may destroy: one that does not
    say it only reads and does not deny being destructive (MCP's default is destructive). A
    server's hints only ever raise it."""
    hinted = None
    if not _read_only(annotations) and (annotations is None or annotations.destructive_hint is not False):
        hinted = Risk.medium
    levels = [r for r in (source.risk, hinted) if r is not None]
    return max(levels, key=lambda r: RISK_ORDER[r]) if levels else None


def _parameters(source: McpSource, name: str, schema: dict[str, Any]) -> dict[str, Any]:
    if schema.get("type", "object") != "object":
        raise ToolRegistrationError(
            f"MCP server '{source.label}': tool '{name}' takes {schema.get('type')}, not an object"
        )
    cleaned = _clean_schema(schema)
    if hidden := _hidden_names(cleaned):
        raise ToolRegistrationError(
            f"MCP server '{source.label}': tool '{name}' has a parameter whose name holds invisible characters "
            f"({clean(hidden, 80)!r}); leave it out with mcp[only=...]:..."
        )
    cleaned.setdefault("type", "object")
    cleaned.pop("title", None)
    try:
        validator_for(cleaned).check_schema(cleaned)
    except SchemaError as exc:
        raise ToolRegistrationError(
            f"MCP server '{source.label}': the schema of tool '{name}' is not a valid JSON Schema ({clean(exc.message, 200)})"
        ) from None
    size = len(json.dumps(cleaned))
    if size > MAX_SCHEMA_BYTES:
        raise ToolRegistrationError(
            f"MCP server '{source.label}': the schema of tool '{name}' is {size:,} bytes, more than "
            f"{MAX_SCHEMA_BYTES:,}; leave it out with mcp[only=...]:..."
        )
    return cleaned


def _output_schema(schema: dict[str, Any] | None) -> dict[str, Any] | None:
    """The shape plan validation checks references against, if it is of a reasonable size."""
    if not schema:
        return None
    cleaned = _clean_schema(schema)
    return cleaned if len(json.dumps(cleaned)) <= MAX_SCHEMA_BYTES else None


def _clean_schema(node: Any) -> Any:
    """Descriptions and titles inside a schema are text a planner reads: cut them to size."""
    if isinstance(node, dict):
        return {
            k: clean(v, MAX_DESCRIPTION) if k in ("description", "title") and isinstance(v, str) else _clean_schema(v)
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_clean_schema(v) for v in node]
    return node


def _hidden_names(node: Any) -> str | None:
    """A parameter name with characters a reviewer cannot see, anywhere in a schema: it cannot be
    cleaned like a description, since the server expects the name as it wrote it."""
    if isinstance(node, dict):
        properties = node.get("properties")
        if isinstance(properties, dict):
            for key in properties:
                if visible(key) != key:
                    return key
        return next((found for value in node.values() if (found := _hidden_names(value))), None)
    if isinstance(node, list):
        return next((found for value in node if (found := _hidden_names(value))), None)
    return None


def tool_output(result: CallToolResult) -> Any:
    """A call's result as a step output: its structured content if it has some (and it is not
    above MAX_OUTPUT_BYTES), else its text, cut at MAX_OUTPUT_BYTES characters."""
    if result.is_error:
        text = _text(result) or "the tool reported an error and said nothing more"
        # MCP has no way to say an error is passing, and a call that failed on its input fails
        # again: the planner's revision, or the executor's next call, is the remedy.
        raise ToolError(clean(text, MAX_ERROR_CHARS), retryable=False)
    text = _text(result)
    if result.structured_content is not None:
        size = len(json.dumps(result.structured_content, default=str))
        if size <= MAX_OUTPUT_BYTES:
            return result.structured_content
        if not text:
            raise ToolError(
                f"the MCP tool returned {size:,} bytes of structured content, more than the {MAX_OUTPUT_BYTES:,} "
                "a step's output may hold",
                retryable=False,
            )
        # Too large to keep whole: its text, cut, as for a tool that returns only text.
    if len(text) > MAX_OUTPUT_BYTES:
        text = text[:MAX_OUTPUT_BYTES] + f"\n[cut: {len(text):,} characters in all]"
    return text


def _text(result: CallToolResult) -> str:
    parts = []
    for block in result.content:
        if isinstance(block, TextContent):
            parts.append(block.text)
        elif isinstance(block, ImageContent):
            parts.append(f"[{block.mime_type} image, not shown]")
        else:
            resource = getattr(block, "resource", None)
            text = getattr(resource, "text", None)
            parts.append(text if isinstance(text, str) else f"[{getattr(block, 'type', 'other')} content, not shown]")
    return "\n".join(parts)


def clean(text: str, limit: int) -> str:
    """A server's text as a planner and a person are shown it: visible characters only, cut to `limit`."""
    text = visible(text).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"
