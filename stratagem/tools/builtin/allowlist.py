"""Which hosts `http_request` may call, by name: the operator's allowlist, checked against a URL
before anything is sent. Where a name leads is checked again at connect time (guard.py)."""

import os

import httpx

from stratagem.common.errors import ToolError
from stratagem.domain.hosts import host_and_port, is_ip

HTTP_ALLOWLIST_ENV = "STRATAGEM_HTTP_ALLOWLIST"


def http_allowlist() -> list[tuple[str, int | None]]:
    """The allowed (host pattern, port or None for the scheme's default port), read now so changes apply."""
    entries = []
    for entry in os.environ.get(HTTP_ALLOWLIST_ENV, "").split(","):
        entry = entry.strip().lower()
        if not entry:
            continue
        entries.append(host_and_port(entry))
    return entries


def check_allowed(url: httpx.URL, allowlist: list[tuple[str, int | None]]) -> None:
    """The URL's scheme, host and port against the allowlist, before anything is sent.

    An entry without a port allows the scheme's default port only (80, 443): "127.0.0.1" must not
    open every local service. Where the name leads is checked again when connecting.
    """
    if url.scheme not in ("http", "https"):
        raise ToolError(
            f"http_request: only http and https URLs are allowed, not '{url.scheme or 'no scheme'}' ({url})",
            retryable=False,
        )
    host = url.host.lower().rstrip(".")
    if not host:
        raise ToolError(f"http_request: URL '{url}' has no host", retryable=False)
    port = url.port or _default_port(url.scheme)
    for pattern, allowed_port in allowlist:
        if (allowed_port or _default_port(url.scheme)) != port:
            continue
        if host == pattern or (pattern.startswith("*.") and host.endswith(pattern[1:]) and not is_ip(host)):
            return
    where = f"{host}:{port}" if url.port else host
    raise ToolError(
        f"http_request: host '{where}' is not allowed; add it to {HTTP_ALLOWLIST_ENV} "
        "(comma-separated hosts; a host without ':port' allows ports 80 and 443 only)",
        retryable=False,
    )


def _default_port(scheme: str) -> int:
    return 443 if scheme == "https" else 80
