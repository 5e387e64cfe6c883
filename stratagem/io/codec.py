"""Encryption at rest: a Temporal payload codec that seals every payload with AES-256-GCM.

Temporal stores workflow inputs, step arguments and outputs, memos, summaries and (with the
failure converter below) failure messages in its database and shows them in its Web UI. With
STRATAGEM_ENCRYPTION_KEY set, every Stratagem process encrypts them before they leave it and
decrypts them when they come back, so the server only ever holds ciphertext.

An encrypted payload is the whole original payload (its metadata and data, serialized), sealed
with a fresh 96-bit nonce:

    metadata: encoding = binary/encrypted, encryption-key-id = <8 hex>, encryption-cipher = AES-256-GCM
    data:     nonce (12 bytes) || ciphertext || tag (16 bytes)

The key id (the first 8 hex digits of the key's SHA-256) is also the associated data, so it
cannot be swapped. Decoding picks the key by id: a process without that key fails with a
message naming both ids instead of producing garbage.

A payload that arrives unencrypted was not written by a process holding the key: anyone who can
reach the frontend can send one (a plain-JSON approval, say). It is refused: decoded into a
payload no converter reads, so an update carrying it is rejected and a signal dropped, and the
workflow task itself never fails (which would stall the run). Histories from before encryption
was turned on need STRATAGEM_ENCRYPTION_ACCEPT_PLAIN=1 on every process until those runs ended.

Rotation: STRATAGEM_ENCRYPTION_KEY encrypts (and decrypts); the comma-separated keys in
STRATAGEM_ENCRYPTION_OLD_KEYS only decrypt.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import os
from collections.abc import Mapping, Sequence
from typing import Any

from temporalio.api.common.v1 import Payload
from temporalio.api.failure.v1 import Failure
from temporalio.converter import (
    DataConverter,
    DefaultFailureConverter,
    DefaultFailureConverterWithEncodedAttributes,
    PayloadCodec,
    PayloadConverter,
)

from stratagem.common.config import Settings
from stratagem.common.errors import ConfigError
from stratagem.io.payloads import stratagem_data_converter

KEY_ENV = "STRATAGEM_ENCRYPTION_KEY"
OLD_KEYS_ENV = "STRATAGEM_ENCRYPTION_OLD_KEYS"
ACCEPT_PLAIN_ENV = "STRATAGEM_ENCRYPTION_ACCEPT_PLAIN"
# What an unencrypted payload decodes to: no payload converter knows this encoding.
REFUSED_ENCODING = b"binary/refused-unencrypted"

ENCODING = b"binary/encrypted"
KEY_ID_METADATA = "encryption-key-id"
CIPHER_METADATA = "encryption-cipher"
CIPHER = b"AES-256-GCM"
NONCE_BYTES = 12
KEY_BYTES = 32

GENERATE_HINT = 'generate one with: python -c "import base64,os;print(base64.b64encode(os.urandom(32)).decode())"'


class EncryptionKeyError(ConfigError):
    """A payload cannot be decrypted with the keys this process has: a wrong or missing key, or
    a payload that was tampered with. Never an ApplicationError, so a worker with the wrong key
    fails its workflow task (which Temporal retries) instead of failing the run."""


def key_id(key: bytes) -> str:
    """The id an encrypted payload carries: the first 8 hex digits of the key's SHA-256."""
    return hashlib.sha256(key).hexdigest()[:8]


def parse_key(text: str, source: str) -> bytes:
    """A 32-byte key from its base64 text. `source` names where it came from, for the one-line
    error; the key itself is never repeated in a message."""
    text = text.strip()
    try:
        key = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ConfigError(
            f"{source} is not valid base64: it must be the base64 of 32 random bytes; {GENERATE_HINT}"
        ) from None
    if len(key) != KEY_BYTES:
        raise ConfigError(
            f"{source} decodes to {len(key)} bytes, not 32: it must be the base64 of 32 random bytes (AES-256); {GENERATE_HINT}"
        )
    return key


class EncryptionCodec(PayloadCodec):
    """AES-256-GCM over every payload. `key` encrypts; it and `old_keys` decrypt."""

    def __init__(self, key: bytes, old_keys: Sequence[bytes] = (), *, accept_plain: bool = False):
        # Imported here so that processes without encryption never load the library.
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        for k in (key, *old_keys):
            if len(k) != KEY_BYTES:
                raise ConfigError(f"an encryption key must be 32 bytes, not {len(k)}")
        self.key_id = key_id(key)
        self.accept_plain = accept_plain
        self._encryptor = AESGCM(key)
        self._decryptors: dict[str, Any] = {self.key_id: self._encryptor}
        for old in old_keys:
            self._decryptors.setdefault(key_id(old), AESGCM(old))

    @property
    def key_ids(self) -> list[str]:
        """The ids of every key this codec decrypts with, the current one first."""
        return list(self._decryptors)

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self._encrypt(p) for p in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self._decrypt(p) for p in payloads]

    def _encrypt(self, payload: Payload) -> Payload:
        if payload.metadata.get("encoding") == ENCODING:
            return payload  # already sealed (a payload passed on as it was): never seal twice
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._encryptor.encrypt(nonce, payload.SerializeToString(), self.key_id.encode())
        return Payload(
            metadata={"encoding": ENCODING, KEY_ID_METADATA: self.key_id.encode(), CIPHER_METADATA: CIPHER},
            data=nonce + sealed,
        )

    def _decrypt(self, payload: Payload) -> Payload:
        if payload.metadata.get("encoding") != ENCODING:
            if self.accept_plain:
                return payload  # written before encryption was turned on, and the operator allows it
            return Payload(metadata={"encoding": REFUSED_ENCODING})
        from cryptography.exceptions import InvalidTag

        kid = payload.metadata.get(KEY_ID_METADATA, b"").decode("ascii", "replace") or "(none)"
        decryptor = self._decryptors.get(kid)
        if decryptor is None:
            raise EncryptionKeyError(self._wrong_key_message(kid))
        cipher = payload.metadata.get(CIPHER_METADATA, CIPHER)
        if cipher != CIPHER:
            name = cipher.decode("ascii", "replace")
            raise EncryptionKeyError(
                f"payload is encrypted with {name}, which Stratagem cannot decrypt (it uses AES-256-GCM)"
            )
        data = payload.data
        try:
            plain = decryptor.decrypt(data[:NONCE_BYTES], data[NONCE_BYTES:], kid.encode())
        except (InvalidTag, ValueError):  # ValueError: too short to hold a nonce
            raise EncryptionKeyError(
                f"payload encrypted with key {kid} failed authentication: it was altered or damaged in storage"
            ) from None
        original = Payload()
        original.ParseFromString(plain)
        return original

    def _wrong_key_message(self, kid: str) -> str:
        old = [k for k in self.key_ids if k != self.key_id]
        has = f"key {self.key_id} ({KEY_ENV})"
        if old:
            has += f" and old key(s) {', '.join(old)} ({OLD_KEYS_ENV})"
        return (
            f"payload was encrypted with key {kid}, but this process has {has}: "
            f"set {KEY_ENV} to the key every Stratagem process uses (keep a retired key in {OLD_KEYS_ENV})"
        )


class EncryptingFailureConverter(DefaultFailureConverterWithEncodedAttributes):
    """Failure messages and stack traces go into an encoded (so encrypted) payload; the failure
    itself says "Encoded failure". One exception: a failure caused by a key mismatch stays
    readable. Its messages hold only key ids and the SDK's own words ("Failed decoding
    arguments"), and they are what an operator looking at a stuck run (a workflow task failing in
    the Web UI, a query refused) must see. Sealed with the wrong key, they would also be unreadable
    to the processes that have the right one: an activity worker with the wrong key would leave
    a failure in the history that no correctly keyed workflow worker could decode."""

    def to_failure(self, exception: BaseException, payload_converter: PayloadConverter, failure: Failure) -> None:
        if _caused_by_key_error(exception):
            DefaultFailureConverter().to_failure(exception, payload_converter, failure)
            return
        super().to_failure(exception, payload_converter, failure)


def _caused_by_key_error(exception: BaseException | None) -> bool:
    seen = 0
    while exception is not None and seen < 20:
        if isinstance(exception, EncryptionKeyError):
            return True
        exception, seen = exception.__cause__, seen + 1
    return False


def codec_from(source: Settings | Mapping[str, str] | None = None) -> EncryptionCodec | None:
    """The codec for `source` (Settings, an environment mapping, or None: this process's
    environment), or None when no STRATAGEM_ENCRYPTION_KEY is set. A malformed key raises
    ConfigError with one line saying what is wrong."""
    current, old = _key_texts(source)
    if current is None:
        if old:
            raise ConfigError(
                f"{OLD_KEYS_ENV} is set but {KEY_ENV} is not: old keys only decrypt; set the current key too"
            )
        return None
    key = parse_key(current, KEY_ENV)
    old_keys = [
        parse_key(text, f"{OLD_KEYS_ENV} (key {n})")
        for n, text in enumerate((old or "").split(","), start=1)
        if text.strip()
    ]
    env = os.environ if source is None or isinstance(source, Settings) else source
    accept_plain = env.get(ACCEPT_PLAIN_ENV, "").strip().lower() in ("1", "true", "yes")
    return EncryptionCodec(key, old_keys, accept_plain=accept_plain)


def data_converter(source: Settings | Mapping[str, str] | None = None) -> DataConverter:
    """Stratagem's data converter: the pydantic converter, plus, when an encryption key is set,
    the encrypting codec and a failure converter that moves failure messages and stack traces
    into an (encrypted) payload. Every client and worker of one deployment must use the same."""
    codec = codec_from(source)
    if codec is None:
        return stratagem_data_converter
    return dataclasses.replace(
        stratagem_data_converter,
        payload_codec=codec,
        failure_converter_class=EncryptingFailureConverter,
    )


def _key_texts(source: Settings | Mapping[str, str] | None) -> tuple[str | None, str | None]:
    if isinstance(source, Settings):
        current, old = source.encryption_key, source.encryption_old_keys
    else:
        env = os.environ if source is None else source
        current, old = env.get(KEY_ENV), env.get(OLD_KEYS_ENV)
    current = (current or "").strip() or None
    old = (old or "").strip() or None
    return current, old
