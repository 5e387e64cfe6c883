"""Which hosts `http_request` may call, by name: the operator's allowlist, checked against a URL
before anything is sent. Where a name leads is checked again at connect time (guard.py)."""

import ipaddress
import os

import httpx

from ...errors import ToolError

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


def host_and_port(entry: str) -> tuple[str, int | None]:
    """`host`, `host:port`, `[v6]` or `[v6]:port` -> (host, port or None)."""
    host, port = entry, None
    if entry.startswith("["):  # [ipv6] or [ipv6]:port
        host, _, rest = entry[1:].partition("]")
        if rest.startswith(":") and rest[1:].isdigit():
            port = int(rest[1:])
    elif entry.count(":") == 1:
        name, _, maybe_port = entry.partition(":")
        if maybe_port.isdigit():
            host, port = name, int(maybe_port)
    return host.rstrip("."), port


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


def is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
