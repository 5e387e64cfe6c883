"""What a person's answer to a human step must look like: the step's `answer_schema`.

A small subset of JSON Schema: types, an object's fields (`properties`, `required`,
`additionalProperties`), a list's `items`, `enum` and `const`, and bounds on numbers, strings and
lists. The plan is checked against it when it is validated (the schema itself, and references
into the answer such as `${finance_review.status}`), and every answer is checked against it
before the run takes it, so a wrong answer is refused with one line naming the field and the step
keeps waiting. Plain functions, no Temporal: the workflow runs them in its update validator.

Only these keywords are allowed because a plan is untrusted input that the workflow evaluates:
`pattern` could make a person's answer cost the worker seconds of regular-expression
backtracking, and `$ref` could name documents elsewhere.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

KEYWORDS = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "enum",
        "const",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "minLength",
        "maxLength",
        "minItems",
        "maxItems",
        "title",
        "description",
    }
)


def schema_problems(schema: Any, where: str = "answer_schema") -> list[str]:
    """What is wrong with an answer schema: keywords outside the subset, or an invalid schema."""
    if not isinstance(schema, dict):
        return [f"{where} must be a JSON Schema object, not {type(schema).__name__}"]
    problems = [
        f"{where} uses '{key}', which answer schemas do not support (they take: {', '.join(sorted(KEYWORDS))})"
        for key in schema
        if key not in KEYWORDS
    ]
    properties = schema.get("properties")
    if isinstance(properties, dict):
        for name, sub in properties.items():
            problems.extend(schema_problems(sub, f"{where}.properties.{name}"))
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            problems.extend(schema_problems(schema[key], f"{where}.{key}"))
    if problems or where != "answer_schema":
        return problems
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        location = ".".join(str(p) for p in exc.absolute_path)
        return [f"{where}{'.' + location if location else ''} is not a valid schema: {exc.message}"]
    return []


def answer_problem(answer: Any, schema: dict[str, Any], what: str = "the answer") -> str | None:
    """Why `answer` does not fit `schema`, in one line naming the field; None if it fits. `what`
    names the value in the message (an output given by hand is checked the same way)."""
    errors = sorted(Draft202012Validator(schema).iter_errors(answer), key=lambda e: [str(p) for p in e.absolute_path])
    if not errors:
        return None
    error = errors[0]
    field = ".".join(str(p) for p in error.absolute_path)
    if error.validator == "required":
        missing = error.message.split(" is a required property")[0]
        return f"{what} lacks field {missing}" + (f" in '{field}'" if field else "")
    message = error.message if len(error.message) <= 200 else error.message[:200] + "..."
    return f"field '{field}' of {what}: {message}" if field else f"{what}: {message}"


def path_problem(schema: dict[str, Any], path: Sequence[str], what: str = "the answer") -> str | None:
    """Whether a reference into an answer (`${step.status}`: path ["status"]) can exist under
    `schema`; None if it can, or if the schema does not say. `what` names the value in the message
    (a tool step's output is checked the same way, against the tool's return type)."""
    node: Any = schema
    for depth, part in enumerate(path):
        if not isinstance(node, dict):
            return None
        kind = node.get("type")
        fields = node.get("properties")
        if isinstance(fields, dict) and part in fields:
            node = fields[part]
            continue
        if kind == "object" or isinstance(fields, dict):
            extra = node.get("additionalProperties")
            if isinstance(extra, dict):
                node = extra
                continue
            if not fields:
                return None  # an object whose fields the schema does not name
            inside = f" in '{'.'.join(path[:depth])}'" if depth else ""
            return f"{what} has no field '{part}'{inside} (its fields: {', '.join(sorted(fields))})"
        if kind == "array":
            if not part.isdigit():
                return f"{what} is a list at '{'.'.join(path[:depth]) or 'its top'}', so '{part}' must be an index"
            node = node.get("items")
            continue
        if kind in ("string", "number", "integer", "boolean", "null"):
            return f"{what} is a {kind} at '{'.'.join(path[:depth]) or 'its top'}', which has no field '{part}'"
        return None
    return None


# ------------------------------------------------------------------ typing an answer field by field
# (the terminal asks one field at a time; the console has one input per field)


def json_problem(exc: json.JSONDecodeError) -> str:
    """The parser's whole message: `exc.msg` alone ends mid-sentence ("Unterminated string starting at")."""
    return f"{exc.msg}: line {exc.lineno}, column {exc.colno}"


def answer_fields(schema: dict[str, Any] | None) -> list[tuple[str, dict[str, Any], bool]]:
    """The fields a typed answer asks one by one: (name, schema, required), for an object schema
    that names its fields; otherwise none, and the answer is typed whole."""
    if not schema or not isinstance(schema.get("properties"), dict) or not schema["properties"]:
        return []
    required = set(schema.get("required") or [])
    return [
        (name, sub if isinstance(sub, dict) else {}, name in required) for name, sub in schema["properties"].items()
    ]


def describe_field(schema: dict[str, Any]) -> str:
    """What a field takes, briefly: `ok / change`, `integer`, `yes / no`."""
    if "enum" in schema:
        return " / ".join(json.dumps(v) if not isinstance(v, str) else v for v in schema["enum"])
    kind = schema.get("type")
    if kind == "boolean":
        return "yes / no"
    return kind if isinstance(kind, str) else "any JSON value"


def coerce(text: str, schema: dict[str, Any]) -> Any:
    """A typed line as the value `schema` wants: numbers and yes/no converted, JSON parsed for
    lists, objects and enums of other than strings. ValueError says what was expected."""
    kind = schema.get("type")
    if kind == "integer":
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"'{text}' is not a whole number") from None
    if kind == "number":
        try:
            return float(text) if any(c in text for c in ".eE") else int(text)
        except ValueError:
            raise ValueError(f"'{text}' is not a number") from None
    if kind == "boolean":
        if text.lower() in ("y", "yes", "true", "1"):
            return True
        if text.lower() in ("n", "no", "false", "0"):
            return False
        raise ValueError(f"'{text}' is not yes or no")
    choices = schema.get("enum")
    if kind in ("object", "array") or (choices and not all(isinstance(v, str) for v in choices)):
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"that is not valid JSON: {json_problem(exc)}") from None
    if choices and text not in choices:
        raise ValueError(f"'{text}' is not one of {describe_field(schema)}")
    return text
