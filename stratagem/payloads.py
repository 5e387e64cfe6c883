"""Claim checks: no Temporal payload above `PAYLOAD_LIMIT` bytes ever reaches the history.

A payload codec runs in every client and worker, outside workflow code. A payload above the
limit (a plan of thousands of steps, the state a continue-as-new carries, a long ledger in a
query answer) is written to the output store, and the history holds a small payload naming
it. Decoding reads it back and checks its digest. Workflow code sees the full value either
way, so this changes nothing about determinism.

A value that many runs share (a model class with `shared_payload = True`: the worker's tool
catalogue, which every run reads in its first workflow task) is claimed from `SHARED_MIN_BYTES`
up: the store keeps it once, by its digest, and each process remembers the claims it made and
read, so neither side touches the store again for the same value. On the concurrency bench
the catalogue's 11 KB in every run's history cost the worker and the server about a
millisecond and a half of CPU per run.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
from collections import OrderedDict
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

from .compact import COMPACT_CONTEXT
from .store import OutputStore, StoreError, default_store

ENCODING = b"stratagem/stored-payload"
# Temporal warns above 512 KB and refuses 2 MB; keep every payload well below both.
PAYLOAD_LIMIT = 128 * 1024
# Payload metadata marking a value many runs share, and the size from which it is claimed.
SHARED = "stratagem-shared"
SHARED_MIN_BYTES = 1024
# Shared values a codec remembers, each way (a worker has one catalogue, or a few over its life).
SHARED_REMEMBERED = 32


class _CompactJSONConverter(PydanticJSONPlainPayloadConverter):
    """Temporal's pydantic JSON converter, writing Stratagem's models compactly (`stratagem.compact`)."""

    def to_payload(self, value: object) -> Payload | None:
        metadata = {"encoding": self.encoding.encode()}
        if getattr(type(value), "shared_payload", False) is True:
            metadata[SHARED] = b"1"
        return Payload(metadata=metadata, data=to_json(value, context=COMPACT_CONTEXT))


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


# Every client, worker and replayer of a deployment uses this (plus codecs: stratagem.codec).
stratagem_data_converter = DataConverter(payload_converter_class=StratagemPayloadConverter)


class ClaimCheckCodec(PayloadCodec):
    def __init__(self, store: OutputStore, limit: int = PAYLOAD_LIMIT, shared_min: int = SHARED_MIN_BYTES):
        self.store = store
        self.limit = limit
        self.shared_min = shared_min
        # Shared values: digest -> the claim this process stored, and digest -> the payload bytes
        # it read back (checked once). Both bounded: oldest forgotten first.
        self._claims: OrderedDict[str, Payload] = OrderedDict()
        self._read: OrderedDict[str, bytes] = OrderedDict()

    def _claimed(self, payload: Payload) -> bool:
        size = payload.ByteSize()
        return size > self.limit or (size >= self.shared_min and payload.metadata.get(SHARED) == b"1")

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [await self._encode(p) if self._claimed(p) else p for p in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [await self._decode(p) if p.metadata.get("encoding") == ENCODING else p for p in payloads]

    async def _encode(self, payload: Payload) -> Payload:
        data = payload.SerializeToString()
        digest = hashlib.sha256(data).hexdigest()
        shared = payload.metadata.get(SHARED) == b"1"
        if shared and (known := self._claims.get(digest)) is not None:
            self._claims.move_to_end(digest)
            copy = Payload()
            copy.CopyFrom(known)
            return copy
        ref = await asyncio.to_thread(self.store.put, f"payloads/{digest[:2]}/{digest}.bin", data)
        claim = Payload(
            metadata={"encoding": ENCODING},
            data=json.dumps({"ref": ref, "sha256": digest, "bytes": len(data)}).encode(),
        )
        if shared:
            _remember(self._claims, digest, claim)
            _remember(self._read, digest, data)  # what this process stored, it need not read back
        return claim

    async def _decode(self, payload: Payload) -> Payload:
        claim = json.loads(payload.data)
        digest = claim["sha256"]
        data = self._read.get(digest)
        if data is None:
            data = await asyncio.to_thread(self.store.get, claim["ref"])
            if hashlib.sha256(data).hexdigest() != digest:
                raise StoreError(
                    f"stored payload {claim['ref']} does not match its checksum: it was changed or damaged"
                )
        original = Payload()
        original.ParseFromString(data)
        if original.metadata.get(SHARED) == b"1":
            _remember(self._read, digest, data)
        return original


def _remember(cache: OrderedDict[str, Any], key: str, value: Any) -> None:
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > SHARED_REMEMBERED:
        cache.popitem(last=False)


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
