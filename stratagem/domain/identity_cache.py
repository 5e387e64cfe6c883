"""A value worked out once per object, for objects handed around read-only (a registry's tool
catalogue, a tool's JSON schema): kept by the object's identity, since such objects are not
hashable, with the object itself so its id cannot be reused meanwhile, and bounded."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class ByIdentity(Generic[K, V]):
    def __init__(self, limit: int):
        self._limit = limit
        self._entries: dict[int, tuple[K, V]] = {}

    def get(self, key: K, make: Callable[[K], V]) -> V:
        """`make(key)`, worked out the first time this object is asked for."""
        entry = self._entries.get(id(key))
        if entry is None or entry[0] is not key:
            if len(self._entries) >= self._limit:
                self._entries.clear()  # a handful are in use at once; a flood only costs recomputing
            entry = self._entries[id(key)] = (key, make(key))
        return entry[1]
