"""Signed decisions: who approved is proven by a key the workers trust, not claimed in a field.

Anyone who can reach the Temporal frontend can send a run an update or a signal, and `by` is
just a string. So a deployment gives each person (or an issuer such as a review console) an
Ed25519 key pair. The private key stays with the person; the public key is listed in the
workers' STRATAGEM_APPROVER_KEYS (`name:base64`, comma-separated, or `@file` with one per
line). An approver's key signs only for its own name: the decision's `by` must be the signer.
An issuer, such as a review console that authenticates people itself, signs with its own key
for the person it authenticated (`Signer.issue`); its public key is listed in the workers'
STRATAGEM_ISSUER_KEYS (same format), and a decision it signed counts for any `by`, with the
verdict saying so (`Verdict.on_behalf_of`). A decision carries `signer` and `signature`, an
Ed25519 signature over

    {"decision": <the decision's fields, defaults left out>, "kind": <approve|reject|...>,
     "run": <the run id>, "signer": <name>}

as canonical JSON, so it cannot be moved to another run, turned into another kind of decision,
or altered (`by` included, so an issued decision cannot be given to another person). The worker
checks it before the workflow sees the decision (`VerifyDecisions`, a workflow interceptor): an
update that fails is rejected, a signal that fails is recorded as ignored, and the ledger keeps
`signed_by` on every decision (an issuer's name for an issued one, the person staying in `by`).

A worker with no keys accepts unsigned decisions (the local, embedded default); a worker with
keys refuses them unless STRATAGEM_ALLOW_UNSIGNED=1. Keys are the worker's own configuration,
never part of a run's input. `stratagem keygen NAME` makes a pair; the CLI signs with the key
in STRATAGEM_SIGNING_KEY.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from pydantic import BaseModel

from .errors import ConfigError

# Imported here, with the module, not where they are used: verification runs inside workflow
# tasks, and Temporal's sandbox cannot import cryptography's native code there.

APPROVER_KEYS_ENV = "STRATAGEM_APPROVER_KEYS"
ISSUER_KEYS_ENV = "STRATAGEM_ISSUER_KEYS"
ALLOW_UNSIGNED_ENV = "STRATAGEM_ALLOW_UNSIGNED"
SIGNING_KEY_ENV = "STRATAGEM_SIGNING_KEY"
# Decision updates and the signals that carry the same decisions.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")
_SIGNATURE_FIELDS = frozenset({"signer", "signature"})


def signed_bytes(run_id: str, kind: str, decision: BaseModel, signer: str) -> bytes:
    """What a signature covers: the run, the kind of decision, its fields and the signer."""
    fields = decision.model_dump(mode="json", exclude=set(_SIGNATURE_FIELDS), exclude_defaults=True)
    document = {"decision": fields, "kind": kind, "run": run_id, "signer": signer}
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _b64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise ConfigError(f"{what} is not valid base64") from None


def _check_name(name: str, what: str) -> str:
    if not _NAME.match(name):
        raise ConfigError(f"{what}: '{name[:40]}' is not a key name (letters, digits, . _ @ -; at most 64)")
    return name


# --- signing (the person's side) -----------------------------------------------------------------


@dataclass(frozen=True)
class Signer:
    """A person's private key and the name the workers know it by."""

    name: str
    seed: bytes = field(repr=False)

    @classmethod
    def generate(cls, name: str) -> Signer:
        return cls(_check_name(name, "stratagem keygen"), os.urandom(32))

    @classmethod
    def from_file(cls, path: str | Path) -> Signer:
        """A key file as `stratagem keygen` writes it: `name:base64 seed` on one line."""
        source = f"{SIGNING_KEY_ENV} ({path})"
        try:
            text = Path(path).expanduser().read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigError(f"cannot read the signing key {path}: {exc.strerror}") from None
        name, sep, seed = text.partition(":")
        if not sep:
            raise ConfigError(f"{source} must hold one line NAME:KEY, as `stratagem keygen` writes it")
        key = _b64(seed, source)
        if len(key) != 32:
            raise ConfigError(f"{source} holds a {len(key)}-byte key, not a 32-byte Ed25519 key")
        return cls(_check_name(name.strip(), source), key)

    @classmethod
    def from_env(cls, env: Any = None) -> Signer | None:
        path = (env if env is not None else os.environ).get(SIGNING_KEY_ENV, "").strip()
        return cls.from_file(path) if path else None

    def private_line(self) -> str:
        return f"{self.name}:{base64.b64encode(self.seed).decode()}"

    def public_line(self) -> str:
        """The entry for the workers' STRATAGEM_APPROVER_KEYS (or, for an issuer, STRATAGEM_ISSUER_KEYS)."""
        public = Ed25519PrivateKey.from_private_bytes(self.seed).public_key()
        return f"{self.name}:{base64.b64encode(public.public_bytes(Encoding.Raw, PublicFormat.Raw)).decode()}"

    def sign(self, run_id: str, kind: str, decision: BaseModel) -> Any:
        """`decision` with `signer` and `signature` filled in (a copy). Its `by` is signed as it is,
        never replaced: the workers accept a `by` other than this key's name only from an issuer
        key (STRATAGEM_ISSUER_KEYS)."""
        unsigned = decision.model_copy(update={"signer": self.name, "signature": None})
        signature = Ed25519PrivateKey.from_private_bytes(self.seed).sign(
            signed_bytes(run_id, kind, unsigned, self.name)
        )
        return unsigned.model_copy(update={"signature": base64.b64encode(signature).decode()})

    def issue(self, run_id: str, kind: str, decision: BaseModel, *, by: str) -> Any:
        """For an issuer (a review console): `decision` as decided by `by`, the person this
        issuer authenticated, signed with the issuer's key (a copy). `by` replaces whatever the
        decision said, so a name sent along with the decision (by a browser, say) is never
        what gets signed. The workers must list this key in STRATAGEM_ISSUER_KEYS."""
        if not by or not by.strip():
            raise ValueError("an issued decision names the person it is issued for (by)")
        return self.sign(run_id, kind, decision.model_copy(update={"by": by}))


# --- verifying (the worker's side) ---------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """What the worker found: `signer` when verified; `refused` says why it may not be applied.

    `on_behalf_of` is set when the signer is an issuer (STRATAGEM_ISSUER_KEYS): the person, the
    decision's `by`, the issuer vouched for. `signer` stays the issuer's key, which the ledger
    keeps as `signed_by`.
    """

    signer: str | None = None
    refused: str | None = None
    on_behalf_of: str | None = None

    @property
    def issuer(self) -> bool:
        """True when an issuer's key signed the decision for the person in its `by`."""
        return self.on_behalf_of is not None


def _read_keys(env: Any, variable: str) -> dict[str, bytes]:
    """`name:base64` public keys from `variable`: comma-separated, or `@file` with one per line."""
    text = env.get(variable, "").strip()
    if text.startswith("@"):
        try:
            text = Path(text[1:]).expanduser().read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read {variable} file {text[1:]}: {exc.strerror}") from None
    keys: dict[str, bytes] = {}
    for entry in re.split(r"[,\n]", text):
        entry = entry.strip()
        if not entry or entry.startswith("#"):
            continue
        name, sep, public = entry.partition(":")
        if not sep:
            raise ConfigError(f"{variable}: an entry must be NAME:PUBLIC_KEY, as `stratagem keygen` prints it")
        key = _b64(public, f"{variable} (key of {name.strip()[:40]})")
        if len(key) != 32:
            raise ConfigError(f"{variable}: the key of {name.strip()[:40]} is {len(key)} bytes, not 32 (Ed25519)")
        keys[_check_name(name.strip(), variable)] = key
    return keys


@dataclass(frozen=True)
class DecisionPolicy:
    """The worker's trusted keys, and whether unsigned decisions are accepted.

    `keys` are approvers', each signing only for its own name; `issuer_keys` are issuers', which
    sign for the people they authenticated. A name is one or the other.
    """

    keys: dict[str, bytes] = field(default_factory=dict)
    allow_unsigned: bool = True
    issuer_keys: dict[str, bytes] = field(default_factory=dict)

    @property
    def requires_signatures(self) -> bool:
        return not self.allow_unsigned

    @classmethod
    def from_env(cls, env: Any = None) -> DecisionPolicy:
        env = env if env is not None else os.environ
        keys = _read_keys(env, APPROVER_KEYS_ENV)
        issuers = _read_keys(env, ISSUER_KEYS_ENV)
        both = sorted(keys.keys() & issuers.keys())
        if both:
            raise ConfigError(
                f"{', '.join(both)[:200]} listed in both {APPROVER_KEYS_ENV} and {ISSUER_KEYS_ENV}: "
                "a key signs either for its own name (approver) or for the people it authenticates (issuer)"
            )
        allow = env.get(ALLOW_UNSIGNED_ENV, "").strip().lower() in ("1", "true", "yes")
        return cls(keys=keys, allow_unsigned=allow or not (keys or issuers), issuer_keys=issuers)

    def verify(self, run_id: str, kind: str, decision: Any) -> Verdict:
        signer = getattr(decision, "signer", None)
        signature = getattr(decision, "signature", None)
        if not signer and not signature:
            if self.allow_unsigned:
                return Verdict()
            return Verdict(refused="this deployment accepts only signed decisions (set STRATAGEM_SIGNING_KEY)")
        issued = bool(signer) and signer in self.issuer_keys
        key = self.issuer_keys.get(signer or "") if issued else self.keys.get(signer or "")
        if key is None or not signature or not signer:
            return Verdict(refused=f"the decision is signed by '{str(signer)[:64]}', a key this worker does not trust")
        by = getattr(decision, "by", None)
        if not issued and (by if by is not None else signer) != signer:
            return Verdict(refused=f"the decision says it is by '{str(by)[:64]}' but is signed by '{signer}'")
        if issued and not by:
            return Verdict(refused=f"the decision is issued by '{signer}' but names nobody it is issued for (by)")
        try:
            Ed25519PublicKey.from_public_bytes(key).verify(
                base64.b64decode(signature, validate=True), signed_bytes(run_id, kind, decision, signer)
            )
        except (InvalidSignature, binascii.Error, ValueError):
            return Verdict(refused=f"the signature of '{signer}' does not match this decision on this run")
        return Verdict(signer=signer, on_behalf_of=by if issued else None)
