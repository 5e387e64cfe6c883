"""What a tool is: a plain Python function registered with `@tool`, and the call it serves.

The function's typed parameters become its JSON schema (through pydantic), which is what the
planner sees and what plans are validated against. A parameter annotated `ToolContext` is not
part of the schema: the worker fills it with the run, step, revision and idempotency key. The
tools a worker holds, and how it calls them, are stratagem.tools.registry.
"""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin, get_type_hints

from jsonschema.validators import validator_for
from pydantic import BaseModel, ConfigDict, TypeAdapter, create_model

from stratagem.common.errors import ToolRegistrationError
from stratagem.domain.catalog import ToolSpec
from stratagem.domain.plan import Risk

TOOL_MARK = "__stratagem_tool__"


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
    compensate: str | None = None
    """The name of the tool that undoes this one's effect (a registered tool)."""
    compensation: ToolDefinition | None = None
    """That tool's definition, when it was given as a decorated function (the registry adds it)."""
    reconcile: Callable[..., Any] | None = None
    """The check that says whether an attempt of unknown outcome had its effect: called with the
    same arguments and context; its answer (not None) becomes the output, None means it did not.
    Run for a tool step's attempt, and for an llm step's call in flight when its attempt died."""

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
            compensate=self.compensate,
            reconcile=self.reconcile is not None,
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
    compensate: Callable[..., Any] | str | None = None,
    reconcile: Callable[..., Any] | None = None,
) -> Any:
    """Register a function as a tool. Use bare (`@tool`) or with options (`@tool(name=...)`).

    `local=True` is the fast path for cheap, quick, deterministic tools: their steps run as
    Temporal local activities, in the worker that runs the workflow, with no task queue round
    trip. Keep it for tools that finish in well under a second.

    A tool can say how dangerous it is, and no plan can say less (stratagem.domain.risk):
    `risk="low" | "medium" | "high"` is the least risk of a step that calls it;
    `requires_approval=True` makes every use wait for a person; `irreversible=True` (effects
    that cannot be undone) means both risk high and approval. A tool step that calls such a tool
    waits for its approval, however the plan marks it; an llm step's executor pauses before each
    call to it until a person approves or rejects that call (stratagem.io.executor). The worker's
    own registration decides this, never a plan or a request.

    `compensate=undo` names the tool (a decorated function, or a registered tool's name) that
    undoes this one's effect when a run that ends without its goal compensates: it is called with
    this tool's arguments, and with its output as `original_output` if it takes that parameter.
    `reconcile=check` is called before an attempt whose outcome is unknown (a lost worker, a
    timeout) is retried, with the same arguments and context (the same idempotency key): an answer
    other than None means the effect happened, and becomes the output without calling the tool
    again. An llm step's executor calls it too, before making again a call that was in flight when
    its attempt died (stratagem.io.in_flight). (docs/plans.md: "Undoing effects: compensation" and
    "Attempts of unknown outcome".)"""

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
            compensate=compensate,
            reconcile=reconcile,
        )
        setattr(fn, TOOL_MARK, definition)
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
    compensate: Callable[..., Any] | str | None = None,
    reconcile: Callable[..., Any] | None = None,
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
        **_undo(tool_name, compensate),
        reconcile=_reconcile(tool_name, reconcile, set(fields)),
    )


def _undo(tool_name: str, compensate: Callable[..., Any] | str | None) -> dict[str, Any]:
    """The compensate= option as the definition holds it: the undo's name, and its definition
    when it was given as a decorated function."""
    if compensate is None:
        return {}
    if isinstance(compensate, str):
        if not compensate:
            raise ToolRegistrationError(f"tool '{tool_name}': compensate= names no tool")
        return {"compensate": compensate}
    undo = getattr(compensate, TOOL_MARK, None)
    if not isinstance(undo, ToolDefinition):
        raise ToolRegistrationError(
            f"tool '{tool_name}': compensate= takes a @tool function or a tool's name, "
            f"not {getattr(compensate, '__name__', compensate)!r}"
        )
    if undo.name == tool_name:
        raise ToolRegistrationError(f"tool '{tool_name}' cannot be its own compensation")
    return {"compensate": undo.name, "compensation": undo}


def _reconcile(tool_name: str, reconcile: Callable[..., Any] | None, parameters: set[str]) -> Callable[..., Any] | None:
    """The reconcile= check, whose parameters must be the tool's own (it is called with the same
    arguments, filtered to those it names) or a ToolContext (the same idempotency key)."""
    if reconcile is None:
        return None
    if not callable(reconcile):
        raise ToolRegistrationError(f"tool '{tool_name}': reconcile= takes a function, not {reconcile!r}")
    check = getattr(reconcile, "__name__", "the check")
    try:
        signature = inspect.signature(reconcile)
        hints = get_type_hints(reconcile, include_extras=True)
    except Exception as exc:  # a builtin without a signature, an annotation that does not evaluate
        raise ToolRegistrationError(
            f"tool '{tool_name}': cannot read reconcile check {check}'s parameters ({exc})"
        ) from None
    for param in signature.parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            raise ToolRegistrationError(
                f"tool '{tool_name}': reconcile check {check} must name each parameter it takes (no *args, "
                "**kwargs or positional-only ones): it is called with the tool's arguments by name"
            )
        if param.name not in parameters and not _is_context(hints.get(param.name)):
            known = ", ".join(sorted(parameters)) or "none"
            raise ToolRegistrationError(
                f"tool '{tool_name}': reconcile check {check} takes '{param.name}', which is not a parameter of the "
                f"tool ({known}) nor a ToolContext"
            )
    return reconcile


def _return_schema(annotation: Any) -> dict[str, Any] | None:
    """The JSON Schema of a return type that names its fields (a pydantic model, a TypedDict, a
    list of them), with `$ref`s inlined; None for anything less telling (dict, str, Any)."""
    if annotation is None or annotation is Any:
        return None
    try:
        schema = TypeAdapter(annotation).json_schema()
    except Exception:  # a type pydantic cannot describe: the output is simply not checked
        return None
    return telling_schema(schema)


def telling_schema(schema: dict[str, Any]) -> dict[str, Any] | None:
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


def _is_context(annotation: Any) -> bool:
    """`ToolContext`, also as `ToolContext | None` or inside `Annotated[...]`."""
    if get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    if get_origin(annotation) in (Union, types.UnionType):
        members = [a for a in get_args(annotation) if a is not type(None)]
        annotation = members[0] if len(members) == 1 else None
    return annotation is ToolContext
