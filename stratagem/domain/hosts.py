"""How the worker's configuration writes a host: `host`, `host:port`, `[v6]` or `[v6]:port`, as
the HTTP allowlist and a secret's bound hosts both do (one parser, so the two cannot disagree)."""

from __future__ import annotations

import ipaddress


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


def is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
