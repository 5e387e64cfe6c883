"""Tools are plain Python functions registered with `@tool`.

The function's typed parameters become its JSON schema (through pydantic), which is what the
planner sees and what plans are validated against. A parameter annotated `ToolContext` is not
part of the schema: the worker fills it with the run, step, revision and idempotency key.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import importlib.util
import inspect
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Union, get_args, get_origin, get_type_hints

from jsonschema.validators import validator_for
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError, create_model
from pydantic_core import PydanticSerializationError, to_jsonable_python

from ..catalog import ToolCatalog, ToolSpec
from ..errors import ToolArgumentsError, ToolError, ToolRegistrationError, UnknownToolError
from ..plan import Risk
from ..telemetry import tool_call_span
from .mcp_sources import canonical_source, is_mcp_source, parse_source

if TYPE_CHECKING:
    # Imported when a worker loads an MCP server, not before: the `mcp` SDK takes about 0.6 s to
    # import, which every command and every worker would otherwise pay.
    from .mcp_servers import McpServer
    from .mcp_tools import McpTool

_MARK = "__stratagem_tool__"


@dataclass(frozen=True)
class ToolContext:
    """What a tool knows about the call it serves.

    `idempotency_key` is `<run_id>/<execution_id>/<step_id>/r<revision>`: the same for every
    retry of a step within one plan revision, including retries after a worker crash, and
    different when a revision deliberately runs the step again. `execution_id` is unique to
    the run (Temporal's first run id of the chain), so a later run that reuses a run id never
    collides with an earlier one. Tools with side effects should pass it on
    (as an `Idempotency-Key` header, a request id, a row key) so a repeated attempt has no
    repeated effect.

    When an llm step's executor calls a tool, `call` is the call's position in the step's
    conversation and the key ends in `/c<call>`: each call of the conversation has its own
    key, and a retried attempt that resumes the conversation makes the same calls with the
    same keys.
    """

    run_id: str
    step_id: str
    revision: int
    attempt: int
    workspace: Path
    execution_id: str
    call: int | None = None

    @property
    def idempotency_key(self) -> str:
        return idempotency_key(self.run_id, self.execution_id, self.step_id, self.revision, self.call)


def idempotency_key(run_id: str, execution_id: str, step_id: str, revision: int, call: int | None = None) -> str:
    key = f"{run_id}/{execution_id}/{step_id}/r{revision}"
    return key if call is None else f"{key}/c{call}"


@dataclass(frozen=True)
class ToolDefinition:
    """A registered tool. A Python tool's `arguments` model checks its arguments and gives its
    schema; a tool that brings its own JSON Schema (an MCP server's) has `parameters` instead,
    and its `function` is called as `function(arguments, context)`."""

    name: str
    description: str
    function: Callable[..., Any]
    arguments: type[BaseModel] | None
    context_parameter: str | None
    side_effects: bool
    local: bool = False
    returns: dict[str, Any] | None = None
    risk: Risk | None = None
    requires_approval: bool = False
    irreversible: bool = False
    parameters: dict[str, Any] | None = None

    @functools.cached_property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.function)

    @functools.cached_property
    def _schema_validator(self) -> Any:
        schema = self.parameters or {}
        return validator_for(schema)(schema)

    def spec(self) -> ToolSpec:
        if self.arguments is not None:
            schema = self.arguments.model_json_schema()
            schema.pop("title", None)
        else:
            schema = dict(self.parameters or {"type": "object", "properties": {}})
        return ToolSpec(
            name=self.name,
            description=self.description,
            parameters=schema,
            side_effects=self.side_effects,
            local=self.local,
            returns=self.returns,
            risk=self.risk,
            requires_approval=self.requires_approval,
            irreversible=self.irreversible,
        )


def tool(
    function: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    side_effects: bool = True,
    local: bool = False,
    risk: Risk | str | None = None,
    requires_approval: bool = False,
    irreversible: bool = False,
) -> Any:
    """Register a function as a tool. Use bare (`@tool`) or with options (`@tool(name=...)`).

    `local=True` is the fast path for cheap, quick, deterministic tools: their steps run as
    Temporal local activities, in the worker that runs the workflow, with no task queue round
    trip. Keep it for tools that finish in well under a second.

    A tool can say how dangerous it is, and no plan can say less (stratagem.risk):
    `risk="low" | "medium" | "high"` is the least risk of a step that calls it;
    `requires_approval=True` makes every use wait for a person; `irreversible=True` (effects
    that cannot be undone) means both risk high and approval. A tool step that calls such a tool
    waits for its approval, however the plan marks it; an llm step's executor pauses before each
    call to it until a person approves or rejects that call (stratagem.executor). The worker's
    own registration decides this, never a plan or a request."""

    def mark(fn: Callable[..., Any]) -> Callable[..., Any]:
        definition = define_tool(
            fn,
            name=name,
            description=description,
            side_effects=side_effects,
            local=local,
            risk=risk,
            requires_approval=requires_approval,
            irreversible=irreversible,
        )
        setattr(fn, _MARK, definition)
        return fn

    return mark(function) if function is not None else mark


def define_tool(
    fn: Callable[..., Any],
    *,
    name: str | None = None,
    description: str | None = None,
    side_effects: bool = True,
    local: bool = False,
    risk: Risk | str | None = None,
    requires_approval: bool = False,
    irreversible: bool = False,
) -> ToolDefinition:
    tool_name = name or fn.__name__
    try:
        tool_risk = None if risk is None else Risk(risk)
    except ValueError:
        choices = ", ".join(repr(r.value) for r in Risk)
        raise ToolRegistrationError(f"tool '{tool_name}': risk must be one of {choices}, not {risk!r}") from None
    try:
        # include_extras keeps Annotated[..., Field(...)] metadata (descriptions, bounds) for the schema.
        hints = get_type_hints(fn, include_extras=True)
    except Exception as exc:  # an annotation that does not evaluate
        raise ToolRegistrationError(f"tool '{tool_name}': cannot read its type hints ({exc})") from exc
    fields: dict[str, Any] = {}
    context_parameter = None
    for param in inspect.signature(fn).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ToolRegistrationError(f"tool '{tool_name}': *args and **kwargs are not allowed; name each parameter")
        annotation = hints.get(param.name)
        if _is_context(annotation):
            context_parameter = param.name
            continue
        if annotation is None:
            raise ToolRegistrationError(
                f"tool '{tool_name}': parameter '{param.name}' needs a type annotation, which becomes its schema"
            )
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (annotation, default)
    arguments = create_model(  # type: ignore[call-overload]
        f"{tool_name}_arguments", __config__=ConfigDict(extra="forbid"), **fields
    )
    doc = inspect.getdoc(fn) or ""
    return ToolDefinition(
        returns=_return_schema(hints.get("return")),
        name=tool_name,
        description=description if description is not None else doc,
        function=fn,
        arguments=arguments,
        context_parameter=context_parameter,
        side_effects=side_effects,
        local=local,
        risk=tool_risk,
        requires_approval=requires_approval,
        irreversible=irreversible,
    )


def _return_schema(annotation: Any) -> dict[str, Any] | None:
    """The JSON Schema of a return type that names its fields (a pydantic model, a TypedDict, a
    list of them), with `$ref`s inlined; None for anything less telling (dict, str, Any)."""
    if annotation is None or annotation is Any:
        return None
    try:
        schema = TypeAdapter(annotation).json_schema()
    except Exception:  # a type pydantic cannot describe: the output is simply not checked
        return None
    return _telling(schema)


def _telling(schema: dict[str, Any]) -> dict[str, Any] | None:
    """An output schema with its `$ref`s inlined, if it names fields (of an object, or of a
    list's items); None otherwise."""
    schema = dict(schema)
    definitions = schema.pop("$defs", {})
    # A server's schema is not ours: definitions that refer to each other many times over must
    # not make the inlined copy explode.
    budget = [20_000]

    def inline(node: Any, depth: int = 0) -> Any:
        budget[0] -= 1
        if budget[0] < 0:
            return {}
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                target = definitions.get(ref.removeprefix("#/$defs/"))
                return inline(target, depth + 1) if target is not None and depth < 8 else {}
            return {k: inline(v, depth) for k, v in node.items()}
        if isinstance(node, list):
            return [inline(v, depth) for v in node]
        return node

    schema = inline(schema)
    if budget[0] < 0:
        return None
    items = schema.get("items") if schema.get("type") == "array" else None
    telling = schema.get("properties") or (isinstance(items, dict) and items.get("properties"))
    return schema if telling else None


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
        return registry

    def register(self, fn: Callable[..., Any] | ToolDefinition, *, origin: str = "") -> ToolDefinition:
        definition = fn if isinstance(fn, ToolDefinition) else getattr(fn, _MARK, None) or define_tool(fn)
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
        return definition

    def load_module(self, module: str) -> list[str]:
        """Import a module by dotted name or file path and register every `@tool` in it; or, for
        an MCP source, register the server's tools."""
        if is_mcp_source(module):
            return self.load_mcp(module)
        loaded = _import(module)
        names = []
        for value in vars(loaded).values():
            definition = getattr(value, _MARK, None)
            if isinstance(definition, ToolDefinition):
                self.register(definition, origin=module)
                names.append(definition.name)
        if not names:
            raise ToolRegistrationError(f"tool module '{module}' defines no @tool functions")
        return names

    def load_mcp(self, spec: str) -> list[str]:
        """Register the tools an MCP server lists (stratagem.tools.mcp_servers). They are listed
        now, once; calls open a session of their own when the first one comes."""
        from .mcp_servers import McpServer

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
        if definition.is_async:
            result = await definition.function(**kwargs)
        else:
            # A blocking tool must not stall the worker's event loop (and with it heartbeats
            # and every other activity), so it runs in a thread.
            result = await asyncio.to_thread(definition.function, **kwargs)
        try:
            return to_jsonable_python(result)
        except PydanticSerializationError as exc:
            raise ToolError(
                f"tool '{name}' returned a {type(result).__name__}, which is not JSON-serializable: {exc}",
                retryable=False,
            ) from None


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
        returns=_telling(mcp_tool.output_schema) if mcp_tool.output_schema else None,
        risk=mcp_tool.risk,
        requires_approval=mcp_tool.requires_approval,
    )


def canonical_tool_source(source: str) -> str:
    """A `--tools` value as a worker started in another folder must be given it: a `.py` file's
    absolute path, an MCP stdio command's paths made absolute, a dotted module name as it is."""
    if is_mcp_source(source):
        return canonical_source(source)
    return str(Path(source).resolve()) if source.endswith(".py") else source


def _is_context(annotation: Any) -> bool:
    """`ToolContext`, also as `ToolContext | None` or inside `Annotated[...]`."""
    if get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    if get_origin(annotation) in (Union, types.UnionType):
        members = [a for a in get_args(annotation) if a is not type(None)]
        annotation = members[0] if len(members) == 1 else None
    return annotation is ToolContext


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
