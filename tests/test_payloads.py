"""Claim checks for shared values (stratagem.payloads): a value every run reads, such as the
worker's tool catalogue, is kept in the output store once, by digest, and each history holds a
claim; the codec remembers what it stored and read, and still checks what it reads."""

from __future__ import annotations

import base64
import os

import pytest
from temporalio.api.common.v1 import Payload

from stratagem.catalog import ToolCatalog, ToolSpec
from stratagem.codec import data_converter
from stratagem.config import Settings
from stratagem.payloads import (
    ENCODING,
    SHARED,
    SHARED_MIN_BYTES,
    ClaimCheckCodec,
    StratagemPayloadConverter,
    with_claim_checks,
)
from stratagem.plan import PlanDraft
from stratagem.store import FileStore, StoreError

pytestmark = pytest.mark.unit


def catalogue(tools: int = 20) -> ToolCatalog:
    return ToolCatalog(
        tools=[
            ToolSpec(name=f"tool_{i}", description="does one thing " * 10, parameters={"type": "object"})
            for i in range(tools)
        ]
    )


def stored_files(store: FileStore) -> list[str]:
    return sorted(str(p.relative_to(store.root)) for p in store.root.rglob("*.bin"))


def test_the_converter_marks_a_catalogue_as_shared_and_nothing_else():
    converter = StratagemPayloadConverter()
    [shared] = converter.to_payloads([catalogue()])
    [plan] = converter.to_payloads(
        [PlanDraft.model_validate({"goal": "g", "steps": [{"id": "a", "title": "a", "tool": "t"}]})]
    )
    assert shared.metadata[SHARED] == b"1"
    assert SHARED not in plan.metadata
    assert converter.from_payloads([shared], [ToolCatalog]) == [catalogue()]


async def test_a_shared_value_is_stored_once_and_the_history_holds_a_claim(tmp_path):
    store = FileStore(tmp_path / "store")
    [payload] = StratagemPayloadConverter().to_payloads([catalogue()])
    assert payload.ByteSize() > 2 * SHARED_MIN_BYTES
    codec = ClaimCheckCodec(store)
    first = await codec.encode([payload])
    again = await codec.encode([payload])
    # Another process (a fresh codec) claims the same value under the same key.
    other = await ClaimCheckCodec(store).encode([payload])
    assert first == again == other
    assert first[0].metadata["encoding"] == ENCODING and first[0].ByteSize() < 300
    assert len(stored_files(store)) == 1
    assert await ClaimCheckCodec(store).decode(first) == [payload]


async def test_small_shared_values_and_ordinary_values_stay_inline(tmp_path):
    store = FileStore(tmp_path / "store")
    codec = ClaimCheckCodec(store)
    [small] = StratagemPayloadConverter().to_payloads([ToolCatalog()])
    ordinary = Payload(metadata={"encoding": b"json/plain"}, data=b'"' + b"x" * 4000 + b'"')
    assert small.ByteSize() < SHARED_MIN_BYTES
    assert await codec.encode([small, ordinary]) == [small, ordinary]
    assert stored_files(store) == []


async def test_what_a_codec_stored_or_read_it_decodes_without_the_store_and_a_fresh_one_checks_it(tmp_path):
    store = FileStore(tmp_path / "store")
    [payload] = StratagemPayloadConverter().to_payloads([catalogue()])
    writer, reader = ClaimCheckCodec(store), ClaimCheckCodec(store)
    claims = await writer.encode([payload])
    assert await reader.decode(claims) == [payload]  # read from the store, and remembered
    [path] = stored_files(store)
    (store.root / path).unlink()
    assert await writer.decode(claims) == [payload]
    assert await reader.decode(claims) == [payload]
    with pytest.raises(StoreError, match="missing"):
        await ClaimCheckCodec(store).decode(claims)


async def test_a_stored_value_changed_behind_the_codecs_back_is_refused(tmp_path):
    store = FileStore(tmp_path / "store")
    [payload] = StratagemPayloadConverter().to_payloads([catalogue()])
    claims = await ClaimCheckCodec(store).encode([payload])
    [path] = stored_files(store)
    tampered = Payload()
    tampered.ParseFromString((store.root / path).read_bytes())
    tampered.data = tampered.data.replace(b"tool_0", b"tool_X")
    (store.root / path).write_bytes(tampered.SerializeToString())
    with pytest.raises(StoreError, match="does not match its checksum"):
        await ClaimCheckCodec(store).decode(claims)


async def test_under_encryption_a_shared_value_stays_sealed_in_the_history_and_nothing_plain_is_stored(tmp_path):
    """Encryption runs before the claim check: the sealed catalogue carries no shared mark, so it
    is not claimed, and the store never holds a plain copy of it."""
    store = FileStore(tmp_path / "store")
    key = base64.b64encode(os.urandom(32)).decode()
    converter = with_claim_checks(data_converter(Settings(encryption_key=key)), store)
    assert converter.payload_codec is not None
    [payload] = converter.payload_converter.to_payloads([catalogue()])
    [sealed] = await converter.payload_codec.encode([payload])
    assert sealed.metadata["encoding"] != ENCODING and b"tool_0" not in sealed.SerializeToString()
    assert stored_files(store) == []
    assert await converter.payload_codec.decode([sealed]) == [payload]
