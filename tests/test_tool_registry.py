"""Tools: schemas from type hints, registration rules, module loading and invocation."""

from __future__ import annotations

import asyncio
import sys
import threading
from pathlib import Path
from typing import Annotated, Literal

import pytest
from pydantic import BaseModel, Field

from stratagem.common.errors import ToolArgumentsError, ToolError, ToolRegistrationError, UnknownToolError
from stratagem.domain.plan import Risk
from stratagem.tools import ToolContext, ToolDefinition, ToolRegistry, idempotency_key, tool
from stratagem.tools.definition import define_tool

pytestmark = pytest.mark.unit


class Address(BaseModel):
    city: str
    zip_code: str | None = None


@tool
def create_customer(
    name: str,
    age: int,
    tags: list[str] = [],  # noqa: B006 - never mutated
    tier: Literal["basic", "gold"] = "basic",
    score: float | None = None,
    address: Address | None = None,
    ctx: ToolContext | None = None,
) -> dict:
    """Create a customer record.

    Returns the new record."""
    return {"name": name}


@tool(name="add_numbers", description="Adds numbers.", side_effects=False)
def add(a: int, b: int = 2) -> int:
    """Ignored docstring."""
    return a + b


def context(step_id: str = "send", revision: int = 1, attempt: int = 1, workspace: Path = Path("/tmp")) -> ToolContext:
    return ToolContext(
        run_id="run-7", step_id=step_id, revision=revision, attempt=attempt, workspace=workspace, execution_id="x1"
    )


# --- schema generation --------------------------------------------------------------------------


def test_tool_decorator_returns_the_function_unchanged() -> None:
    assert add(1, 1) == 2
    assert create_customer("x", 1) == {"name": "x"}


def test_schema_from_type_hints() -> None:
    spec = ToolRegistry().register(create_customer).spec()
    assert spec.name == "create_customer"
    assert spec.description == "Create a customer record.\n\nReturns the new record."
    assert spec.side_effects is True
    params = spec.parameters
    assert params["type"] == "object"
    assert params["additionalProperties"] is False
    assert "title" not in params
    assert params["required"] == ["name", "age"]
    props = params["properties"]
    assert list(props) == ["name", "age", "tags", "tier", "score", "address"]
    assert props["name"]["type"] == "string"
    assert props["age"]["type"] == "integer"
    assert props["tags"]["type"] == "array" and props["tags"]["items"] == {"type": "string"}
    assert props["tags"]["default"] == []
    assert props["tier"]["enum"] == ["basic", "gold"] and props["tier"]["default"] == "basic"
    assert {"type": "number"} in props["score"]["anyOf"] and {"type": "null"} in props["score"]["anyOf"]
    assert {"$ref": "#/$defs/Address"} in props["address"]["anyOf"]
    assert params["$defs"]["Address"]["required"] == ["city"]


def test_tool_context_parameter_is_not_in_the_schema() -> None:
    definition = ToolRegistry().register(create_customer)
    assert definition.context_parameter == "ctx"
    assert "ctx" not in definition.spec().parameters["properties"]


async def test_optional_and_annotated_tool_context_are_recognised() -> None:
    def optional(x: int, ctx: ToolContext | None = None) -> str:  # noqa: UP007 - the typing spelling on purpose
        return ctx.idempotency_key if ctx else "no context"

    def annotated(x: int, ctx: Annotated[ToolContext, "filled by the worker"]) -> str:
        return ctx.idempotency_key

    registry = ToolRegistry()
    for fn in (optional, annotated):
        definition = registry.register(fn)
        assert definition.context_parameter == "ctx"
        assert list(definition.spec().parameters["properties"]) == ["x"]
    assert await registry.invoke("optional", {"x": 1}, context()) == "run-7/x1/send/r1"
    assert await registry.invoke("annotated", {"x": 1}, context()) == "run-7/x1/send/r1"
    # The context is not an argument a plan can supply.
    with pytest.raises(ToolArgumentsError, match="'ctx' extra inputs are not permitted"):
        await registry.invoke("optional", {"x": 1, "ctx": None}, context())


def test_tool_options_name_description_and_side_effects() -> None:
    spec = ToolRegistry().register(add).spec()
    assert (spec.name, spec.description, spec.side_effects) == ("add_numbers", "Adds numbers.", False)
    assert spec.parameters["required"] == ["a"]
    assert spec.parameters["properties"]["b"]["default"] == 2


def test_function_without_docstring_has_an_empty_description() -> None:
    def bare(x: int) -> int:
        return x

    assert define_tool(bare).description == ""


def test_annotated_field_metadata_reaches_the_schema() -> None:
    def page(size: Annotated[int, Field(ge=1, le=100, description="Rows per page")] = 10) -> int:
        return size

    registry = ToolRegistry()
    registry.register(page)
    prop = registry.catalog().get("page").parameters["properties"]["size"]  # type: ignore[union-attr]
    assert prop["description"] == "Rows per page"
    assert (prop["minimum"], prop["maximum"], prop["default"]) == (1, 100, 10)


def test_star_args_and_kwargs_are_refused() -> None:
    def varargs(*values: int) -> int:
        return 0

    def varkw(**options: str) -> None:
        return None

    with pytest.raises(ToolRegistrationError) as caught:
        tool(varargs)
    assert str(caught.value) == "tool 'varargs': *args and **kwargs are not allowed; name each parameter"
    with pytest.raises(ToolRegistrationError, match=r"^tool 'varkw': \*args and \*\*kwargs are not allowed"):
        ToolRegistry().register(varkw)


def test_missing_annotation_is_refused() -> None:
    def untyped(city, days: int) -> str:  # type: ignore[no-untyped-def]
        return city

    with pytest.raises(ToolRegistrationError) as caught:
        ToolRegistry().register(untyped)
    assert str(caught.value) == "tool 'untyped': parameter 'city' needs a type annotation, which becomes its schema"


def test_unresolvable_annotation_is_refused() -> None:
    def broken(x: NoSuchType) -> int:  # type: ignore[name-defined]  # noqa: F821
        return 0

    with pytest.raises(ToolRegistrationError, match=r"^tool 'broken': cannot read its type hints \(.*NoSuchType"):
        define_tool(broken)


def test_a_bad_risk_is_refused_at_registration() -> None:
    def wire(amount: int) -> str:
        return "sent"

    with pytest.raises(ToolRegistrationError) as caught:
        tool(risk="extreme")(wire)
    assert str(caught.value) == "tool 'wire': risk must be one of 'low', 'medium', 'high', not 'extreme'"
    with pytest.raises(ToolRegistrationError, match=r"^tool 'wire': risk must be one of"):
        define_tool(wire, risk="HIGH")


def test_a_tools_own_risk_and_approval_reach_its_spec() -> None:
    def wire(amount: int) -> str:
        return "sent"

    plain = define_tool(wire).spec()
    assert plain.risk is None and not (plain.requires_approval or plain.irreversible or plain.needs_approval)
    medium = define_tool(wire, risk="medium").spec()
    assert medium.risk is Risk.medium and not medium.needs_approval
    assert define_tool(wire, risk=Risk.high).spec().needs_approval
    assert define_tool(wire, requires_approval=True).spec().needs_approval
    undoable = define_tool(wire, irreversible=True).spec()
    assert undoable.irreversible and undoable.floor is Risk.high and undoable.needs_approval

    @tool(risk="high", irreversible=True)
    def drop_table(table: str) -> None:
        """Drop a table."""

    registry = ToolRegistry()
    registry.register(drop_table)
    spec = registry.catalog().get("drop_table")
    assert spec is not None and (spec.risk, spec.irreversible) == (Risk.high, True)


# --- the registry -------------------------------------------------------------------------------


def test_duplicate_names_from_different_functions_are_refused() -> None:
    registry = ToolRegistry()
    registry.register(add)

    @tool(name="add_numbers")
    def other_add(a: int) -> int:
        return a

    with pytest.raises(ToolRegistrationError) as caught:
        registry.register(other_add, origin="my_tools.py")
    assert str(caught.value) == (
        f"two tools are named 'add_numbers' ({__name__} and my_tools.py); rename one with @tool(name=...)"
    )
    assert registry.get("add_numbers").function is add


def test_registering_the_same_function_twice_is_fine() -> None:
    registry = ToolRegistry()
    first = registry.register(add)
    second = registry.register(add)
    assert first.function is second.function is add
    assert registry.catalog().names == ["add_numbers"]


def test_catalog_is_sorted_and_membership_works() -> None:
    registry = ToolRegistry()
    registry.register(create_customer)
    registry.register(add)
    assert registry.catalog().names == ["add_numbers", "create_customer"]
    assert "add_numbers" in registry and "add" not in registry
    assert registry.catalog().get("missing") is None


def test_unknown_tool_lists_the_available_ones() -> None:
    registry = ToolRegistry()
    registry.register(add)
    registry.register(create_customer)
    with pytest.raises(UnknownToolError) as caught:
        registry.get("delete_everything")
    assert str(caught.value) == "unknown tool 'delete_everything' (this worker has: add_numbers, create_customer)"
    with pytest.raises(UnknownToolError, match=r"\(this worker has: none\)"):
        ToolRegistry().get("x")


# --- loading modules ----------------------------------------------------------------------------

TOOLS_MODULE = '''
from stratagem.tools import tool

@tool
def shout(text: str) -> str:
    """Upper-case some text."""
    return text.upper()

@tool(name="whisper")
def quiet(text: str) -> str:
    return text.lower()

def helper(x):  # not a tool
    return x
'''


def test_load_module_by_file_path(tmp_path: Path) -> None:
    path = tmp_path / "my_tools.py"
    path.write_text(TOOLS_MODULE)
    registry = ToolRegistry()
    assert registry.load_module(str(path)) == ["shout", "whisper"]
    assert registry.catalog().names == ["shout", "whisper"]
    assert registry.catalog().get("shout").description == "Upper-case some text."  # type: ignore[union-attr]


async def test_loaded_file_tools_can_be_invoked(tmp_path: Path) -> None:
    path = tmp_path / "loud_tools.py"
    path.write_text(TOOLS_MODULE)
    registry = ToolRegistry()
    registry.load_module(str(path))
    assert await registry.invoke("shout", {"text": "hi"}, context()) == "HI"
    assert await registry.invoke("whisper", {"text": "HI"}, context()) == "hi"


def test_load_module_by_dotted_name() -> None:
    registry = ToolRegistry()
    names = registry.load_module("stratagem.tools.builtin")
    assert {"http_request", "read_file", "write_file", "render_template"} <= set(names)
    assert set(registry.catalog().names) == set(names)


def test_from_modules_includes_builtins_unless_asked_not_to(tmp_path: Path) -> None:
    path = tmp_path / "extra_tools.py"
    path.write_text(TOOLS_MODULE)
    with_builtins = ToolRegistry.from_modules([str(path)])
    assert {"http_request", "shout"} <= set(with_builtins.catalog().names)
    without = ToolRegistry.from_modules([str(path)], builtins=False)
    assert without.catalog().names == ["shout", "whisper"]


def test_module_with_no_tools_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "plain.py"
    path.write_text("def f(x: int) -> int:\n    return x\n")
    with pytest.raises(ToolRegistrationError) as caught:
        ToolRegistry().load_module(str(path))
    assert str(caught.value) == f"tool module '{path}' defines no @tool functions"
    with pytest.raises(ToolRegistrationError, match=r"^tool module 'json' defines no @tool functions$"):
        ToolRegistry().load_module("json")


def test_bad_module_name_gives_a_clear_error() -> None:
    with pytest.raises(ToolRegistrationError) as caught:
        ToolRegistry().load_module("no_such_tools_module")
    assert (
        str(caught.value) == "cannot import tool module 'no_such_tools_module': No module named 'no_such_tools_module'"
    )


def test_missing_module_file(tmp_path: Path) -> None:
    path = tmp_path / "absent_tools.py"
    with pytest.raises(ToolRegistrationError) as caught:
        ToolRegistry().load_module(str(path))
    assert str(caught.value) == f"tool module file '{path}' does not exist"


def test_module_that_fails_to_import(tmp_path: Path) -> None:
    path = tmp_path / "exploding_tools.py"
    path.write_text("raise RuntimeError('kaboom')\n")
    before = set(sys.modules)
    with pytest.raises(ToolRegistrationError) as caught:
        ToolRegistry().load_module(str(path))
    assert str(caught.value) == f"tool module '{path}' failed to import: kaboom"
    assert set(sys.modules) == before  # the half-imported module is not left behind


# --- invocation ---------------------------------------------------------------------------------


async def test_invoke_validates_and_fills_defaults() -> None:
    registry = ToolRegistry()
    registry.register(add)
    assert await registry.invoke("add_numbers", {"a": 40}, context()) == 42
    assert await registry.invoke("add_numbers", {"a": 1, "b": 1}, context()) == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            {"a": "forty"},
            "tool 'add_numbers': 'a' input should be a valid integer, unable to parse string as an integer",
        ),
        ({"b": 1}, "tool 'add_numbers': 'a' field required"),
        ({"a": 1, "c": 3}, "tool 'add_numbers': 'c' extra inputs are not permitted"),
    ],
)
async def test_invoke_refuses_bad_arguments_naming_the_field(args: dict, message: str) -> None:
    registry = ToolRegistry()
    registry.register(add)
    with pytest.raises(ToolArgumentsError) as caught:
        await registry.invoke("add_numbers", args, context())
    assert str(caught.value) == message


async def test_invoke_names_nested_fields() -> None:
    registry = ToolRegistry()
    registry.register(create_customer)
    with pytest.raises(ToolArgumentsError, match=r"'address\.city' field required"):
        await registry.invoke("create_customer", {"name": "a", "age": 1, "address": {"zip_code": "1"}}, context())


async def test_sync_tool_runs_in_a_worker_thread_and_async_tool_is_awaited() -> None:
    loop_thread = threading.get_ident()

    def blocking(label: str) -> dict:
        return {"label": label, "thread": threading.get_ident()}

    async def nonblocking(label: str) -> dict:
        await asyncio.sleep(0)
        return {"label": label, "thread": threading.get_ident()}

    registry = ToolRegistry()
    registry.register(blocking)
    registry.register(nonblocking)
    sync_result = await registry.invoke("blocking", {"label": "s"}, context())
    async_result = await registry.invoke("nonblocking", {"label": "a"}, context())
    assert sync_result["label"] == "s" and sync_result["thread"] != loop_thread
    assert async_result["label"] == "a" and async_result["thread"] == loop_thread


async def test_invoke_passes_the_tool_context() -> None:
    seen: list[ToolContext] = []

    async def remember(note: str, context_: ToolContext) -> str:
        seen.append(context_)
        return f"{note}:{context_.idempotency_key}:{context_.attempt}"

    registry = ToolRegistry()
    registry.register(remember)
    ctx = context(step_id="charge", revision=2, attempt=3)
    assert await registry.invoke("remember", {"note": "n"}, ctx) == "n:run-7/x1/charge/r2:3"
    assert seen == [ctx]


async def test_output_is_made_json_ready() -> None:
    def shaped() -> dict:
        return {"address": Address(city="Oslo"), "pair": (1, 2), "path": Path("/a/b")}

    registry = ToolRegistry()
    registry.register(shaped)
    assert await registry.invoke("shaped", {}, context()) == {
        "address": {"city": "Oslo", "zip_code": None},
        "pair": [1, 2],
        "path": "/a/b",
    }


async def test_non_serializable_output_is_a_permanent_tool_error() -> None:
    def opaque() -> object:
        return object()

    registry = ToolRegistry()
    registry.register(opaque)
    with pytest.raises(ToolError) as caught:
        await registry.invoke("opaque", {}, context())
    assert caught.value.retryable is False
    assert str(caught.value).startswith("tool 'opaque' returned a object, which is not JSON-serializable: ")


async def test_invoking_an_unknown_tool() -> None:
    registry = ToolRegistry()
    registry.register(add)
    with pytest.raises(UnknownToolError, match=r"^unknown tool 'sub' \(this worker has: add_numbers\)$"):
        await registry.invoke("sub", {}, context())


async def test_tool_errors_propagate_unchanged() -> None:
    def refuse(host: str) -> str:
        raise ToolError(f"host '{host}' is not allowed", retryable=False)

    registry = ToolRegistry()
    registry.register(refuse)
    with pytest.raises(ToolError, match="host 'evil.example' is not allowed") as caught:
        await registry.invoke("refuse", {"host": "evil.example"}, context())
    assert caught.value.retryable is False


# --- idempotency keys ---------------------------------------------------------------------------


def test_idempotency_key_is_run_step_revision_and_ignores_the_attempt() -> None:
    first = context(step_id="charge", revision=2, attempt=1)
    retry = context(step_id="charge", revision=2, attempt=5)
    assert first.idempotency_key == "run-7/x1/charge/r2"
    assert retry.idempotency_key == first.idempotency_key
    assert idempotency_key("run-7", "x1", "charge", 2) == "run-7/x1/charge/r2"


def test_idempotency_key_changes_with_revision_and_step() -> None:
    base = context(step_id="charge", revision=2).idempotency_key
    assert context(step_id="charge", revision=3).idempotency_key != base
    assert context(step_id="refund", revision=2).idempotency_key != base


def test_tool_definition_is_what_the_decorator_attaches() -> None:
    definition = ToolRegistry().register(add)
    assert isinstance(definition, ToolDefinition)
    assert definition.function is add
    assert definition.context_parameter is None


def test_the_catalogue_is_built_once_and_again_after_a_registration() -> None:
    registry = ToolRegistry.from_modules([], builtins=True)
    first = registry.catalog()
    assert registry.catalog() is first  # every run asks; the schemas are not rebuilt

    @tool
    def added(x: int) -> int:
        """Added late."""
        return x

    registry.register(added)
    assert "added" in registry.catalog().names and "added" not in first.names
