"""References to stored data, as history and the ledger hold them: what one looks like and how it
reads to a person. Pure, so workflow code may use it; reading and writing the data itself is
`stratagem.io.store`, which only activities, the data converter and commands use.

    {"$stored": "store:runs/<run>/<step>/<sha256>.json", "bytes": 412345, "sha256": "...", "preview": "..."}
"""

from __future__ import annotations

from typing import Any, TypeGuard

MARKER = "$stored"


def is_stored(value: Any) -> TypeGuard[dict[str, Any]]:
    return isinstance(value, dict) and isinstance(value.get(MARKER), str)


def describe(stored: dict[str, Any]) -> str:
    return f"[stored output, {stored.get('bytes', 0):,} bytes: {stored[MARKER]}]"
