"""Leaner Temporal payloads: model fields still at their defaults are left out.

A run's state carries one `Step`, one `StepRecord` and a few `LedgerEvent`s per step, and a
continue-as-new serializes all of them at once. Written out in full, a 10,000-step plan took
2.9 MB of JSON, three quarters of it defaults (empty instructions, no tools, risk low...), and
every copy of that JSON is worker memory while the run moves to its next execution.

Only Stratagem's payload converter asks for it (`stratagem.io.payloads`), through the serialization
context, so `model_dump` and everything the command line prints keep every field. Reading a
compact payload fills the defaults back in: the round trip gives equal models (tests/test_compact.py).

Why not pydantic's own `exclude_defaults`: the payloads Stratagem writes would change, byte for
byte (compared on the state of tests/test_compact.py). It is one switch for a whole dump, so it
also empties the models that are not compact (`RunState.approved_revision: null`, the zeros of a
`StepRecord`'s `UsageTotals`); and it calls every `default_factory` to compare, so a `RunOptions`
whose `budget` is `Budget()` and a `ToolSpec` whose `parameters` is the empty schema would lose
fields that payloads keep today. Here each class opts in, and a factory counts only when it makes
an empty list or dict.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, SerializationInfo, SerializerFunctionWrapHandler, model_serializer
from pydantic_core import PydanticUndefined

COMPACT = "stratagem_compact"
COMPACT_CONTEXT = {COMPACT: True}

_EMPTY_FACTORIES: dict[type, Any] = {list: [], dict: {}}


def _defaults(cls: type[BaseModel]) -> list[tuple[str, Any]]:
    """(field, default) for each field whose default is a plain value or an empty list or dict."""
    cached = cls.__dict__.get("_compact_defaults")
    if cached is not None:
        return cached
    found = []
    for name, field in cls.model_fields.items():
        if field.default is not PydanticUndefined:
            found.append((name, field.default))
        elif field.default_factory in _EMPTY_FACTORIES:
            found.append((name, _EMPTY_FACTORIES[field.default_factory]))  # type: ignore[index]
    type.__setattr__(cls, "_compact_defaults", found)
    return found


def _all_fields(cls: type[BaseModel]) -> set[str]:
    shared = cls.__dict__.get("_compact_all_fields")
    if shared is None:
        shared = set(cls.model_fields)
        type.__setattr__(cls, "_compact_all_fields", shared)
    return shared


class CompactModel(BaseModel):
    """A model whose Temporal payloads leave out the fields that hold their default, and whose
    instances share one set of field names.

    Pydantic keeps, per instance, the set of fields that were set explicitly; at a few hundred
    bytes a set, that was a third of the memory a long plan's steps and records take. Stratagem
    never asks which fields were set (compact payloads compare values with defaults instead), so
    every instance of a class shares a set holding all its fields: adding a field already in it,
    which is what pydantic does on assignment, changes nothing.
    """

    def model_post_init(self, context: Any, /) -> None:
        object.__setattr__(self, "__pydantic_fields_set__", _all_fields(type(self)))

    @model_serializer(mode="wrap")
    def _compact(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> Any:
        data = handler(self)
        if info.context and info.context.get(COMPACT) and isinstance(data, dict):
            for name, default in _defaults(type(self)):
                if name in data and getattr(self, name) == default:
                    del data[name]
        return data
