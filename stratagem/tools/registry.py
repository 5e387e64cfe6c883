"""The tools one worker can run: the `@tool` functions of modules and files, and the tools of MCP
servers, each checked and called as a `ToolRegistry` does. What a tool is, and the `@tool`
decorator, are stratagem.tools.definition.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError
from pydantic_core import PydanticSerializationError, to_jsonable_python

from stratagem.common.errors import ToolArgumentsError, ToolError, ToolRegistrationError, UnknownToolError
from stratagem.common.telemetry import tool_call_span
from stratagem.domain.catalog import ToolCatalog
from stratagem.domain.compensation import ORIGINAL_OUTPUT
from stratagem.tools import fence
from stratagem.tools.definition import TOOL_MARK, ToolContext, ToolDefinition, define_tool, telling_schema
from stratagem.tools.mcp_sources import canonical_source, is_mcp_source, parse_source

if TYPE_CHECKING:
    # Imported when a worker loads an MCP server, not before: the `mcp` SDK takes about 0.6 s to
    # import, which every command and every worker would otherwise pay.
    from stratagem.tools.mcp_servers import McpServer
    from stratagem.tools.mcp_tools import McpTool


class ToolRegistry:
    """The tools one worker can run."""

    def __init__(self) -> None:
        self._tools: dict[str, ToolDefinition] = {}
        self._origins: dict[str, str] = {}
        self._catalog: ToolCatalog | None = None
        self._servers: list[McpServer] = []

    @classmethod
    def from_modules(cls, modules: list[str], *, builtins: bool = True) -> ToolRegistry:
        """A registry of the built-in tools and those of `modules`: dotted module names, `.py`
        files, and MCP servers (`mcp:stdio:COMMAND [ARGS]`, `mcp:http:URL`: stratagem.tools.mcp_sources)."""
        registry = cls()
        if builtins:
            registry.load_module("stratagem.tools.builtin")
        for module in dict.fromkeys(modules):  # the same source twice is one source
            registry.load_module(module)
        registry.check_compensations()
        return registry

    def register(self, fn: Callable[..., Any] | ToolDefinition, *, origin: str = "") -> ToolDefinition:
        definition = fn if isinstance(fn, ToolDefinition) else getattr(fn, TOOL_MARK, None) or define_tool(fn)
        if definition.name in self._tools and self._tools[definition.name].function is not definition.function:
            origins = (self._origins[definition.name], origin or "another")
            fix = "rename one with @tool(name=...)"
            if any(is_mcp_source(o) for o in origins):
                fix += " or give an MCP server's tools a prefix: mcp[prefix=NAME]:..."
            raise ToolRegistrationError(
                f"two tools are named '{definition.name}' ({origins[0]} and {origins[1]}); {fix}"
            )
        self._tools[definition.name] = definition
        self._origins[definition.name] = origin or getattr(definition.function, "__module__", "?")
        self._catalog = None
        if definition.compensation is not None:
            # An undo given as a decorated function comes with its tool, even from a module that
            # does not export it; one given by name must be registered too (check_compensations).
            undo = definition.compensation
            if undo.name not in self._tools:
                self.register(undo, origin=origin)
            _check_undo(definition, self._tools[undo.name])
        return definition

    def check_compensations(self) -> None:
        """Every tool's compensation is a registered tool that can be called with the tool's own
        arguments (and its output, as `original_output`): refused when the registry is built,
        not when a run that gives up on its goal needs it."""
        for definition in self._tools.values():
            if definition.compensate is None:
                continue
            undo = self._tools.get(definition.compensate)
            if undo is None:
                available = ", ".join(sorted(self._tools)) or "none"
                raise ToolRegistrationError(
                    f"tool '{definition.name}': compensate= names tool '{definition.compensate}', which this "
                    f"worker does not register (it has: {available}); register it, or give the @tool function"
                )
            _check_undo(definition, undo)

    def load_module(self, module: str) -> list[str]:
        """Import a module by dotted name or file path and register every `@tool` in it; or, for
        an MCP source, register the server's tools."""
        if is_mcp_source(module):
            return self.load_mcp(module)
        loaded = _import(module)
        names = []
        for value in vars(loaded).values():
            definition = getattr(value, TOOL_MARK, None)
            if isinstance(definition, ToolDefinition):
                self.register(definition, origin=module)
                names.append(definition.name)
        if not names:
            raise ToolRegistrationError(f"tool module '{module}' defines no @tool functions")
        return names

    def load_mcp(self, spec: str) -> list[str]:
        """Register the tools an MCP server lists (stratagem.tools.mcp_servers). They are listed
        now, once; calls open a session of their own when the first one comes."""
        from stratagem.tools.mcp_servers import McpServer

        server = McpServer(parse_source(spec))
        tools = server.list_tools()
        for mcp_tool in tools:
            if mcp_tool.name in self._tools:
                raise ToolRegistrationError(
                    f"MCP server '{server.source.label}' offers tool '{mcp_tool.name}', which {self._origins[mcp_tool.name]} "
                    "already registered; give the server's tools a prefix: mcp[prefix=NAME]:..."
                )
        for mcp_tool in tools:
            self.register(_mcp_definition(server, mcp_tool), origin=spec)
        self._servers.append(server)
        return [t.name for t in tools]

    async def aclose(self) -> None:
        """Close what the tools hold open on this event loop: MCP sessions, whose stdio servers
        stop. The worker calls it when it shuts down."""
        for server in self._servers:
            await server.aclose()

    def get(self, name: str) -> ToolDefinition:
        try:
            return self._tools[name]
        except KeyError:
            available = ", ".join(sorted(self._tools)) or "none"
            raise UnknownToolError(f"unknown tool '{name}' (this worker has: {available})") from None

    def catalog(self) -> ToolCatalog:
        """The tools' schemas. Built once (pydantic schema generation costs milliseconds per
        tool, and every run asks) and again only after a registration; treat it as read-only."""
        if self._catalog is None:
            self.check_compensations()  # a registry built tool by tool (register) is checked here
            self._catalog = ToolCatalog(tools=[t.spec() for t in sorted(self._tools.values(), key=lambda t: t.name)])
        return self._catalog

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    async def invoke(self, name: str, args: dict[str, Any], context: ToolContext) -> Any:
        """Check the arguments, call the tool, and return its output as a JSON-ready value.
        The call is an `execute_tool <name>` span."""
        with tool_call_span(
            name, step_id=context.step_id, attempt=context.attempt, key=context.idempotency_key, call=context.call
        ):
            return await self._invoke(name, args, context)

    async def reconcile(self, name: str, args: dict[str, Any], context: ToolContext) -> Any:
        """Run the tool's reconcile check with the call's arguments (those it names) and context:
        its answer, JSON-ready, if the effect of an earlier attempt happened; None if it did not.
        The tool must have a check (ToolDefinition.reconcile)."""
        definition = self.get(name)
        check = definition.reconcile
        assert check is not None, f"tool '{name}' has no reconcile check"
        assert definition.arguments is not None, "only Python tools take reconcile="
        try:
            parsed = definition.arguments.model_validate(args)
        except ValidationError as exc:
            raise ToolArgumentsError(f"tool '{name}': {_validation_summary(exc)}") from None
        values = {field: getattr(parsed, field) for field in type(parsed).model_fields}
        kwargs = {p: values[p] if p in values else context for p in inspect.signature(check).parameters}
        with tool_call_span(
            f"{name} reconcile",
            step_id=context.step_id,
            attempt=context.attempt,
            key=context.idempotency_key,
            call=context.call,
        ):
            # An earlier attempt still running here could pay after the check looked (fence.py).
            await fence.settled(context.idempotency_key)
            if inspect.iscoroutinefunction(check):
                found = await check(**kwargs)
            else:
                found = await fence.blocking(check, **kwargs)
        return None if found is None else to_jsonable_python(found)

    async def _invoke(self, name: str, args: dict[str, Any], context: ToolContext) -> Any:
        definition = self.get(name)
        if definition.arguments is None:
            problems = [
                f"'{'.'.join(str(p) for p in e.absolute_path) or 'arguments'}' {e.message}"
                for e in definition._schema_validator.iter_errors(args)
            ]
            if problems:
                raise ToolArgumentsError(f"tool '{name}': {'; '.join(problems)}")
            return to_jsonable_python(await definition.function(args, context))
        try:
            parsed = definition.arguments.model_validate(args)
        except ValidationError as exc:
            raise ToolArgumentsError(f"tool '{name}': {_validation_summary(exc)}") from None
        kwargs = {field: getattr(parsed, field) for field in type(parsed).model_fields}
        if definition.context_parameter:
            kwargs[definition.context_parameter] = context
        fenced = definition.reconcile is not None or definition.irreversible
        if fenced:
            await fence.settled(context.idempotency_key)  # an earlier attempt still running here (fence.py)
        if definition.is_async:
            result = await definition.function(**kwargs)
        elif fenced:
            result = await fence.in_thread(context.idempotency_key, definition.function, **kwargs)
        else:
            # A blocking tool must not stall the worker's event loop (and with it heartbeats
            # and every other activity), so it runs in a thread (fence.py says which).
            result = await fence.blocking(definition.function, **kwargs)
        try:
            return to_jsonable_python(result)
        except PydanticSerializationError as exc:
            raise ToolError(
                f"tool '{name}' returned a {type(result).__name__}, which is not JSON-serializable: {exc}",
                retryable=False,
            ) from None


def _check_undo(definition: ToolDefinition, undo: ToolDefinition) -> None:
    """An undo is called with the original's arguments and its output: each parameter it requires
    must be one of the original's, or `original_output`."""
    takes = set(definition.spec().parameters.get("properties") or {})
    for name in undo.spec().parameters.get("required") or []:
        if name not in takes and name != ORIGINAL_OUTPUT:
            raise ToolRegistrationError(
                f"tool '{definition.name}': its compensation '{undo.name}' requires parameter '{name}', which "
                f"'{definition.name}' does not take; give '{name}' a default, or read it from "
                f"'{definition.name}''s output: declare a parameter '{ORIGINAL_OUTPUT}' instead"
            )


def _mcp_definition(server: McpServer, mcp_tool: McpTool) -> ToolDefinition:
    async def call(arguments: dict[str, Any], context: ToolContext) -> Any:
        return await server.call(mcp_tool.remote, arguments, context.idempotency_key)

    return ToolDefinition(
        name=mcp_tool.name,
        description=mcp_tool.description,
        function=call,
        arguments=None,
        parameters=mcp_tool.parameters,
        context_parameter=None,
        side_effects=mcp_tool.side_effects,
        returns=telling_schema(mcp_tool.output_schema) if mcp_tool.output_schema else None,
        risk=mcp_tool.risk,
        requires_approval=mcp_tool.requires_approval,
    )


def canonical_tool_source(source: str) -> str:
    """A `--tools` value as a worker started in another folder must be given it: a `.py` file's
    absolute path, an MCP stdio command's paths made absolute, a dotted module name as it is."""
    if is_mcp_source(source):
        return canonical_source(source)
    return str(Path(source).resolve()) if source.endswith(".py") else source


def _validation_summary(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"]) or "arguments"
        parts.append(f"'{where}' {error['msg'].lower()}")
    return "; ".join(parts)


def _import(module: str) -> Any:
    if module.endswith(".py") or "/" in module or "\\" in module:
        path = Path(module).resolve()
        if not path.is_file():
            raise ToolRegistrationError(f"tool module file '{module}' does not exist")
        name = f"stratagem_user_tools_{path.stem}_{abs(hash(str(path)))}"
        if name in sys.modules:
            return sys.modules[name]
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ToolRegistrationError(f"cannot load tool module file '{module}'")
        loaded = importlib.util.module_from_spec(spec)
        sys.modules[name] = loaded
        try:
            spec.loader.exec_module(loaded)
        except Exception as exc:
            del sys.modules[name]
            raise ToolRegistrationError(f"tool module '{module}' failed to import: {exc}") from exc
        return loaded
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        raise ToolRegistrationError(f"cannot import tool module '{module}': {exc}") from exc
    except Exception as exc:
        raise ToolRegistrationError(f"tool module '{module}' failed to import: {exc}") from exc
