"""Temporal addresses (host:port): how they are read, whether one is this machine's, and
whether something listens there."""

from __future__ import annotations

import socket

from stratagem.common.errors import ConfigError

MAX_PORT = 65535
LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1", "[::1]", "0.0.0.0"}


def split_address(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ConfigError(f"Temporal address '{address}' is not of the form host:port")
    number = int(port)
    if not 1 <= number <= MAX_PORT:
        raise ConfigError(f"Temporal address '{address}' has port {number}; a port is a number from 1 to {MAX_PORT}")
    return host.strip("[]") or "localhost", number


def is_local(address: str) -> bool:
    host, _ = split_address(address)
    return host in LOCAL_HOSTS or host.startswith("127.")


def is_listening(address: str, timeout: float = 0.5) -> bool:
    host, port = split_address(address)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False
