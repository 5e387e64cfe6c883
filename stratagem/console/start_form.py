"""The Start form of a process: one field per input, made from the process's inputs schema, and
read back into the values a run takes, with each problem at its field.

The values are checked here as the run will check them (stratagem.domain.process: each field's
schema, then `check_inputs` over them all, with `${nominal.X}` expanded from now); a form that
fails comes back as typed, so nothing a person typed is lost. Everything a form posts is untrusted:
a field the process does not declare is not dropped but refused, so a forged form cannot start a
run with inputs nobody was shown.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from stratagem.console.views import WHOLE, field_label
from stratagem.domain.answers import answer_problem, coerce
from stratagem.domain.process import ProcessSpec, check_inputs, expand_nominal, field_schema

FIELD_PREFIX = "input."
# Kinds of values typed as JSON in a text box (a list, an object): the browser has no input for them.
JSON_TYPES = ("object", "array")
_NAMED = re.compile(r"input '([A-Za-z_][A-Za-z0-9_]*)'")


@dataclass
class StartDraft:
    """What a Start form holds: the text of each field, and what is wrong, by input (WHOLE: the form)."""

    values: dict[str, str] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)


def shown(value: Any) -> str:
    """A value as its field shows it: a string as it is, anything else as JSON (a boolean as true/false)."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def start_fields(spec: ProcessSpec, draft: StartDraft | None = None) -> list[dict[str, Any]]:
    """The form's fields, in the order the process declares its inputs: label (`title`, else the
    name), help (`description`), the kind of control, the choices of an enum (never preselected
    unless the input has a default), bounds, and the value (as typed, else the default)."""
    draft = draft or StartDraft()
    fields = []
    for name, schema in spec.inputs.items():
        kind = schema.get("type", "string")
        kind = kind if isinstance(kind, str) else "string"
        choices = [c for c in schema.get("enum", []) if isinstance(c, str | int | float | bool)]
        default = shown(schema["default"]) if "default" in schema else ""
        description = schema.get("description")
        fields.append(
            {
                "name": name,
                "label": field_label(name, schema),
                "type": kind,
                "control": _control(kind, choices),
                "choices": [shown(c) for c in choices],
                "required": "default" not in schema,
                "default": default,
                "description": description if isinstance(description, str) else "",
                "minimum": schema.get("minimum") if isinstance(schema.get("minimum"), int | float) else None,
                "maximum": schema.get("maximum") if isinstance(schema.get("maximum"), int | float) else None,
                "value": draft.values.get(name, default),
                "error": draft.errors.get(name, ""),
            }
        )
    return fields


def _control(kind: str, choices: list[Any]) -> str:
    if choices or kind == "boolean":
        return "select"
    if kind in ("integer", "number"):
        return "number"
    if kind in JSON_TYPES:
        return "json"
    return "text"


def read_start(
    spec: ProcessSpec, form: dict[str, Any], now: datetime | None = None
) -> tuple[dict[str, Any], StartDraft]:
    """The inputs a posted Start form gives (as typed, `${nominal.X}` texts kept for the run to
    expand at its own start), and the draft to show again: empty `errors` means the run may start.
    A field left empty is not given, so an input with a default takes it."""
    draft = StartDraft()
    given: dict[str, Any] = {}
    posted = {key.removeprefix(FIELD_PREFIX): raw for key, raw in form.items() if key.startswith(FIELD_PREFIX)}
    for name, raw in posted.items():
        text = str(raw).replace("\r\n", "\n").strip()
        draft.values[name] = text
        schema = spec.inputs.get(name)
        if schema is None:
            given[name] = text  # refused below, by check_inputs, naming it
            continue
        if not text:
            if "default" not in schema:
                choice = "enum" in schema or schema.get("type") == "boolean"
                draft.errors[name] = "choose one" if choice else "required: type a value"
            continue
        if "${nominal." in text:
            given[name] = text  # typed once the nominal time is known
            continue
        try:
            value = coerce(text, field_schema(schema))
        except ValueError as exc:
            draft.errors[name] = str(exc)
            continue
        if problem := answer_problem(value, field_schema(schema), f"'{field_label(name, schema)}'"):
            draft.errors[name] = problem
            continue
        given[name] = value
    for name in spec.inputs:
        if name not in posted and "default" not in spec.inputs[name]:
            draft.errors.setdefault(name, "required: type a value")
    expanded, problems = expand_nominal(spec, given, now or datetime.now(UTC))
    _, found = check_inputs(spec, expanded)
    for problem in [*problems, *found]:
        _place(problem, draft, spec)
    return given, draft


def _place(problem: str, draft: StartDraft, spec: ProcessSpec) -> None:
    """A problem beside the field it names (a field already refused keeps its first reason); the
    form's own when it names no field of the process (an input it does not declare, say)."""
    found = _NAMED.search(problem)
    name = found.group(1) if found and found.group(1) in spec.inputs else WHOLE
    if name == WHOLE and WHOLE in draft.errors:
        draft.errors[WHOLE] += f"; {problem}"
    else:
        draft.errors.setdefault(name, problem)


__all__ = ["FIELD_PREFIX", "StartDraft", "read_start", "shown", "start_fields"]
