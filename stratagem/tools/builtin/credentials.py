"""The worker's credentials in one `http_request`: `${secret:NAME}` filled in only where the
operator bound NAME (stratagem.domain.secret_bindings), checked again at every redirect, and every
credential the request carried kept out of what the step returns or reports.

httpx drops `Authorization` on a redirect to another origin but keeps every other header
(`X-Api-Key`, `Cookie`, ...), so a bound host that redirects elsewhere would hand the credential
on: each hop is checked against the bindings of the secrets its headers hold.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
from dataclasses import dataclass, field

import httpx

from stratagem.common.errors import ConfigError, ToolError
from stratagem.domain.secret_bindings import (
    SECRET_ENV_PREFIX,
    SECRET_REFERENCE,
    SecretBinding,
    binding_from_env,
    binding_refusal,
)
from stratagem.domain.validation import CREDENTIAL_HEADERS

# Words before a credential that are no secret themselves: "Bearer", "Basic", ...
_AUTH_SCHEMES = frozenset({"bearer", "basic", "digest", "token", "negotiate", "ntlm", "apikey"})
_MIN_PART = 6


@dataclass
class FilledHeaders:
    """A request's headers with the secrets filled in, and what is needed to check each hop."""

    headers: dict[str, str]
    # The secrets each header holds (header name in lower case -> (secret name, binding)).
    secrets_in: dict[str, list[tuple[str, SecretBinding]]] = field(default_factory=dict)
    values: list[str] = field(default_factory=list)

    def check(self, url: httpx.URL, headers: httpx.Headers) -> None:
        """Refuse to send `headers` to `url` if one holds a secret not bound to that host."""
        target = (url.scheme, url.host, url.port)
        for header in headers:
            for name, binding in self.secrets_in.get(header.lower(), []):
                if refusal := binding_refusal(name, binding, header, target):
                    raise ToolError(f"http_request: {refusal}", retryable=False)

    def redactions(self) -> list[str]:
        """Every credential the request carried, as an upstream might echo it back: each secret,
        each credential header's value, and its parts (a token without "Bearer", a cookie's value,
        Basic credentials decoded). Longest first, so a value is masked whole before its parts."""
        found = set(self.values)
        for name, value in self.headers.items():
            if name.lower() in CREDENTIAL_HEADERS:
                found.add(value)
                # Parts shorter than a token would mask ordinary words in the output ("dark" of
                # a cookie "theme=dark").
                found.update(part for part in _parts(value) if len(part) >= _MIN_PART)
        return sorted((v for v in found if len(v) >= 4), key=len, reverse=True)


def fill_secrets(headers: dict[str, str], url: httpx.URL) -> FilledHeaders:
    """`headers` with `${secret:NAME}` replaced by the worker's STRATAGEM_SECRET_NAME, where NAME
    is bound to `url`'s host and that header. A plan names a credential; the worker supplies it
    when the request is sent, so the value never enters the plan, the history or the output."""
    filled = FilledHeaders(headers={})
    target = (url.scheme, url.host, url.port)

    for header, text in headers.items():

        def value(match: re.Match[str], header: str = header) -> str:
            name = match.group(1).upper()
            try:
                binding = binding_from_env(name)
            except ConfigError as exc:
                raise ToolError(f"http_request: {exc}", retryable=False) from None
            refusal = binding_refusal(name, binding, header, target)
            if refusal or binding is None:
                raise ToolError(f"http_request: {refusal}", retryable=False)
            secret = os.environ.get(SECRET_ENV_PREFIX + name)
            if not secret:
                raise ToolError(
                    f"http_request: secret '{match.group(1)}' is not set on the worker ({SECRET_ENV_PREFIX}{name})",
                    retryable=False,
                )
            filled.secrets_in.setdefault(header.lower(), []).append((name, binding))
            filled.values.append(secret)
            return secret

        filled.headers[header] = SECRET_REFERENCE.sub(value, str(text))
    return filled


def _parts(value: str) -> list[str]:
    """What of a credential header's value an upstream may echo on its own."""
    parts = []
    for part in re.split(r"[\s,;]+", value):
        if part.lower() in _AUTH_SCHEMES:
            continue
        parts.append(part)
        _, equals, after = part.partition("=")
        if equals:
            parts.append(after)  # a cookie's value, without its name
    scheme, _, encoded = value.strip().partition(" ")
    if scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(encoded.strip(), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            decoded = ""
        parts += [decoded, decoded.partition(":")[2]]
    return parts
