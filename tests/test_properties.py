"""Property-based tests of bad input: random graphs, plans, plan files, model outputs and references.

Every property checks an oracle computed here, independently of the code under test where one
exists (cycles with graphlib, ancestors with a plain walk, resolved text from the pieces it was
built from), not merely that nothing crashed. Runs are derandomized and keep no example
database, so CI sees the same examples every time.
"""

from __future__ import annotations

import graphlib
import itertools
import json
import math
from collections.abc import Coroutine
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from stratagem.common.errors import ModelOutputError, PlanFileError, ReferenceResolutionError, StratagemError
from stratagem.domain.plan import PlanDraft
from stratagem.domain.references import Reference, find_references, is_single_reference, resolve, resolve_text
from stratagem.domain.validation import plan_problems
from stratagem.io.plan_files import dump_plan, load_plan_file
from stratagem.io.planner import parse_plan_output, plan_with_repairs
from stratagem.models import ModelRequest, ModelResponse, Usage
from stratagem.tools import ToolCatalog, ToolRegistry

pytestmark = pytest.mark.unit

PROPERTY = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def greet(name: str, greeting: str = "Hello") -> str:
    """Make a greeting."""
    return f"{greeting}, {name}!"


def total(values: list[int]) -> int:
    """Sum a list of integers."""
    return sum(values)


def _catalog() -> ToolCatalog:
    registry = ToolRegistry()
    for fn in (add, greet, total):
        registry.register(fn)
    return registry.catalog()


CATALOG = _catalog()
TOOL_NAMES = ("add", "greet", "total")
AVAILABLE = " (available: add, greet, total)"


# --- strategies ---------------------------------------------------------------------------------

# Step ids in the step-id grammar (short, so failing examples stay readable).
IDS = st.from_regex(r"[A-Za-z_][A-Za-z0-9_-]{0,7}", fullmatch=True)
PATHS = st.lists(st.from_regex(r"[A-Za-z0-9_-]{1,5}", fullmatch=True), max_size=3).map(tuple)
# Text that holds no reference and no escape: no '$' at all.
PLAIN = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="$"), max_size=12)
TITLES = PLAIN.filter(lambda s: len(s) >= 1)
INSTRUCTIONS = PLAIN.filter(lambda s: bool(s.strip()))
JSON_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False), PLAIN
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(PLAIN, inner, max_size=4)),
    max_leaves=12,
)


def ref_text(step_id: str, path: tuple[str, ...]) -> str:
    return "${" + ".".join((step_id, *path)) + "}"


def tool_step(step_id: str, depends_on: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "id": step_id,
        "title": step_id,
        "tool": "add",
        "args": {"a": 1, "b": 2},
        "depends_on": depends_on or [],
        **extra,
    }


def draft_of(steps: list[dict[str, Any]]) -> PlanDraft:
    return PlanDraft.model_validate({"goal": "property", "steps": steps})


def with_optional_hint(actual: str, base: str, known: Any, tail: str = "") -> bool:
    """`actual` is `base`, then maybe a "(did you mean 'x'?)" naming one of `known`, then `tail`."""
    if not (actual.startswith(base) and actual.endswith(tail)):
        return False
    middle = actual[len(base) : len(actual) - len(tail)]
    return middle == "" or middle in {f" (did you mean '{k}'?)" for k in known}


def ancestors_of(edges: dict[str, list[str]], node: str) -> set[str]:
    """Every node `node` reaches through depends_on (an oracle for graph.ancestry)."""
    seen: set[str] = set()
    stack = [d for d in edges[node] if d in edges]
    while stack:
        dep = stack.pop()
        if dep not in seen:
            seen.add(dep)
            stack.extend(d for d in edges[dep] if d in edges)
    return seen


def run_now(coro: Coroutine[Any, Any, Any]) -> Any:
    """Drive a coroutine that never waits (the fake model answers at once), without an event loop."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise AssertionError("the coroutine waited for something; nothing in these tests should")


# --- dependency cycles --------------------------------------------------------------------------


@st.composite
def dependency_graphs(draw: st.DrawFn, max_nodes: int = 10) -> dict[str, list[str]]:
    """Random depends_on lists over up to 10 steps, self-dependencies included."""
    ids = draw(st.lists(IDS, min_size=1, max_size=max_nodes, unique=True))
    return {sid: draw(st.lists(st.sampled_from(ids), unique=True, max_size=4)) for sid in ids}


def parse_cycle(problem: str) -> list[str]:
    assert problem.startswith("dependency cycle: ")
    return problem.removeprefix("dependency cycle: ").split(" -> ")


@settings(PROPERTY, max_examples=200)
@given(dependency_graphs())
def test_a_cycle_is_reported_iff_the_graph_has_one_and_each_named_cycle_is_real(edges: dict[str, list[str]]) -> None:
    problems = plan_problems(draft_of([tool_step(sid, deps) for sid, deps in edges.items()]), CATALOG)

    proper = {sid: [d for d in deps if d != sid] for sid, deps in edges.items()}
    try:
        graphlib.TopologicalSorter(proper).prepare()
        has_cycle = False
    except graphlib.CycleError:
        has_cycle = True

    self_deps = [f"step '{sid}' depends on itself" for sid, deps in edges.items() if sid in deps]
    cycle_problems = [p for p in problems if p.startswith("dependency cycle: ")]
    # Nothing else is wrong with these plans: self-dependencies first (in step order), then cycles.
    assert problems == self_deps + cycle_problems
    assert bool(cycle_problems) == has_cycle
    assert len(set(cycle_problems)) == len(cycle_problems), "a cycle is named twice"

    cycles = [parse_cycle(p) for p in cycle_problems]
    for cycle in cycles:
        nodes = cycle[:-1]
        assert cycle[0] == cycle[-1], cycle
        assert len(nodes) >= 2 and len(set(nodes)) == len(nodes), cycle  # a simple cycle, no self-loop
        assert cycle[0] == min(nodes), f"{cycle} is not rotated to start at its smallest id"
        for node, dep in itertools.pairwise(cycle):
            assert dep in edges[node], f"{cycle}: '{node}' does not depend on '{dep}'"

    # Every strongly connected knot of steps gets at least one named cycle inside it.
    reach = {sid: ancestors_of(proper, sid) for sid in proper}
    knots = {frozenset({sid} | {o for o in reach[sid] if sid in reach[o]}) for sid in proper if sid in reach[sid]}
    for knot in knots:
        assert any(set(cycle) <= knot for cycle in cycles), f"no cycle named among {sorted(knot)}"


# --- dangling dependencies and references ------------------------------------------------------


@st.composite
def plans_with_dangling_links(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[tuple[str, str, str]], list[str]]:
    """An acyclic plan whose steps may depend on missing steps and reference any id at all.

    Returns the steps, the problems expected (kind, step, detail) in the order validation lists
    them, and the known ids."""
    ids = draw(st.lists(IDS, min_size=1, max_size=8, unique=True))
    absent_deps = st.text(max_size=10).filter(lambda s: s not in ids)
    absent_ids = IDS.filter(lambda s: s not in ids)
    edges: dict[str, list[str]] = {}
    steps, missing_problems, ref_targets = [], [], {}
    for i, sid in enumerate(ids):
        deps = draw(st.lists(st.sampled_from(ids[:i]), unique=True, max_size=3)) if i else []
        missing = draw(st.lists(absent_deps, max_size=2))
        depends_on = draw(st.permutations(deps + missing))
        edges[sid] = depends_on
        missing_problems += [("missing_dep", sid, d) for d in depends_on if d not in ids]

        # Instructions and the one string argument mix plain text, escaped "$${x}" (never a
        # reference) and references to existing, missing or own ids.
        def text_with_refs() -> tuple[str, list[Reference]]:
            parts, refs = [], []
            for _ in range(draw(st.integers(0, 3))):
                parts.append(draw(PLAIN))
                choice = draw(st.sampled_from(["ref", "ref", "escaped"]))
                target = draw(st.one_of(st.sampled_from(ids), absent_ids))
                path = draw(PATHS)
                if choice == "escaped":
                    parts.append("$" + ref_text(target, path))
                else:
                    parts.append(ref_text(target, path))
                    refs.append(Reference(target, path))
            parts.append(draw(PLAIN))
            return "".join(parts), refs

        instructions, refs = text_with_refs()
        argument, arg_refs = text_with_refs()
        ref_targets[sid] = refs + arg_refs
        steps.append(
            {
                "id": sid,
                "title": sid,
                "instructions": instructions,
                "tool": "greet",
                "args": {"name": argument},
                "depends_on": depends_on,
            }
        )

    ref_problems = []
    for sid in ids:
        ancestors = ancestors_of(edges, sid)
        for ref in ref_targets[sid]:
            if ref.step_id not in ids:
                ref_problems.append(("missing_ref", sid, str(ref)))
            elif ref.step_id == sid:
                ref_problems.append(("own_ref", sid, str(ref)))
            elif ref.step_id not in ancestors:
                ref_problems.append(("stranger_ref", sid, str(ref)))
    return steps, missing_problems + ref_problems, ids


@settings(PROPERTY, max_examples=100)
@given(plans_with_dangling_links())
def test_missing_dependencies_and_stray_references_are_each_reported_naming_the_step(
    case: tuple[list[dict[str, Any]], list[tuple[str, str, str]], list[str]],
) -> None:
    steps, expected, ids = case
    problems = plan_problems(draft_of(steps), CATALOG)
    assert len(problems) == len(expected), f"expected {expected}, got {problems}"
    for actual, (kind, sid, detail) in zip(problems, expected, strict=False):
        if kind == "missing_dep":
            assert with_optional_hint(actual, f"step '{sid}' depends on missing step '{detail}'", ids), actual
        elif kind == "missing_ref":
            target_id = detail[2:-1].split(".")[0]
            base = f"step '{sid}' references {detail}, but there is no step '{target_id}'"
            assert with_optional_hint(actual, base, ids), actual
        elif kind == "own_ref":
            assert actual == f"step '{sid}' references its own output {detail}"
        else:
            target_id = detail[2:-1].split(".")[0]
            assert actual == (
                f"step '{sid}' references {detail}, but '{target_id}' is not among its dependencies; "
                f"add '{target_id}' to depends_on (directly or through another step)"
            )


# --- unknown tools and wrong argument types ----------------------------------------------------

NOT_INT = st.one_of(
    PLAIN,
    st.floats().filter(lambda x: not (math.isfinite(x) and x == int(x))),
    st.booleans(),
    st.none(),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(PLAIN, st.integers(), max_size=2),
)
NOT_STR = st.one_of(
    st.integers(),
    st.floats(),
    st.booleans(),
    st.none(),
    st.lists(PLAIN, max_size=2),
    st.dictionaries(PLAIN, PLAIN, max_size=2),
)
NOT_LIST = st.one_of(PLAIN, st.integers(), st.booleans(), st.none(), st.dictionaries(PLAIN, st.integers(), max_size=2))
WRONG = {"a": NOT_INT, "b": NOT_INT, "name": NOT_STR, "greeting": NOT_STR, "values": NOT_LIST}
PARAMS = {"add": ("a", "b"), "greet": ("name", "greeting"), "total": ("values",)}
REQUIRED = {"add": ("a", "b"), "greet": ("name",), "total": ("values",)}


@st.composite
def good_args(draw: st.DrawFn, tool: str) -> dict[str, Any]:
    if tool == "add":
        return {"a": draw(st.integers()), "b": draw(st.integers())}
    if tool == "greet":
        args = {"name": draw(PLAIN)}
        if draw(st.booleans()):
            args["greeting"] = draw(PLAIN)
        return args
    return {"values": draw(st.lists(st.integers(), max_size=4))}


@st.composite
def tool_calls(draw: st.DrawFn) -> tuple[dict[str, Any], str, str]:
    """A step with one defect (or none), the defect's name and what its problem must say."""
    defect = draw(
        st.sampled_from(
            [
                "none",
                "none",
                "unknown_tool",
                "no_tool",
                "wrong_type",
                "wrong_item",
                "missing",
                "extra",
                "allows_unknown",
            ]
        )
    )
    tool = draw(st.sampled_from(TOOL_NAMES))
    args = draw(good_args(tool))
    if defect == "unknown_tool":
        tool = draw(st.text(min_size=1, max_size=10).filter(lambda t: t not in TOOL_NAMES))
        return {"tool": tool, "args": args}, defect, f"uses unknown tool '{tool}'"
    if defect == "no_tool":
        return {"tool": draw(st.sampled_from([None, ""])), "args": args}, defect, "is a tool step but names no tool"
    if defect == "allows_unknown":
        name = draw(st.text(min_size=1, max_size=10).filter(lambda t: t not in TOOL_NAMES))
        allowed = draw(st.permutations([*draw(st.lists(st.sampled_from(TOOL_NAMES), unique=True)), name]))
        step = {"kind": "llm", "instructions": "think", "tools": allowed}
        return step, defect, f"allows unknown tool '{name}'"
    if defect == "wrong_type":
        param = draw(st.sampled_from(PARAMS[tool]))
        args[param] = draw(WRONG[param])
        return {"tool": tool, "args": args}, defect, f"argument '{param}' of tool '{tool}' is invalid: "
    if defect == "wrong_item":
        tool = "total"
        values = draw(st.lists(st.integers(), max_size=3))
        index = draw(st.integers(0, len(values)))
        values.insert(index, draw(NOT_INT))
        return (
            {"tool": tool, "args": {"values": values}},
            defect,
            f"argument 'values.{index}' of tool 'total' is invalid: ",
        )
    if defect == "missing":
        param = draw(st.sampled_from(REQUIRED[tool]))
        args.pop(param)
        return {"tool": tool, "args": args}, defect, f"tool '{tool}' is missing required argument '{param}'"
    if defect == "extra":
        key = draw(st.text(max_size=8).filter(lambda k: k not in PARAMS[tool]))
        args[key] = draw(JSON_SCALARS)
        return {"tool": tool, "args": args}, defect, f"tool '{tool}' got unexpected arguments: "
    return {"tool": tool, "args": args}, defect, ""


@settings(PROPERTY, max_examples=150)
@given(st.lists(tool_calls(), min_size=1, max_size=8), st.data())
def test_each_step_with_an_unknown_tool_or_bad_arguments_gets_one_problem_and_good_steps_none(
    calls: list[tuple[dict[str, Any], str, str]], data: st.DataObject
) -> None:
    ids = data.draw(st.lists(IDS, min_size=len(calls), max_size=len(calls), unique=True))
    steps = [{"id": sid, "title": sid, **call} for sid, (call, _, _) in zip(ids, calls, strict=False)]
    problems = plan_problems(draft_of(steps), CATALOG)

    bad = [(sid, defect, says) for sid, (_, defect, says) in zip(ids, calls, strict=False) if defect != "none"]
    assert len(problems) == len(bad), f"expected one problem for each of {bad}, got {problems}"
    for actual, (sid, defect, says) in zip(problems, bad, strict=False):
        if defect in ("unknown_tool", "allows_unknown"):
            assert with_optional_hint(actual, f"step '{sid}' {says}", TOOL_NAMES, AVAILABLE), actual
        elif defect == "no_tool":
            assert actual == f"step '{sid}' {says}"
        else:
            assert actual.startswith(f"step '{sid}': {says}"), actual


@PROPERTY
@given(
    st.sampled_from(TOOL_NAMES).flatmap(
        lambda tool: st.tuples(st.just(tool), st.sampled_from(PARAMS[tool]), IDS, PATHS)
    )
)
def test_an_argument_holding_a_reference_is_not_type_checked_until_run_time(
    case: tuple[str, str, str, tuple[str, ...]],
) -> None:
    tool, param, source, path = case
    consumer = "consumer" if source != "consumer" else "consumer2"
    args = {p: ("x" if tool == "greet" else [1] if tool == "total" else 1) for p in REQUIRED[tool]}
    args[param] = ref_text(source, path)  # a string where the schema may want another type: checked when it runs
    steps = [tool_step(source), {"id": consumer, "title": "c", "tool": tool, "args": args, "depends_on": [source]}]
    assert plan_problems(draft_of(steps), CATALOG) == []


# --- huge plans ---------------------------------------------------------------------------------

HUGE = 5000


def test_a_huge_chain_validates_without_recursion_and_finds_far_references() -> None:
    steps = [tool_step(f"s{i}", [f"s{i - 1}"] if i else []) for i in range(HUGE)]
    steps[-1] = {**steps[-1], "instructions": "Use ${s0} and ${s2500.x}"}
    assert plan_problems(draft_of(steps), CATALOG) == []

    # The first step cannot see the last one: it is a descendant, not an ancestor.
    steps[0] = {**steps[0], "instructions": f"Use ${{s{HUGE - 1}}}"}
    assert plan_problems(draft_of(steps), CATALOG) == [
        f"step 's0' references ${{s{HUGE - 1}}}, but 's{HUGE - 1}' is not among its dependencies; "
        f"add 's{HUGE - 1}' to depends_on (directly or through another step)"
    ]


def test_a_huge_ring_is_one_cycle_named_in_short() -> None:
    steps = [tool_step(f"s{i:04d}", [f"s{(i - 1) % HUGE:04d}"]) for i in range(HUGE)]
    edges = {s["id"]: s["depends_on"] for s in steps}
    problems = plan_problems(draft_of(steps), CATALOG)
    assert len(problems) == 1
    head, _, rest = problems[0].removeprefix("dependency cycle: ").partition(" -> ... (")
    hidden, _, tail = rest.partition(" more) -> ")
    head_ids, tail_ids = head.split(" -> "), tail.split(" -> ")
    assert (len(head_ids), len(tail_ids), int(hidden)) == (5, 5, HUGE + 1 - 10)
    assert head_ids[0] == tail_ids[-1] == "s0000"
    for part in (head_ids, tail_ids):
        for node, dep in itertools.pairwise(part):
            assert edges[node] == [dep]


def test_a_huge_fan_out_and_in_validates_and_pins_the_one_stray_reference() -> None:
    leaves = [tool_step(f"leaf{i}", ["root"], instructions=f"${{root.items.{i}}}") for i in range(HUGE)]
    join = tool_step("join", [leaf["id"] for leaf in leaves], instructions=f"${{root}} ${{leaf{HUGE - 1}}} ${{orphan}}")
    steps = [tool_step("root"), *leaves, join, tool_step("orphan"), tool_step("gap", ["nowhere"])]
    assert plan_problems(draft_of(steps), CATALOG) == [
        "step 'gap' depends on missing step 'nowhere'",
        "step 'join' references ${orphan}, but 'orphan' is not among its dependencies; "
        "add 'orphan' to depends_on (directly or through another step)",
    ]


# --- references ---------------------------------------------------------------------------------

# Text dense in the characters the reference syntax cares about.
REFERENCE_SOUP = st.lists(
    st.sampled_from(
        ["$", "${", "$${", "{", "}", ".", "a", "B_", "-", "0", "x9", " ", "\n", "${a}", "${B_.x9}", "${a.0.a}"]
    )
    | st.characters(),
    max_size=20,
).map("".join)


def escape(text: str) -> str:
    """The documented escape: write "$${" for a literal "${"."""
    return text.replace("${", "$${")


@settings(PROPERTY, max_examples=200)
@given(REFERENCE_SOUP, st.dictionaries(st.sampled_from(["a", "B_"]) | IDS, JSON_VALUES, max_size=3))
def test_reference_parsing_and_resolution_of_any_text_fail_only_with_reference_errors(
    text: str, outputs: dict[str, Any]
) -> None:
    refs = find_references(text)
    for ref in refs:
        assert str(ref) in text  # a reference renders exactly as it was written
    try:
        resolved = resolve_text(text, outputs)
    except ReferenceResolutionError as exc:
        assert refs, f"{text!r} has no references, yet resolving it failed: {exc}"
        assert any(f"'{ref.step_id}'" in str(exc) for ref in refs), str(exc)
        return
    assert all(ref.step_id in outputs for ref in refs)
    if not refs:
        assert resolved == text.replace("$${", "${")


@settings(PROPERTY, max_examples=200)
@given(REFERENCE_SOUP)
def test_escaped_text_holds_no_reference_and_resolves_to_itself(text: str) -> None:
    escaped = escape(text)
    assert find_references(escaped) == []
    assert not is_single_reference(escaped)
    assert resolve_text(escaped, {}) == text
    assert resolve({"k": [escaped, {"deep": escaped}], "n": 1}, {}) == {"k": [text, {"deep": text}], "n": 1}


@st.composite
def outputs_and_paths(draw: st.DrawFn) -> tuple[dict[str, Any], str, tuple[str, ...], Any]:
    """Outputs, and a reference into them whose path exists (with the value it reaches)."""
    keys = st.from_regex(r"[A-Za-z0-9_-]{1,5}", fullmatch=True)
    values = st.recursive(
        JSON_SCALARS,
        lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(keys, inner, max_size=3)),
        max_leaves=8,
    )
    outputs = draw(st.dictionaries(IDS, values, min_size=1, max_size=3))
    step_id = draw(st.sampled_from(sorted(outputs)))
    value, path = outputs[step_id], []
    while draw(st.booleans()):
        if isinstance(value, dict) and value:
            key = draw(st.sampled_from(sorted(value)))
        elif isinstance(value, list) and value:
            key = str(draw(st.integers(0, len(value) - 1)))
        else:
            break
        value = value[key] if isinstance(value, dict) else value[int(key)]
        path.append(key)
    return outputs, step_id, tuple(path), value


def render(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), sort_keys=True)


@settings(PROPERTY, max_examples=60)
@given(
    st.lists(
        st.one_of(REFERENCE_SOUP.map(lambda t: ("text", t)), outputs_and_paths().map(lambda o: ("ref", o))), max_size=5
    )
)
def test_text_built_from_literals_and_references_resolves_to_what_it_was_built_from(
    pieces: list[tuple[str, Any]],
) -> None:
    outputs: dict[str, Any] = {}
    text, expected, single = "", [], None
    for kind, piece in pieces:
        if kind == "text":
            # A literal "$" right before a reference would turn it into an escape: keep them apart.
            literal = piece + " " if piece.endswith("$") else piece
            text += escape(literal)
            expected.append(literal)
        else:
            these, source, path, value = piece
            step_id = f"{source}_{len(outputs)}"  # unique across pieces
            outputs[step_id] = these[source]
            text += ref_text(step_id, path)
            expected.append(render(value))
            single = value
    resolved = resolve_text(text, outputs)
    refs = [piece for kind, piece in pieces if kind == "ref"]
    if len(refs) == 1 and all(piece == "" for kind, piece in pieces if kind == "text"):
        assert resolved == single and type(resolved) is type(single)  # one whole reference keeps its type
    else:
        assert resolved == "".join(expected)


@PROPERTY
@given(outputs_and_paths(), st.from_regex(r"[A-Za-z0-9_-]{1,5}", fullmatch=True))
def test_a_path_past_the_output_or_a_missing_step_raises_a_reference_error(
    case: tuple[dict[str, Any], str, tuple[str, ...], Any], extra: str
) -> None:
    outputs, step_id, path, value = case
    if not (
        (isinstance(value, dict) and extra in value)
        or (isinstance(value, list) and extra.isdigit() and int(extra) < len(value))
    ):
        with pytest.raises(ReferenceResolutionError, match="has no field or index"):
            resolve_text(ref_text(step_id, (*path, extra)), outputs)
    with pytest.raises(ReferenceResolutionError, match="which has no output"):
        resolve_text("see " + ref_text(step_id + "_missing", path), outputs)


# --- plan files ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("plan-files")


SUFFIXES = st.sampled_from([".yaml", ".yml", ".json", ".JSON", ".txt"])


def load_outcome(path: Path) -> PlanDraft | PlanFileError:
    """What load_plan_file gives: a draft or a PlanFileError. Anything else fails the test."""
    try:
        return load_plan_file(path)
    except PlanFileError as exc:
        assert isinstance(exc, StratagemError)
        message = str(exc)
        assert message.startswith(f"plan file '{path}' "), message
        return exc


@settings(PROPERTY, max_examples=100)
@given(st.binary(max_size=200), SUFFIXES)
@example(data=b"\xff", suffix=".yaml")  # not UTF-8
def test_a_plan_file_of_random_bytes_loads_or_fails_with_a_plan_file_error(
    folder: Path, data: bytes, suffix: str
) -> None:
    path = folder / f"bytes{suffix}"
    path.write_bytes(data)
    load_outcome(path)


@settings(PROPERTY, max_examples=150)
@given(st.text(max_size=200) | REFERENCE_SOUP, SUFFIXES)
def test_a_plan_file_of_random_text_loads_or_fails_with_a_short_plan_file_error(
    folder: Path, text: str, suffix: str
) -> None:
    path = folder / f"text{suffix}"
    path.write_bytes(text.encode("utf-8"))
    outcome = load_outcome(path)
    if isinstance(outcome, PlanFileError):
        # One line, or two when PyYAML's reader names the position of a character it refuses.
        assert len(str(outcome).splitlines()) <= 2, str(outcome)


# Nesting deeper than the parsers' recursion allows. Explicit cases rather than generated ones:
# a RecursionError makes Hypothesis's shrinking and explaining very slow.
DEEP = [("[" * 1000 + "1", ".json"), ("- " * 1000 + "1", ".yaml")]


@pytest.mark.parametrize(("text", "suffix"), DEEP, ids=["json", "yaml"])
def test_a_deeply_nested_plan_file_fails_with_a_plan_file_error(folder: Path, text: str, suffix: str) -> None:
    path = folder / f"deep{suffix}"
    path.write_text(text, encoding="utf-8")
    load_outcome(path)


PLAN_KEYS = [
    "goal",
    "steps",
    "reason",
    "id",
    "title",
    "instructions",
    "kind",
    "tool",
    "args",
    "tools",
    "tier",
    "depends_on",
    "success_criteria",
    "risk",
    "requires_approval",
    "output_format",
    "timeout_seconds",
    "max_attempts",
]
KEYS = st.sampled_from(PLAN_KEYS) | st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp")), max_size=6
)
STRUCTURES = st.recursive(
    JSON_SCALARS | st.sampled_from(["tool", "llm", "human", "high", "json", "add", "x"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=5),
    max_leaves=25,
)


def write_data(folder: Path, data: Any, suffix: str) -> Path:
    path = folder / f"data{suffix}"
    # ASCII-only YAML: PyYAML writes some characters (U+0085) raw that it then reads differently.
    text = json.dumps(data) if suffix == ".json" else yaml.safe_dump(data)
    assert (json.loads(text) if suffix == ".json" else yaml.safe_load(text)) == data, "the test wrote the data wrong"
    path.write_text(text, encoding="utf-8")
    return path


def assert_loads_like_the_model(path: Path, data: Any) -> None:
    """load_plan_file agrees with PlanDraft itself: the same draft, or a one-line PlanFileError."""
    outcome = load_outcome(path)
    try:
        expected: PlanDraft | None = PlanDraft.model_validate(data) if isinstance(data, dict) else None
    except ValueError:
        expected = None
    if expected is None:
        assert isinstance(outcome, PlanFileError), f"{data!r} loaded as {outcome!r}"
        assert "\n" not in str(outcome), str(outcome)
    else:
        assert outcome == expected


@settings(PROPERTY, max_examples=120)
@given(
    STRUCTURES
    | st.fixed_dictionaries(
        {"goal": STRUCTURES, "steps": st.lists(st.dictionaries(KEYS, STRUCTURES, max_size=6), max_size=3)}
    ),
    st.sampled_from([".json", ".yaml"]),
)
def test_a_plan_file_of_random_structures_loads_as_the_plan_model_says(folder: Path, data: Any, suffix: str) -> None:
    assert_loads_like_the_model(write_data(folder, data, suffix), data)


@st.composite
def valid_drafts(draw: st.DrawFn, max_steps: int = 6, timeouts: st.SearchStrategy[float] | None = None) -> PlanDraft:
    """Plans that validate against CATALOG: a random DAG of tool, llm and human steps."""
    if timeouts is None:
        timeouts = st.floats(min_value=0, exclude_min=True, max_value=1e6)
    ids = draw(st.lists(IDS, min_size=1, max_size=max_steps, unique=True))
    steps = []
    for i, sid in enumerate(ids):
        deps = draw(st.lists(st.sampled_from(ids[:i]), unique=True, max_size=3)) if i else []
        refs = "".join(ref_text(d, ()) for d in draw(st.lists(st.sampled_from(deps), max_size=2))) if deps else ""
        kind = draw(st.sampled_from(["tool", "llm", "human"]))
        step: dict[str, Any] = {"id": sid, "title": draw(TITLES), "kind": kind, "depends_on": deps}
        if kind == "tool":
            step["tool"] = tool = draw(st.sampled_from(TOOL_NAMES))
            step["args"] = draw(good_args(tool))
            if tool == "greet" and refs:
                step["args"]["name"] += refs
        else:
            step["instructions"] = draw(INSTRUCTIONS) + refs
        if kind == "llm":
            step["tools"] = draw(st.lists(st.sampled_from(TOOL_NAMES), unique=True))
            step["output_format"] = draw(st.sampled_from(["text", "json"]))
        optional = {
            "risk": st.sampled_from(["low", "medium", "high"]),
            "requires_approval": st.booleans(),
            "timeout_seconds": timeouts,
            "max_attempts": st.integers(1, 20),
            "success_criteria": st.lists(PLAIN, max_size=2),
        }
        for key in draw(st.lists(st.sampled_from(sorted(optional)), unique=True)):
            step[key] = draw(optional[key])
        steps.append(step)
    draft = PlanDraft.model_validate({"goal": draw(TITLES), "steps": steps, "reason": draw(PLAIN)})
    assert plan_problems(draft, CATALOG) == [], "the strategy made an invalid plan"
    return draft


@st.composite
def mutated_plans(draw: st.DrawFn) -> Any:
    """A valid plan's data with one random change somewhere."""
    data = draw(valid_drafts(max_steps=3)).model_dump(mode="json")
    node, parent, key = data, None, None
    while isinstance(node, (dict, list)) and node and draw(st.booleans()):
        parent = node
        key = draw(st.sampled_from(sorted(node))) if isinstance(node, dict) else draw(st.integers(0, len(node) - 1))
        node = node[key]
    mutation = draw(st.sampled_from(["replace", "delete", "add", "duplicate"]))
    if parent is None:
        return draw(STRUCTURES) if mutation == "replace" else data
    if mutation == "replace":
        parent[key] = draw(STRUCTURES)
    elif mutation == "delete":
        del parent[key]
    elif mutation == "add" and isinstance(parent, dict):
        parent[draw(KEYS)] = draw(STRUCTURES)
    elif mutation == "duplicate" and isinstance(parent, list):
        parent.append(parent[key])
    return data


@settings(PROPERTY, max_examples=120)
@given(mutated_plans(), st.sampled_from([".json", ".yaml", ".yml"]))
def test_a_mutated_plan_file_loads_as_the_plan_model_says(folder: Path, data: Any, suffix: str) -> None:
    assert_loads_like_the_model(write_data(folder, data, suffix), data)


@settings(PROPERTY, max_examples=100)
@given(valid_drafts())
@example(draft=draft_of([tool_step("a")]).model_copy(update={"reason": "\x85"}))  # U+0085, NEXT LINE
def test_a_dumped_plan_loads_back_unchanged(folder: Path, draft: PlanDraft) -> None:
    path = folder / "dumped.yaml"
    path.write_text(dump_plan(draft), encoding="utf-8")
    assert load_plan_file(path) == draft


@settings(PROPERTY, max_examples=100)
@given(st.floats(min_value=0, exclude_min=True))
@example(math.inf)
@example(1e15)  # past timedelta's 999,999,999 days
def test_an_accepted_timeout_survives_json_and_is_a_usable_duration(seconds: float) -> None:
    """A plan with a timeout it accepts travels to the workflow as JSON and becomes a timedelta
    there (workflows/stratagem_run.py), so an accepted timeout must survive both."""
    try:
        draft = draft_of([tool_step("slow", timeout_seconds=seconds)])
    except ValidationError:
        return  # refused by the plan model: fine
    if plan_problems(draft, CATALOG):
        return  # refused by validation: fine
    again, problems = parse_plan_output(draft.model_dump_json())
    assert problems == [] and again == draft, (
        f"timeout_seconds={seconds} came back as {again and again.steps[0].timeout_seconds}"
    )
    timedelta(seconds=seconds)


# --- model outputs ------------------------------------------------------------------------------


def assert_parse_contract(text: str) -> tuple[PlanDraft | None, list[str]]:
    draft, problems = parse_plan_output(text)
    if draft is None:
        assert problems and all(isinstance(p, str) and p for p in problems), problems
    else:
        assert isinstance(draft, PlanDraft) and problems == []
    return draft, problems


@settings(PROPERTY, max_examples=200)
@given(st.text(max_size=200) | REFERENCE_SOUP | STRUCTURES.map(json.dumps) | STRUCTURES.map(yaml.safe_dump))
def test_parse_plan_output_never_raises_on_random_text(text: str) -> None:
    assert_parse_contract(text)


@pytest.mark.parametrize("text", [text for text, _ in DEEP], ids=["json", "yaml"])
def test_parse_plan_output_never_raises_on_deeply_nested_text(text: str) -> None:
    assert_parse_contract(text)


@settings(PROPERTY, max_examples=120)
@given(STRUCTURES.filter(lambda d: isinstance(d, dict)) | mutated_plans())
def test_parse_plan_output_agrees_with_the_plan_model_on_json_objects(data: Any) -> None:
    draft, _ = assert_parse_contract(json.dumps(data))
    try:
        expected: PlanDraft | None = PlanDraft.model_validate(data) if isinstance(data, dict) else None
    except ValueError:
        expected = None
    assert draft == expected


FENCES = st.sampled_from(["{}", "```json\n{}\n```", "```\n{}\n```", "  ```json\n{}\n  ```  \n", "\n\n{}\n"])


@settings(PROPERTY, max_examples=100)
@given(valid_drafts(), FENCES, st.sampled_from([None, 2]))
def test_a_valid_draft_as_json_round_trips_fenced_or_not(draft: PlanDraft, fence: str, indent: int | None) -> None:
    text = fence.replace("{}", json.dumps(draft.model_dump(mode="json"), indent=indent, ensure_ascii=False))
    assert parse_plan_output(text) == (draft, [])
    assert parse_plan_output(draft.model_dump_json()) == (draft, [])


# --- the repair loop ----------------------------------------------------------------------------


class FakeModel:
    """Answers each planner request with the next text of a list."""

    def __init__(self, answers: list[str]):
        self.name = "fake:planner"
        self.answers = answers
        self.requests: list[ModelRequest] = []

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        return ModelResponse(
            text=self.answers[len(self.requests) - 1], model=self.name, usage=Usage(input_tokens=5, output_tokens=2)
        )


GARBAGE = st.one_of(
    st.text(max_size=60).filter(lambda t: "goal" not in t and "\\" not in t),
    STRUCTURES.filter(lambda d: not isinstance(d, dict) or "goal" not in d).map(json.dumps),
    IDS.map(lambda t: json.dumps({"goal": "g", "steps": [tool_step("a", tool=f"no_{t}")]})),
    IDS.map(
        lambda t: json.dumps({"goal": "g", "steps": [tool_step("a", [t]), tool_step(t, ["a"])]}) if t != "a" else "[]"
    ),
)


def problems_of(text: str) -> list[str]:
    draft, problems = parse_plan_output(text)
    return plan_problems(draft, CATALOG) if draft is not None else problems


@settings(PROPERTY, max_examples=80)
@given(st.lists(GARBAGE, max_size=6), valid_drafts(max_steps=3), st.integers(0, 4), st.integers(0, 50))
def test_the_repair_loop_succeeds_iff_the_garbage_fits_in_the_repairs(
    garbage: list[str], good: PlanDraft, max_repairs: int, first_call_index: int
) -> None:
    answers = [*garbage, good.model_dump_json()]
    model = FakeModel(answers)
    calls_made: list[Any] = []
    call = plan_with_repairs(
        model, "goal", CATALOG, max_repairs=max_repairs, first_call_index=first_call_index, on_call=calls_made.append
    )
    n = len(garbage)
    if n <= max_repairs:
        outcome = run_now(call)
        assert outcome.draft == good
        assert outcome.calls == n + 1
        assert outcome.rejected_attempts == [problems_of(g) for g in garbage]
        assert all(outcome.rejected_attempts)
        assert outcome.usage == Usage(input_tokens=5 * (n + 1), output_tokens=2 * (n + 1))
    else:
        with pytest.raises(ModelOutputError) as caught:
            run_now(call)
        last = problems_of(garbage[max_repairs])
        assert last
        assert str(caught.value) == (
            f"the planner gave no valid plan in {max_repairs + 1} attempt(s); last problems: " + "; ".join(last)
        )
    expected_calls = min(n, max_repairs) + 1
    assert len(model.requests) == len(calls_made) == expected_calls
    assert [r.call_index for r in model.requests] == list(range(first_call_index, first_call_index + expected_calls))
    # Each retry shows the model its previous answer and exactly what was wrong with it.
    for k, request in enumerate(model.requests[1:]):
        assistant, user = request.messages[-2:]
        assert (assistant.role, assistant.content) == ("assistant", answers[k])
        assert user.role == "user"
        assert all(f"- {p}" in user.content for p in problems_of(answers[k]))
