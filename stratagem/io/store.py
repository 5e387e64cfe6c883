"""Where large data lives: outside Temporal's history, referenced from it.

Step outputs above `inline_limit()`, every executor transcript, and any Temporal payload above
the claim-check limit (a big plan, a long ledger) are written here by activities and by the
data converter, never by workflow code. History and the ledger keep a small reference:

    {"$stored": "store:runs/<run>/<step>/<sha256>.json", "bytes": 412345, "sha256": "...", "preview": "..."}

The default store is a folder (`STRATAGEM_STORE`, else `$STRATAGEM_HOME/store`); every worker
and command of a deployment must see the same folder (a shared volume), or the store must be
replaced: set `STRATAGEM_STORE=python:my_package.stores:make_store` to use any object with
`put(key, data) -> ref` and `get(ref) -> bytes`. Writes are content-addressed, so writing
the same data twice (a retried attempt) stores it once. One key is rewritten in place: an llm
step's checkpoint (activities/llm_progress.py), through `replace(key, data) -> ref`, which a
replacement store may also have (without it, a checkpoint survives heartbeat throttling less well).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Protocol

from pydantic_core import to_json

from stratagem.common.config import stratagem_home
from stratagem.common.errors import ConfigError, StratagemError
from stratagem.domain.stored import MARKER, describe, is_stored
from stratagem.io import slots

STORE_ENV = "STRATAGEM_STORE"
INLINE_LIMIT_ENV = "STRATAGEM_INLINE_LIMIT"
DEFAULT_INLINE_LIMIT = 16 * 1024
PREVIEW_CHARS = 300


class StoreError(StratagemError):
    """Stored data could not be written or read back."""


class OutputStore(Protocol):
    def put(self, key: str, data: bytes) -> str:
        """Keep `data` under `key` (a relative path); return the reference to read it back."""
        ...

    def get(self, ref: str) -> bytes:
        """The data a `put` stored under `ref`."""
        ...


class FileStore:
    """A folder. References are `store:<key>`, relative to the folder, so hosts may mount it
    at different paths."""

    def __init__(self, root: Path):
        self.root = Path(root).expanduser().resolve()
        self._slots = slots.Slots()
        self._resolved: dict[str, Path] = {}

    def _path(self, key: str) -> Path:
        path = (self.root / key).resolve()
        if self.root not in path.parents:
            raise StoreError(f"store key '{key}' leaves the store folder {self.root}")
        return path

    def put(self, key: str, data: bytes) -> str:
        path = self._path(key)
        if not path.exists():
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                with tempfile.NamedTemporaryFile(dir=path.parent, delete=False, prefix=".tmp-") as handle:
                    handle.write(data)
                os.replace(handle.name, path)
            except OSError as exc:
                raise StoreError(f"cannot write {path}: {exc.strerror or exc}") from None
        return f"store:{key}"

    def replace(self, key: str, data: bytes) -> str:
        """Keep `data` under `key` in place of what was there: a slot rewritten as work goes on (an
        llm step's checkpoint), where `put` keeps a content-addressed key's first write. `get`
        returns the latest whole write, never a part of one (stratagem.io.slots)."""
        path = self._resolved.get(key) or self._path(key)
        try:
            self._slots.write(path, data)
            if len(self._resolved) >= slots.Slots.MEMORY:
                self._resolved.clear()
            self._resolved[key] = path  # resolved once per slot: a step rewrites its own every round
        except OSError as exc:
            raise StoreError(f"cannot write {path}: {exc.strerror or exc}") from None
        return f"store:{key}"

    def get(self, ref: str) -> bytes:
        if not ref.startswith("store:"):
            raise StoreError(f"'{ref}' is not a reference into a file store")
        path = self._path(ref.removeprefix("store:"))
        try:
            return path.read_bytes()
        except FileNotFoundError:
            if slots.exists(path):
                data = slots.latest(path)
                if data is None:
                    raise StoreError(f"stored data {ref} is damaged: no write of it in {self.root} is whole") from None
                return data
            raise StoreError(
                f"stored data {ref} is missing from {self.root}; every worker and command must share "
                f"the same store ({STORE_ENV})"
            ) from None
        except OSError as exc:
            raise StoreError(f"cannot read {path}: {exc.strerror or exc}") from None


def default_store() -> OutputStore:
    """The store `STRATAGEM_STORE` names: a folder, or `python:module:factory`."""
    configured = os.environ.get(STORE_ENV, "").strip()
    if configured.startswith("python:"):
        module, _, name = configured.removeprefix("python:").partition(":")
        try:
            factory = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError, ValueError) as exc:
            raise ConfigError(f"{STORE_ENV}: cannot load '{configured}' ({exc})") from None
        return factory()
    if configured:
        return FileStore(Path(configured))
    return FileStore(stratagem_home() / "store")


def inline_limit() -> int:
    """Outputs larger than this many bytes (as JSON) are stored instead of kept in history."""
    raw = os.environ.get(INLINE_LIMIT_ENV, "").strip()
    if not raw:
        return DEFAULT_INLINE_LIMIT
    if not raw.isdigit() or int(raw) > 128 * 1024:
        raise ConfigError(f"{INLINE_LIMIT_ENV} must be a whole number of bytes up to 131072, not '{raw}'")
    return int(raw)


# ---------------------------------------------------------------------------- stored values


def store_value(store: OutputStore, key_prefix: str, value: Any) -> dict[str, Any]:
    """Store `value` as JSON and return the reference that stands for it."""
    data = json.dumps(value, default=str).encode("utf-8")
    return store_json(store, key_prefix, data, preview=value if isinstance(value, str) else None)


def store_json(store: OutputStore, key_prefix: str, data: bytes, preview: str | None = None) -> dict[str, Any]:
    """Store a value already encoded as JSON (pydantic's `to_json` writes a list of models in one
    buffer, where `model_dump` and `json.dumps` built every event twice over first)."""
    digest = hashlib.sha256(data).hexdigest()
    ref = store.put(f"{key_prefix}/{digest[:32]}.json", data)
    text = preview if preview is not None else data[: PREVIEW_CHARS * 4].decode("utf-8", errors="ignore")
    return {MARKER: ref, "bytes": len(data), "sha256": digest, "preview": text[:PREVIEW_CHARS]}


def load_value(store: OutputStore, stored: dict[str, Any]) -> Any:
    data = store.get(stored[MARKER])
    if hashlib.sha256(data).hexdigest() != stored.get("sha256"):
        raise StoreError(f"stored data {stored[MARKER]} does not match its checksum: it was changed or damaged")
    return json.loads(data)


def externalize(store: OutputStore, key_prefix: str, value: Any, limit: int | None = None) -> Any:
    """`value` itself if small, else a reference to it in the store."""
    if value is None or isinstance(value, (bool, int, float)):
        return value  # a number is never worth storing (and most tool outputs are small)
    size = len(to_json(value, fallback=str))
    return store_value(store, key_prefix, value) if size > (inline_limit() if limit is None else limit) else value


def hydrate(store: OutputStore, value: Any) -> Any:
    """`value` with every reference replaced by the data it stands for."""
    if is_stored(value):
        return load_value(store, value)
    if isinstance(value, dict):
        return {k: hydrate(store, v) for k, v in value.items()}
    if isinstance(value, list):
        return [hydrate(store, v) for v in value]
    return value


__all__ = [
    "MARKER",
    "FileStore",
    "OutputStore",
    "StoreError",
    "default_store",
    "describe",
    "externalize",
    "hydrate",
    "inline_limit",
    "is_stored",
    "load_value",
    "store_json",
    "store_value",
]
