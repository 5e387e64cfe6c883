"""What credentials look like, and text with them masked: model errors, tool results and what an
approver is shown. Pure (regular expressions only), so the workflow masks what it shows a person
with the same rules the model providers and tools use.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

# Shapes of provider API keys, so a key echoed back by a server never reaches a message.
# What credentials look like: provider keys (OpenAI, Anthropic, Mailgun-style), GitHub, Slack,
# AWS access key ids, JWTs, PEM private keys, and the value after "Bearer"/"Basic" or after a
# credential-like name ("api_key=...", "password: ..."). Matched text becomes "[redacted]".
_KEY_SHAPES = re.compile(
    r"\b(?:sk-[A-Za-z0-9_\-*]{6,}|sk-ant-[A-Za-z0-9_\-*]{6,}|key-[A-Za-z0-9]{16,}"
    r"|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|xox[abposr]-[A-Za-z0-9-]{10,}"
    r"|AKIA[0-9A-Z]{16}|eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,})"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)",
    re.DOTALL,
)
_KEY_AFTER = re.compile(
    r"(?i)(\b(?:bearer|basic)\s+|\b(?:api[_-]?key|apikey|access[_-]?token|secret|password|passwd|auth)"
    r"[\"']?\s*[:=]\s*[\"']?)([^\s\"',;&]{6,})"
)


def without_secrets(text: str, secrets: Iterable[str | None]) -> str:
    """`text` with each of `secrets` (the values themselves, four characters or more) masked."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "[redacted]")
    return text


def redact(text: str, secrets: Iterable[str | None] = ()) -> str:
    """`text` without any of `secrets` and without anything shaped like an API key."""
    text = _KEY_SHAPES.sub("[redacted]", without_secrets(text, secrets))
    return _KEY_AFTER.sub(lambda m: m.group(1) + "[redacted]", text)


def masked(value: Any) -> Any:
    """A JSON-like `value` with anything shaped like a credential masked inside each string on its
    own, so a masked value never swallows the fields after it."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {key: masked(item) for key, item in value.items()}
    if isinstance(value, list):
        return [masked(item) for item in value]
    return value
