"""The plan schema a planner model is held to, and the output a planning call may take, both
built from the worker's tool catalogue (stratagem.io.planner asks for plans with them)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from stratagem.domain.catalog import ToolCatalog
from stratagem.domain.plan import STEP_ID_PATTERN, OutputFormat, PlanDraft, Risk

# Leave these out of the schema a planner is held to: they make constrained decoding slow or
# impossible (a grammar for `maxItems: 10000` crashed llama.cpp's server) and say nothing a
# model needs; the validation of the answer still applies them.
_UNCONSTRAINED = ("title", "maxItems", "minLength", "maxLength", "pattern", "format", "default", "examples")


def planner_schema(
    catalog: ToolCatalog, *, tiers: Collection[str] = (), approvers: bool = False, positional: bool = False
) -> dict[str, Any]:
    """The plan schema a planner model is held to, built from the worker's tools: a tool step's
    `tool` is one of their names and its `args` that tool's schema (one member of `anyOf` per
    tool), and an llm step's `tools` are tool names. A server that enforces the schema (strict
    JSON schema, a grammar) then cannot produce an unknown tool or ill-typed arguments.

    It is as small as it can be, since the request carries it and providers count it as input:
    shared parts are `$defs`, a tool step leaves out `kind` (tool is the default), and fields a
    planner has no business setting (time limits, attempts) are left to plan files. `depends_on`
    may be left out (no dependencies) and comes after the step's content: small models forced to
    write it first filled it with tool names. Each member
    starts with what tells the members apart (`tool`, or `kind`): a decoder held to the schema by a
    grammar then knows at once which member it is in; with `id` first, every member stayed open
    and llama.cpp's server ran a hundred times slower per token.

    `positional` (a first plan: no step has an id yet) leaves ids to the engine, which makes them
    from the titles (stratagem.io.plan_mending), and has `depends_on` name steps by their place,
    "step1" to "stepN", which the schema enumerates: a dependency cannot be misspelt, nor name a
    tool. A revision keeps ids, as its succeeded steps are named by theirs."""
    ref = {name: {"$ref": f"#/$defs/{name}"} for name in ("id", "title", "ids", "risk", "text", "words", "lines")}
    head = {"title": ref["title"]} if positional else {"id": ref["id"], "title": ref["title"]}
    tail: dict[str, Any] = {"risk": ref["risk"]}
    if approvers:
        tail["approvers"] = ref["lines"]
    names = catalog.names
    steps = [
        _member(
            {
                "tool": {"enum": [spec.name]},
                **head,
                "args": _bounded(_plain(spec.parameters)),
                "depends_on": ref["ids"],
                **tail,
            },
            ["tool", "args"],
            positional,
        )
        for spec in catalog.tools
    ]
    llm: dict[str, Any] = {
        "kind": {"enum": ["llm"]},
        **head,
        "instructions": ref["words"],
        "depends_on": ref["ids"],
        "tools": {"type": "array", "items": {"enum": names}} if names else {"type": "array", "maxItems": 0},
        "success_criteria": ref["lines"],
        "output_format": {"enum": [f.value for f in OutputFormat]},
        "output_schema": {"type": "object"},
    }
    if tiers:
        llm["tier"] = {"enum": sorted(tiers)}
    steps.append(_member({**llm, **tail}, ["kind", "instructions"], positional))
    human = {
        "kind": {"enum": ["human"]},
        **head,
        "instructions": ref["words"],
        "answer_schema": {"type": "object"},
    }
    steps.append(_member({**human, **tail}, ["kind", "instructions"], positional))
    places = {"enum": [f"step{n}" for n in range(1, most_steps(catalog) + 1)]}
    return {
        "type": "object",
        "properties": {
            "goal": ref["text"],
            "steps": {"type": "array", "minItems": 1, "maxItems": most_steps(catalog), "items": {"anyOf": steps}},
            "reason": ref["text"],
        },
        "required": ["goal", "steps"],
        "additionalProperties": False,
        "$defs": {
            **({} if positional else {"id": {"type": "string", "pattern": STEP_ID_PATTERN}}),
            "title": {"type": "string", "minLength": 1, "maxLength": TITLE_LENGTH},
            "ids": {
                "type": "array",
                "maxItems": MOST_DEPENDENCIES,
                "items": places if positional else {"type": "string"},
            },
            "risk": {"enum": [r.value for r in Risk]},
            "text": {"type": "string", "maxLength": TEXT_LENGTH},
            "words": {"type": "string", "minLength": 1, "maxLength": TEXT_LENGTH},
            "lines": {"type": "array", "maxItems": MOST_DEPENDENCIES, "items": {"$ref": "#/$defs/title"}},
        },
    }


# Bounds the schema sets on what a model writes, so that a model held to it by a grammar cannot
# run on (a 135M model wrote 400-character titles, and repeated a step until its output cap):
# far above what a plan a person reviews needs, and small enough for a grammar (a bound is
# unrolled into that many optional items; 10,000 of them crashed llama.cpp's server). The
# validation of the answer does not apply them: a plan file may hold longer text.
TITLE_LENGTH = 120
TEXT_LENGTH = 600
MOST_DEPENDENCIES = 12


def most_steps(catalog: ToolCatalog) -> int:
    """The most steps the planner schema allows: each tool four times over, and eight worded steps."""
    return 4 * len(catalog.tools) + 8


def _bounded(schema: Any) -> Any:
    """A tool's argument schema with TEXT_LENGTH on each string that sets no bound of its own."""
    if isinstance(schema, list):
        return [_bounded(v) for v in schema]
    if not isinstance(schema, dict):
        return schema
    bounded = {k: (_bounded(v) if k not in ("enum", "const", "required") else v) for k, v in schema.items()}
    if bounded.get("type") == "string" and "enum" not in bounded and "maxLength" not in bounded:
        bounded["maxLength"] = TEXT_LENGTH
    return bounded


def _member(properties: dict[str, Any], required: list[str], positional: bool) -> dict[str, Any]:
    first = [name for name in required if name in ("tool", "kind")]
    rest = [name for name in required if name not in first]
    return {
        "type": "object",
        "properties": properties,
        "required": [*first, *([] if positional else ["id"]), "title", *rest],
        "additionalProperties": False,
    }


def _plain(schema: dict[str, Any]) -> dict[str, Any]:
    """A tool's schema with its `$ref`s inlined and what constrained decoding cannot use left out."""
    definitions = schema.get("$defs") or schema.get("definitions") or {}

    def walk(node: Any, depth: int = 0) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str):
                target = definitions.get(ref.rpartition("/")[2])
                return walk(target, depth + 1) if target is not None and depth < 8 else {}
            plain: dict[str, Any] = {}
            for key, value in node.items():
                if key in _UNCONSTRAINED or key in ("$defs", "definitions"):
                    continue
                if key == "properties" and isinstance(value, dict):  # names, not keywords: keep them all
                    plain[key] = {name: walk(sub, depth) for name, sub in value.items()}
                elif key in ("required", "enum", "const"):
                    plain[key] = value
                else:
                    plain[key] = walk(value, depth)
            return plain
        if isinstance(node, list):
            return [walk(v, depth) for v in node]
        return node

    plain: dict[str, Any] = walk(schema)
    plain.setdefault("type", "object")
    return plain


# What a planning call may write, in tokens, whatever the catalogue: a plan of a few steps fits
# in the floor; the ceiling is far past any plan a person reviews (it was the only cap before).
_CAP_FLOOR = 768
_CAP_CEILING = 8192
_PLAN_OVERHEAD = 160  # the goal, the reason and the JSON around the steps
_STEP_OVERHEAD = 48  # a step's id, title, dependencies and risk, with their keys (~45 measured)
_PER_ARGUMENT = 14  # an argument's name and a short value
_WORDED_STEP = 100  # an llm or human step: its instructions (and success criteria)


def planner_output_cap(catalog: ToolCatalog, current: PlanDraft | None = None) -> int:
    """The most output tokens a planning call may take: room for the longest plan the catalogue
    can need (each tool used once and four worded steps, with every argument written out; a revision, the current plan's steps as well), and no more. A model that writes on past
    it (small local models do, repeating steps or a sentence) is cut there and asked to repair,
    instead of rambling until its time limit; the engine keeps the steps it wrote whole."""
    widest = max((_STEP_OVERHEAD + _PER_ARGUMENT * _arguments(spec.parameters) for spec in catalog.tools), default=0)
    step = max(widest, _WORDED_STEP)
    steps = len(catalog.tools) + 4 + (len(current.steps) if current is not None else 0)
    return max(_CAP_FLOOR, min(_CAP_CEILING, _PLAN_OVERHEAD + steps * step))


def _arguments(schema: dict[str, Any]) -> int:
    properties = schema.get("properties")
    return len(properties) if isinstance(properties, dict) else 4
