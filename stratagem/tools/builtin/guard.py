"""Where `http_request` may connect, by address: the transport that resolves a name once, refuses
loopback, private and link-local addresses the allowlist does not name, never reaches the
worker's Temporal service, and holds the whole request to one deadline."""

import ipaddress
import os
import socket
import time
from typing import Any

import httpcore
import httpcore._backends.sync  # noqa: F401 - SyncStream, wrapped with a deadline
import httpx

from stratagem.common.config import Settings
from stratagem.common.errors import ToolError
from stratagem.tools.builtin.allowlist import HTTP_ALLOWLIST_ENV, host_and_port, is_ip

# More addresses no step may call (host:port, comma-separated), beside the worker's Temporal ones.
HTTP_DENY_ENV = "STRATAGEM_HTTP_DENY"

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def _ip(text: str) -> IpAddress:
    address = ipaddress.ip_address(text.split("%", 1)[0])  # drop an IPv6 zone
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


_worker_addresses: set[str] = set()


def protect_address(address: str) -> None:
    """Add a Temporal frontend this process's workers connect to (and its UI) to what steps may not call."""
    _worker_addresses.add(address)


def guarded_transport(allowlist: list[tuple[str, int | None]], deadline: float) -> httpx.HTTPTransport:
    """A transport that connects only where a step may, and gives up at `deadline` (time.monotonic)."""
    return _GuardedTransport(_GuardedBackend(allowlist, _protected_addresses(), deadline))


def _protected_addresses() -> set[tuple[IpAddress, int]]:
    """Where the worker's Temporal lives: the frontend, the Web UI beside it, and what the operator adds.

    Never reachable from a step, whatever the allowlist says: a step that reaches the frontend or
    the UI's HTTP API could signal or update runs, its own included.
    """
    entries = []
    # The worker's own connection, from its environment.
    for frontend in {Settings.from_env().address, *_worker_addresses}:
        host, port = host_and_port(frontend.lower())
        entries.append(frontend.lower())
        if port is not None:
            entries.append(f"[{host}]:{port + 1000}" if ":" in host else f"{host}:{port + 1000}")
    entries += [e for e in os.environ.get(HTTP_DENY_ENV, "").lower().split(",") if e.strip()]
    protected = set()
    for entry in entries:
        host, port = host_and_port(entry.strip())
        for ip in _resolve(host, port or 80, quiet=True):
            protected.add((ip, port or 80))
    return protected


def _resolve(host: str, port: int, quiet: bool = False) -> list[IpAddress]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        if quiet:
            return []
        raise
    return list(dict.fromkeys(_ip(str(info[4][0])) for info in infos))


def _is_public(ip: IpAddress) -> bool:
    return ip.is_global and not (ip.is_multicast or ip.is_reserved or ip.is_unspecified)


class _GuardedBackend(httpcore.SyncBackend):
    """Connects only to addresses a step may reach, and holds every read to one deadline.

    The name is resolved here, once, and the socket connects to the address that was checked, so
    a name cannot pass the check and then resolve elsewhere. Loopback, private and link-local
    addresses are refused unless the allowlist names that address itself; the worker's Temporal
    addresses are refused always.
    """

    def __init__(
        self, allowlist: list[tuple[str, int | None]], protected: set[tuple[IpAddress, int]], deadline: float
    ) -> None:
        self.allowlist = allowlist
        self.protected = protected
        self.deadline = deadline

    def remaining(self, timeout: float | None) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise httpcore.ReadTimeout("the request's total time ran out")
        return left if timeout is None else min(timeout, left)

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> httpcore.NetworkStream:
        try:
            addresses = _resolve(host, port)
        except OSError as exc:
            raise httpcore.ConnectError(f"cannot resolve {host}: {exc}") from None
        for ip in addresses:
            self.check(host, ip, port)
        try:
            sock = socket.create_connection((str(addresses[0]), port), self.remaining(timeout))
        except TimeoutError:
            raise httpcore.ConnectTimeout(f"connecting to {host}:{port} timed out") from None
        except OSError as exc:
            raise httpcore.ConnectError(str(exc) or type(exc).__name__) from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return _DeadlineStream(sock, self)

    def check(self, host: str, ip: IpAddress, port: int) -> None:
        where = f"'{host}:{port}'" + (f" ({ip})" if host != str(ip) else "")
        if (ip, port) in self.protected:
            raise ToolError(
                f"http_request: {where} is the worker's Temporal service, which steps may never call",
                retryable=False,
            )
        if _is_public(ip):
            return
        for pattern, allowed_port in self.allowlist:
            if (
                is_ip(pattern)
                and _ip(pattern) == ip
                and (allowed_port == port or (allowed_port is None and port in (80, 443)))
            ):
                return
        raise ToolError(
            f"http_request: {where} is a loopback, private or link-local address; "
            f"list the address itself in {HTTP_ALLOWLIST_ENV} to allow it",
            retryable=False,
        )


class _DeadlineStream(httpcore._backends.sync.SyncStream):
    def __init__(self, sock: socket.socket, backend: _GuardedBackend) -> None:
        super().__init__(sock)
        self.backend = backend

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return super().read(max_bytes, self.backend.remaining(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        super().write(buffer, self.backend.remaining(timeout))

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None) -> Any:
        # The TLS stream replaces this one; it must keep the deadline (https is the usual case).
        stream = super().start_tls(ssl_context, server_hostname, self.backend.remaining(timeout))
        if type(stream) is httpcore._backends.sync.SyncStream:
            return _DeadlineStream(stream._sock, self.backend)
        return stream


class _GuardedTransport(httpx.HTTPTransport):
    def __init__(self, backend: _GuardedBackend) -> None:
        super().__init__()
        self._pool = httpcore.ConnectionPool(ssl_context=httpx.create_ssl_context(), network_backend=backend)
