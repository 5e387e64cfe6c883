"""Claim checks: no Temporal payload above `PAYLOAD_LIMIT` bytes ever reaches the history.

A payload codec runs in every client and worker, outside workflow code. A payload above the
limit (a plan of thousands of steps, the state a continue-as-new carries, a long ledger in a
query answer) is written to the output store, and the history holds a small payload naming
it. Decoding reads it back and checks its digest. Workflow code sees the full value either
way, so this changes nothing about determinism.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
from collections.abc import Sequence
from typing import Any

from pydantic_core import to_json
from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import PydanticJSONPlainPayloadConverter
from temporalio.converter import (
    CompositePayloadConverter,
    DataConverter,
    DefaultPayloadConverter,
    JSONPlainPayloadConverter,
    PayloadCodec,
)

from stratagem.domain.catalog import ToolCatalog
from stratagem.domain.compact import COMPACT_CONTEXT
from stratagem.domain.identity_cache import ByIdentity
from stratagem.io.store import OutputStore, StoreError, default_store

ENCODING = b"stratagem/stored-payload"
# Temporal warns above 512 KB and refuses 2 MB; keep every payload well below both.
PAYLOAD_LIMIT = 128 * 1024


# A worker's tool catalogue reaches each of its runs as the same bytes (its describe-tools
# activity). They read it into one shared ToolCatalog per content, read-only like the one a
# registry hands out, not one each: a cached run held its own copy (43 KiB for the bench worker's
# 20 tools), and reading it again cost each run a decode and a schema validator per tool it uses.
_OPTIONAL_CATALOG: Any = ToolCatalog | None
_SHARED_MAX = 32
_shared: dict[bytes, ToolCatalog] = {}
# And the worker writes its catalogue once, not for every run: a registry hands out one object
# until a tool is registered (ToolRegistry.catalog), and writing it cost 128 us a run.
_written: ByIdentity[ToolCatalog, bytes] = ByIdentity(limit=_SHARED_MAX)


class _CompactJSONConverter(PydanticJSONPlainPayloadConverter):
    """Temporal's pydantic JSON converter, writing Stratagem's models compactly (`stratagem.domain.compact`)."""

    def to_payload(self, value: object) -> Payload | None:
        if type(value) is ToolCatalog:
            return Payload(metadata={"encoding": self.encoding.encode()}, data=_written.get(value, _compact_json))
        return Payload(metadata={"encoding": self.encoding.encode()}, data=_compact_json(value))

    def from_payload(self, payload: Payload, type_hint: type | None = None) -> Any:
        if not (type_hint is ToolCatalog or type_hint == _OPTIONAL_CATALOG) or payload.data == b"null":
            return super().from_payload(payload, type_hint)
        data = payload.data
        catalog = _shared.get(data)
        if catalog is None:
            catalog = super().from_payload(payload, ToolCatalog)
            if len(_shared) >= _SHARED_MAX:
                _shared.clear()  # workers see a handful of catalogues; a flood only costs decodes
            _shared[data] = catalog
        return catalog


def _compact_json(value: object) -> bytes:
    return to_json(value, context=COMPACT_CONTEXT)


# One for the process. The SDK builds a payload converter for every command and activation it
# converts (each with its serialization context), and the pydantic converter caches a type
# adapter per type hint: one per converter would build an adapter for nearly every payload.
_CONVERTERS = tuple(
    _CompactJSONConverter() if isinstance(c, JSONPlainPayloadConverter) else c
    for c in DefaultPayloadConverter.default_encoding_payload_converters
)


class StratagemPayloadConverter(CompositePayloadConverter):
    """Temporal's default payload converters with the JSON one replaced by the compact pydantic one."""

    def __init__(self) -> None:
        super().__init__(*_CONVERTERS)


# Every client, worker and replayer of a deployment uses this (plus codecs: stratagem.io.codec).
stratagem_data_converter = DataConverter(payload_converter_class=StratagemPayloadConverter)


class ClaimCheckCodec(PayloadCodec):
    def __init__(self, store: OutputStore, limit: int = PAYLOAD_LIMIT):
        self.store = store
        self.limit = limit

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [await self._encode(p) if p.ByteSize() > self.limit else p for p in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [await self._decode(p) if p.metadata.get("encoding") == ENCODING else p for p in payloads]

    async def _encode(self, payload: Payload) -> Payload:
        data = payload.SerializeToString()
        digest = hashlib.sha256(data).hexdigest()
        ref = await asyncio.to_thread(self.store.put, f"payloads/{digest[:2]}/{digest}.bin", data)
        claim = {"ref": ref, "sha256": digest, "bytes": len(data)}
        return Payload(metadata={"encoding": ENCODING}, data=json.dumps(claim).encode())

    async def _decode(self, payload: Payload) -> Payload:
        claim = json.loads(payload.data)
        data = await asyncio.to_thread(self.store.get, claim["ref"])
        if hashlib.sha256(data).hexdigest() != claim["sha256"]:
            raise StoreError(f"stored payload {claim['ref']} does not match its checksum: it was changed or damaged")
        original = Payload()
        original.ParseFromString(data)
        return original


class ChainCodec(PayloadCodec):
    """Codecs applied in order when encoding, in reverse when decoding."""

    def __init__(self, codecs: Sequence[PayloadCodec]):
        self.codecs = list(codecs)

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        result = list(payloads)
        for codec in self.codecs:
            result = await codec.encode(result)
        return result

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        result = list(payloads)
        for codec in reversed(self.codecs):
            result = await codec.decode(result)
        return result


def with_claim_checks(converter: DataConverter, store: OutputStore | None = None) -> DataConverter:
    """`converter` whose large payloads go to `store` (default: the configured store). A codec
    already there (encryption) runs first, so what the store keeps is what history would have."""
    claim = ClaimCheckCodec(store or default_store())
    codec = ChainCodec([converter.payload_codec, claim]) if converter.payload_codec else claim
    return dataclasses.replace(converter, payload_codec=codec)
