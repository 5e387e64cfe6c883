"""A decision arriving as data, from another agent or an assistant: `{"decision": KIND, ...fields}`.

KIND is one of the decisions people send a run (stratagem.domain.decisions.kinds): approve,
reject, answer, repair, budget, resolve. The fields are that kind's, without `by`: who decides is
the person the server authenticated, never a name the payload carries (a `by` in it is refused),
and the server signs it (a `signer`, `signature` or `nonce` in it is refused, as is any field
the kind does not take: a misspelt one would otherwise be dropped, and change what is decided).
A plan revision is left to the console and the CLI, where a person reads the whole plan.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from stratagem.common.errors import StratagemError
from stratagem.domain.decision_inputs import DecisionInput
from stratagem.domain.decisions import kinds
from stratagem.domain.decisions.kinds import Kind

ALLOWED = tuple(k for k in kinds.KINDS if k is not kinds.REVISE)
BY_NAME = {k.name: k for k in ALLOWED}
MAX_PAYLOAD_CHARS = 64_000
SIGNATURE_FIELDS = frozenset({"signer", "signature", "nonce"})


class DecisionPayloadError(StratagemError):
    """A decision that cannot be read: what is wrong, in one line."""


def decision_of(payload: Any, who: str) -> tuple[Kind, DecisionInput]:
    """The kind and input of `payload` decided by `who`. Raises DecisionPayloadError."""
    if not isinstance(payload, dict):
        raise DecisionPayloadError('a decision is an object: {"decision": "approve", ...}')
    fields = dict(payload)
    name = fields.pop("decision", None)
    if name not in BY_NAME:
        raise DecisionPayloadError(f"'decision' must be one of {', '.join(BY_NAME)}, not {name!r}")
    if "by" in fields:
        raise DecisionPayloadError("a decision names no 'by': it is decided by the person you authenticated as")
    signed = sorted(SIGNATURE_FIELDS & fields.keys())
    if signed:
        raise DecisionPayloadError(f"a decision names no {signed[0]!r}: the server signs it")
    if len(repr(fields)) > MAX_PAYLOAD_CHARS:
        raise DecisionPayloadError(f"the decision takes more than {MAX_PAYLOAD_CHARS:,} characters")
    kind = BY_NAME[name]
    # A misspelt field would be dropped (pydantic ignores unknown ones): "step" for "step_id"
    # would approve the plan instead of the step. Refused, with the fields the kind takes.
    unknown = sorted(str(key) for key in fields.keys() - kind.input.model_fields.keys())
    if unknown:
        takes = ", ".join(f for f in kind.input.model_fields if f not in ("by", *SIGNATURE_FIELDS))
        raise DecisionPayloadError(f"{name} takes no {unknown[0][:40]!r} (it takes: {takes})")
    try:
        return kind, kind.input(by=who, **fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or name
        raise DecisionPayloadError(
            f"{name}: {where}: {first['msg']}"
            + (f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else "")
        ) from None
    except TypeError as exc:
        raise DecisionPayloadError(f"{name}: {exc}") from None
