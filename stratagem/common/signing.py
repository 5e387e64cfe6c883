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

Signing is the default, not an option. A home (STRATAGEM_HOME) keeps its people's keys
(`Keyring`: keys/NAME.key, made on first use as ssh-keygen does, and keys/issuers/NAME.key for a
console), the CLI and the Python client sign every decision with the key of the person deciding,
and every worker and workflow host trusts its home's keys plus the ones the operator configures.
A worker refuses unsigned decisions unless the operator sets STRATAGEM_ALLOW_UNSIGNED=1. Runs
started before signing became the default (below the level of stratagem.domain.run_levels'
`Change.SIGNED_DECISIONS`, whose patch old histories do not hold) keep the rule they started
under: unsigned decisions count when no key is configured, so their histories replay as they ran.
Keys are the worker's own configuration, never part of a run's input.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from pydantic import BaseModel

from stratagem.common.errors import ConfigError
from stratagem.common.paths import stratagem_home

# Imported here, with the module, not where they are used: verification runs inside workflow
# tasks, and Temporal's sandbox cannot import cryptography's native code there.

APPROVER_KEYS_ENV = "STRATAGEM_APPROVER_KEYS"
ISSUER_KEYS_ENV = "STRATAGEM_ISSUER_KEYS"
ALLOW_UNSIGNED_ENV = "STRATAGEM_ALLOW_UNSIGNED"
SIGNING_KEY_ENV = "STRATAGEM_SIGNING_KEY"
# What a start that lets a run approve itself (auto_approve) is signed as, and for how long after
# it was signed the start may happen: a signed start seen in one run's history cannot start
# another run with the same id later.
AUTO_APPROVE_KIND = "auto_approve"
AUTO_APPROVE_SECONDS = 5 * 60
HOW_TO_SIGN = (
    "the stratagem CLI and Python client sign with the keys in STRATAGEM_HOME; a worker accepts unsigned "
    "decisions only with STRATAGEM_ALLOW_UNSIGNED=1"
)
# Decision updates and the signals that carry the same decisions.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")
_SIGNATURE_FIELDS = frozenset({"signer", "signature"})


def signed_bytes(run_id: str, kind: str, decision: BaseModel, signer: str, execution: str | None = None) -> bytes:
    """What a signature covers: the run, the kind of decision, its fields (a random nonce among
    them) and the signer; and, from level 7, the run's execution (its first run id), so that a
    decision read from one run's history cannot be sent to a new run started under the same id."""
    fields = decision.model_dump(mode="json", exclude=set(_SIGNATURE_FIELDS), exclude_defaults=True)
    document = {"decision": fields, "kind": kind, "run": run_id, "signer": signer}
    if execution is not None:
        document["execution"] = execution
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

    @property
    def public_key(self) -> bytes:
        return Ed25519PrivateKey.from_private_bytes(self.seed).public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)

    def public_line(self) -> str:
        """The entry for the workers' STRATAGEM_APPROVER_KEYS (or, for an issuer, STRATAGEM_ISSUER_KEYS)."""
        return f"{self.name}:{base64.b64encode(self.public_key).decode()}"

    def sign(self, run_id: str, kind: str, decision: BaseModel, execution: str | None = None) -> Any:
        """`decision` with `signer`, a fresh `nonce` (where it has one) and `signature` filled in
        (a copy), for the run's execution (`execution`: its first run id; required by runs at
        level 7). Its `by` is signed as it is, never replaced: the workers accept a `by` other
        than this key's name only from an issuer key (STRATAGEM_ISSUER_KEYS)."""
        update: dict[str, Any] = {"signer": self.name, "signature": None}
        if "nonce" in type(decision).model_fields:
            update["nonce"] = base64.urlsafe_b64encode(os.urandom(12)).decode()
        unsigned = decision.model_copy(update=update)
        signature = _private_key(self.seed).sign(signed_bytes(run_id, kind, unsigned, self.name, execution))
        return unsigned.model_copy(update={"signature": base64.b64encode(signature).decode()})

    def issue(self, run_id: str, kind: str, decision: BaseModel, *, by: str, execution: str | None = None) -> Any:
        """For an issuer (a review console): `decision` as decided by `by`, the person this
        issuer authenticated, signed with the issuer's key (a copy). `by` replaces whatever the
        decision said, so a name sent along with the decision (by a browser, say) is never
        what gets signed. The workers must list this key in STRATAGEM_ISSUER_KEYS."""
        if not by or not by.strip():
            raise ValueError("an issued decision names the person it is issued for (by)")
        return self.sign(run_id, kind, decision.model_copy(update={"by": by}), execution)


@functools.lru_cache(maxsize=64)
def _private_key(seed: bytes) -> Ed25519PrivateKey:
    """Loading a key costs as much as a signature (42 us): a process signs with few keys, often."""
    return Ed25519PrivateKey.from_private_bytes(seed)


@functools.lru_cache(maxsize=64)
def _read_key(path: Path, _modified: int) -> Signer:
    """A key file, read once per version (its modification time): every decision signs with one."""
    return Signer.from_file(path)


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


# --- a home's keys ----------------------------------------------------------------------------------


class Keyring:
    """The keys a home (STRATAGEM_HOME) keeps: `keys/NAME.key` for each person who decided from it,
    `keys/issuers/NAME.key` for a review console. A person's key is made the first time they decide,
    as ssh-keygen makes one (the folder readable by its owner only, each file written once, mode
    600), so the quickstart signs without anyone setting anything up. A file counts only under its
    own name: `keys/alice.key` must hold alice's key."""

    def __init__(self, folder: Path):
        self.folder = folder

    @classmethod
    def of_home(cls, home: Path | None = None) -> Keyring:
        return cls((home or stratagem_home()) / "keys")

    def signer(self, name: str, *, create: bool = True) -> Signer:
        """The person's key, made now if missing (`create`). A name that cannot be a key's name
        (letters, digits, . _ @ -), or that is an issuer's of this home, is a ConfigError."""
        if (self.folder / "issuers" / f"{name}.key").is_file():
            # A person's key by an issuer's name would shadow the issuer, and the console with it.
            raise ConfigError(f"'{name[:64]}' is the name of this home's issuer (its review console); choose another")
        return self._key(self.folder, name, create)

    def issuer(self, name: str = "console", *, create: bool = True) -> Signer:
        if (self.folder / f"{name}.key").is_file():
            raise ConfigError(
                f"a person's key is named '{name[:64]}' in {self.folder}; the console needs an issuer key of "
                "its own name: set STRATAGEM_SIGNING_KEY to one (`stratagem keygen NAME`)"
            )
        return self._key(self.folder / "issuers", name, create)

    def has(self, name: str) -> bool:
        return (self.folder / f"{name}.key").is_file()

    def approver_keys(self) -> dict[str, bytes]:
        return self._public(self.folder)

    def issuer_keys(self) -> dict[str, bytes]:
        return self._public(self.folder / "issuers")

    def _key(self, folder: Path, name: str, create: bool) -> Signer:
        path = folder / f"{_check_name(name, 'a signing key')}.key"
        if path.is_file() or not create:
            return _read_key(path, path.stat().st_mtime_ns if path.is_file() else 0)
        folder.mkdir(parents=True, exist_ok=True)
        for made in (self.folder, folder):
            made.chmod(0o700)
        signer = Signer.generate(name)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another process made it meanwhile: theirs is the key
            return Signer.from_file(path)
        except OSError as exc:
            raise ConfigError(f"cannot write the signing key {path}: {exc.strerror}") from None
        with os.fdopen(fd, "w") as file:
            file.write(signer.private_line() + "\n")
        return signer

    @staticmethod
    def _public(folder: Path) -> dict[str, bytes]:
        """The public keys of a folder's key files; a file that is not a key of its own name is
        left out, never trusted."""
        keys: dict[str, bytes] = {}
        try:
            paths = sorted(folder.glob("*.key"))
        except OSError:
            return keys
        for path in paths:
            try:
                signer = Signer.from_file(path)
            except ConfigError:
                continue
            if signer.name == path.stem:
                keys[signer.name] = signer.public_key
        return keys


# --- verifying (the worker's side) -------------------------------------------------------------


@dataclass(frozen=True)
class DecisionPolicy:
    """The worker's trusted keys, and whether unsigned decisions are accepted.

    `keys` are approvers', each signing only for its own name; `issuer_keys` are issuers', which
    sign for the people they authenticated. A name is one or the other. `keyring`: the home whose
    keys are trusted too; a decision signed by a key not known yet reads it again, so a person's
    first decision from that home counts at once. `legacy_unsigned`: whether runs below
    `Change.SIGNED_DECISIONS`'s level accept unsigned decisions (the rule they started under: no key configured).
    """

    keys: dict[str, bytes] = field(default_factory=dict)
    allow_unsigned: bool = False
    issuer_keys: dict[str, bytes] = field(default_factory=dict)
    legacy_unsigned: bool = True
    keyring: Keyring | None = None

    @property
    def requires_signatures(self) -> bool:
        return not self.allow_unsigned

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, *, home: Path | None = None) -> DecisionPolicy:
        """The keys the operator configured, plus those of the home: `home`, else the home of
        `env` (STRATAGEM_HOME; the process's own when `env` is not given). A mapping without
        STRATAGEM_HOME trusts configured keys only."""
        given = env
        env = env if env is not None else os.environ
        configured = _read_keys(env, APPROVER_KEYS_ENV)
        issuers = _read_keys(env, ISSUER_KEYS_ENV)
        both = sorted(configured.keys() & issuers.keys())
        if both:
            raise ConfigError(
                f"{', '.join(both)[:200]} listed in both {APPROVER_KEYS_ENV} and {ISSUER_KEYS_ENV}: "
                "a key signs either for its own name (approver) or for the people it authenticates (issuer)"
            )
        allow = env.get(ALLOW_UNSIGNED_ENV, "").strip().lower() in ("1", "true", "yes")
        if home is None and (given is None or env.get("STRATAGEM_HOME")):
            home = Path(env["STRATAGEM_HOME"]).expanduser() if env.get("STRATAGEM_HOME") else stratagem_home()
        policy = cls(
            keys=dict(configured),
            allow_unsigned=allow,
            issuer_keys=dict(issuers),
            legacy_unsigned=allow or not (configured or issuers),
            keyring=Keyring.of_home(home) if home is not None else None,
        )
        policy.reload()
        return policy

    def reload(self) -> None:
        """Trust the home's keys as they are now (a configured name keeps its configured key)."""
        if self.keyring is None:
            return
        for table, found in ((self.keys, self.keyring.approver_keys()), (self.issuer_keys, self.keyring.issuer_keys())):
            for name, key in found.items():
                if name not in self.keys and name not in self.issuer_keys:
                    table[name] = key

    def describe(self) -> str:
        """The mode, in one line, for a worker to say at its start."""
        if self.allow_unsigned:
            return "decisions: unsigned ones are accepted (STRATAGEM_ALLOW_UNSIGNED=1); signed ones are checked"
        home = f" and the keys of {self.keyring.folder}" if self.keyring is not None else ""
        trusted = sorted(self.keys) + [f"{name} (issuer)" for name in sorted(self.issuer_keys)]
        names = ", ".join(trusted)[:300] or "none yet"
        return f"decisions: signed only; trusting {names}{home}"

    def verify(
        self, run_id: str, kind: str, decision: Any, *, legacy: bool = False, execution: str | None = None
    ) -> Verdict:
        """Whether `decision` may be applied to the run `run_id` as `kind`. `legacy`: the run
        started before signing was the default, and keeps that rule (`legacy_unsigned`);
        `execution`: the run's first run id, which its signature must cover (level 7)."""
        signer = getattr(decision, "signer", None)
        signature = getattr(decision, "signature", None)
        if not signer and not signature:
            if self.allow_unsigned or (legacy and self.legacy_unsigned):
                return Verdict()
            return Verdict(refused=f"this deployment accepts only signed decisions ({HOW_TO_SIGN})")
        if signer and signer not in self.keys and signer not in self.issuer_keys:
            # A person's first decision from the home: their key was made after this worker started.
            # A verdict once given stays (updates are not validated again on replay), so reading
            # the folder here cannot change what a history replays to, only what a new one records.
            self.reload()
        issued = bool(signer) and signer in self.issuer_keys
        key = self.issuer_keys.get(signer or "") if issued else self.keys.get(signer or "")
        if key is None and self.allow_unsigned:
            return Verdict()  # as good as unsigned, which this worker accepts (a home key it does not know)
        if key is None or not signature or not signer:
            return Verdict(refused=f"the decision is signed by '{str(signer)[:64]}', a key this worker does not trust")
        by = getattr(decision, "by", None)
        if not issued and (by if by is not None else signer) != signer:
            return Verdict(refused=f"the decision says it is by '{str(by)[:64]}' but is signed by '{signer}'")
        if issued and not by:
            return Verdict(refused=f"the decision is issued by '{signer}' but names nobody it is issued for (by)")
        # A run from before level 7 takes a signature over the run id alone too, as its clients made them.
        for covers in (execution, None) if legacy and execution is not None else (execution,):
            try:
                Ed25519PublicKey.from_public_bytes(key).verify(
                    base64.b64decode(signature, validate=True), signed_bytes(run_id, kind, decision, signer, covers)
                )
            except (InvalidSignature, binascii.Error, ValueError):
                continue
            return Verdict(signer=signer, on_behalf_of=by if issued else None)
        return Verdict(refused=f"the signature of '{signer}' does not match this decision on this run")

    def verify_start(self, run_id: str, approval: Any, digest: str, started: datetime) -> Verdict:
        """Whether a start that lets the run approve itself (auto_approve) was signed by a trusted
        person, for exactly this input (`digest`), no longer ago than AUTO_APPROVE_SECONDS before
        the run `started`."""
        if approval is None:
            if self.allow_unsigned:
                return Verdict()
            return Verdict(
                refused="this deployment accepts only signed decisions, so a run may approve itself (auto_approve) "
                f"only when a trusted person signed its start ({HOW_TO_SIGN})"
            )
        if approval.digest != digest:
            return Verdict(refused="the signed auto_approve is for another input than the one this run started with")
        signed_at = approval.signed_at
        if not (signed_at.timestamp() - 60 <= started.timestamp() <= signed_at.timestamp() + AUTO_APPROVE_SECONDS):
            return Verdict(refused="the signed auto_approve is out of date; start the run again")
        return self.verify(run_id, AUTO_APPROVE_KIND, approval)


def input_digest(document: Any) -> str:
    """A SHA-256 over a JSON document in canonical form (sorted keys, no spaces)."""
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()
