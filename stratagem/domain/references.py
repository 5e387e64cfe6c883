"""References from one step to the outputs of the steps before it.

Syntax, inside any string in a step's `instructions` or `args` (at any depth):

    ${fetch_profile}            the whole output of step `fetch_profile`
    ${fetch_profile.name}       a field of a JSON object output
    ${fetch_profile.emails.0}   a list element, by index
    $${literal}                 an escaped, literal "${literal}"

A string that is exactly one reference takes the referenced value with its type (an object
stays an object, a number stays a number). A reference embedded in longer text is rendered
into it: strings as they are, anything else as compact JSON.

A step may only reference steps it depends on, directly or transitively; validation refuses
anything else, so a reference can never see an output that might not exist yet.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from stratagem.common.errors import ReferenceResolutionError

# `$${` escapes; `${id.path}` references. The id follows the step-id grammar; the path is
# dot-separated keys or indices.
_REFERENCE = re.compile(r"\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_-]*)((?:\.[A-Za-z0-9_-]+)*)\}")


@dataclass(frozen=True)
class Reference:
    step_id: str
    path: tuple[str, ...]

    def __str__(self) -> str:
        return "${" + ".".join((self.step_id, *self.path)) + "}"


def find_references(text: str) -> list[Reference]:
    refs = []
    for match in _REFERENCE.finditer(text):
        if match.group(1) is None:
            continue  # an escaped "$${"
        path = tuple(p for p in match.group(2).split(".") if p)
        refs.append(Reference(match.group(1), path))
    return refs


def iter_strings(value: Any) -> Iterator[str]:
    """Every string inside a JSON-like value, keys excluded."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from iter_strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from iter_strings(item)


def references_in(instructions: str, args: Mapping[str, Any]) -> list[Reference]:
    refs = find_references(instructions)
    for text in iter_strings(args):
        refs.extend(find_references(text))
    return refs


def is_single_reference(text: str) -> bool:
    match = _REFERENCE.fullmatch(text)
    return match is not None and match.group(1) is not None


def _lookup(ref: Reference, outputs: Mapping[str, Any]) -> Any:
    if ref.step_id not in outputs:
        raise ReferenceResolutionError(f"{ref} refers to step '{ref.step_id}', which has no output")
    value = outputs[ref.step_id]
    walked = ref.step_id
    for part in ref.path:
        if isinstance(value, Mapping) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            kind = type(value).__name__
            raise ReferenceResolutionError(f"{ref}: the output of '{walked}' ({kind}) has no field or index '{part}'")
        walked = f"{walked}.{part}"
    return value


def _render(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), sort_keys=True)


def resolve_text(text: str, outputs: Mapping[str, Any], unread: Collection[str] = ()) -> Any:
    """Resolve the references in one string (see the module docstring for the rules). References
    to the steps in `unread` are left as written (escapes too): their outputs are not at hand."""
    if unread:
        return _resolve_around(text, outputs, unread)
    match = _REFERENCE.fullmatch(text)
    if match is not None and match.group(1) is not None:
        path = tuple(p for p in match.group(2).split(".") if p)
        return _lookup(Reference(match.group(1), path), outputs)

    def substitute(m: re.Match[str]) -> str:
        if m.group(1) is None:
            return "${"
        path = tuple(p for p in m.group(2).split(".") if p)
        return _render(_lookup(Reference(m.group(1), path), outputs))

    return _REFERENCE.sub(substitute, text)


def _resolve_around(text: str, outputs: Mapping[str, Any], unread: Collection[str]) -> Any:
    match = _REFERENCE.fullmatch(text)
    if match is not None and match.group(1) is not None and match.group(1) in unread:
        return text

    def substitute(m: re.Match[str]) -> str:
        if m.group(1) is None or m.group(1) in unread:
            return m.group(0)
        path = tuple(p for p in m.group(2).split(".") if p)
        return _render(_lookup(Reference(m.group(1), path), outputs))

    if match is not None and match.group(1) is not None:
        return resolve_text(text, outputs)
    return _REFERENCE.sub(substitute, text)


def resolve_step(args: Mapping[str, Any], instructions: str, outputs: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """A step's arguments and instructions with every reference replaced from `outputs`.

    The one place a step's references are resolved: by the workflow when every output they
    name is in its ledger, with stored outputs described when a person is asked; by the step's
    activity when some are in the output store, where only an activity may read
    (`activity_io.ToolStepInput.references`). ReferenceResolutionError if one names nothing."""
    return resolve(dict(args), outputs), str(resolve(instructions, outputs))


def resolve(value: Any, outputs: Mapping[str, Any], unread: Collection[str] = ()) -> Any:
    """Resolve references everywhere inside a JSON-like value (those to `unread` steps left as written)."""
    if isinstance(value, str):
        return resolve_text(value, outputs, unread)
    if isinstance(value, Mapping):
        return {k: resolve(v, outputs, unread) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [resolve(v, outputs, unread) for v in value]
    return value


def literal(value: Any) -> Any:
    """A value written so that resolving it gives it back unchanged: every `${` inside its strings
    escaped as `$${`, so nothing in it can become a reference to another step."""
    if isinstance(value, str):
        return value.replace("${", "$${")
    if isinstance(value, Mapping):
        return {k: literal(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [literal(v) for v in value]
    return value
