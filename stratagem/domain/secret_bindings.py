"""Where each of the worker's credentials may go. A plan names a credential as `${secret:NAME}`
in a request header; the worker fills it in only for a request to a host its operator bound NAME
to, and only in the headers bound to it, if any:

    STRATAGEM_SECRET_CRM           the value
    STRATAGEM_SECRET_CRM_HOSTS     crm.example.com,api.crm.example.com:8443   (required; https only,
                                   unless an entry says http://host)
    STRATAGEM_SECRET_CRM_HEADERS   Authorization                              (optional: any header)

The HTTP allowlist says which hosts a step may call, not which of them may read a credential: a
plan sent the CRM token to another allowlisted host, whose request log kept it. So a secret with
no hosts bound is refused wherever it is named. Names ending in _HOSTS or _HEADERS are reserved
for the bindings (`${secret:CRM_HOSTS}` would read the list of hosts of CRM).

Plan validation reads the bindings from the tool catalogue (names, hosts, headers: never
values); `http_request` reads them from the environment for each request it sends, redirects
included.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from urllib.parse import urlsplit

from stratagem.common.errors import ConfigError
from stratagem.domain.compact import CompactModel
from stratagem.domain.hosts import host_and_port, is_ip

SECRET_ENV_PREFIX = "STRATAGEM_SECRET_"
# A bound host takes the secret over https only; `http://host` in a binding allows plain http too.
PLAIN_HTTP = "http://"
HOSTS_SUFFIX = "_HOSTS"
HEADERS_SUFFIX = "_HEADERS"
_SUFFIXES = (HOSTS_SUFFIX, HEADERS_SUFFIX)
SECRET_REFERENCE = re.compile(r"\$\{secret:([A-Za-z_][A-Za-z0-9_]*)\}")
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an HTTP token (RFC 9110)


class SecretBinding(CompactModel):
    """Where one secret may be sent: hosts as the allowlist writes them (`host`, `host:port`,
    `*.domain`, `[v6]:port`; without a port, the scheme's default port only), and the request
    headers it may fill (None: any header)."""

    hosts: list[str]
    headers: list[str] | None = None


def secret_names(text: str) -> list[str]:
    """The secrets `text` names, as `${secret:NAME}`, in capitals (the environment's spelling)."""
    return [m.group(1).upper() for m in SECRET_REFERENCE.finditer(text)]


def binding_from_env(name: str, env: Mapping[str, str] | None = None) -> SecretBinding | None:
    """NAME's binding on this worker, or None when no hosts are bound to it. A malformed one is a
    ConfigError naming the variable."""
    env = os.environ if env is None else env
    hosts_var, headers_var = _variables(name)
    raw_hosts, raw_headers = env.get(hosts_var), env.get(headers_var)
    if raw_hosts is None:
        if raw_headers is not None:
            raise ConfigError(f"{headers_var} is set but {hosts_var} is not: bind the secret to its hosts too")
        return None
    hosts = [_host_entry(hosts_var, item) for item in _items(raw_hosts)]
    headers = None
    if raw_headers is not None:
        headers = _items(raw_headers)
        if not headers:
            raise ConfigError(f"{headers_var} names no header; unset it to let the secret fill any header")
        for header in headers:
            if not _HEADER_NAME.match(header):
                raise ConfigError(f"{headers_var}: '{header}' is not a header name (comma-separated names)")
    return SecretBinding(hosts=hosts, headers=headers) if hosts else None


def binding_variables(env: Mapping[str, str] | None = None) -> tuple[tuple[str, str], ...]:
    """The variables that bind secrets (not their values), as (name, value) pairs in order: all
    that `bindings_from_env` reads, so a key for what it returns."""
    env = os.environ if env is None else env
    return tuple(sorted((v, env[v]) for v in env if v.startswith(SECRET_ENV_PREFIX) and v.endswith(_SUFFIXES)))


def bindings_from_env(env: Mapping[str, str] | None = None) -> dict[str, SecretBinding]:
    """Every secret's binding on this worker. Read when the worker starts, so a malformed binding
    is refused then (one line), and for each run's catalogue."""
    variables = dict(binding_variables(env))
    names = set()
    for variable in variables:
        name = variable[len(SECRET_ENV_PREFIX) :].removesuffix(HOSTS_SUFFIX).removesuffix(HEADERS_SUFFIX)
        if name != name.upper():
            raise ConfigError(f"{variable}: write the secret's name in capitals, as in {variable.upper()}")
        if name:
            names.add(name)
    found = {name: binding_from_env(name, variables) for name in sorted(names)}
    return {name: binding for name, binding in found.items() if binding is not None}


def unbound_secrets(env: Mapping[str, str] | None = None) -> list[str]:
    """The secrets this worker holds that no host is bound to: every step naming one is refused."""
    env = os.environ if env is None else env
    bound = bindings_from_env(env)
    held = (v[len(SECRET_ENV_PREFIX) :] for v in env if v.startswith(SECRET_ENV_PREFIX) and env[v])
    return sorted(n for n in held if not n.endswith(_SUFFIXES) and n not in bound)


def binding_refusal(
    name: str,
    binding: SecretBinding | None,
    header: str,
    target: tuple[str, str, int | None] | None,
) -> str | None:
    """Why `${secret:NAME}` may not go in `header` of a request to `target` (scheme, host, port
    or None for the scheme's), or None if it may. `target` None: the host is not known yet (a
    plan's URL built from a step's output), so only the name and the header are checked."""
    hosts_var, headers_var = _variables(name)
    if name.endswith(_SUFFIXES):
        return (
            f"secret '{name}': names ending in {HOSTS_SUFFIX} or {HEADERS_SUFFIX} are reserved for bindings; rename it"
        )
    if binding is None or not binding.hosts:
        return (
            f"secret '{name}' is bound to no host; set {hosts_var} on the workers to the hosts it may be sent to "
            "(comma-separated, e.g. crm.example.com,api.crm.example.com:8443)"
        )
    if binding.headers is not None and header.lower() not in {h.lower() for h in binding.headers}:
        return f"secret '{name}' may be sent only in {', '.join(binding.headers)}, not in '{header}' ({headers_var})"
    if target is not None and not any(host_matches(entry, *target) for entry in binding.hosts):
        _, host, port = target
        where = f"{host}:{port}" if port is not None else host
        return f"secret '{name}' may be sent only to {', '.join(binding.hosts)}, not to '{where}' ({hosts_var})"
    return None


def literal_target(url: str) -> tuple[str, str, int | None] | None:
    """(scheme, host, port) of a plan's URL when its host is written out, else None: a URL whose
    host comes from a reference (`${lookup.url}`) is known only when the request is sent."""
    head = url.split("${", 1)[0]
    if "${" in url:
        # The authority is written out only if it ends before the first reference.
        after = head.split("://", 1)[1] if "://" in head else ""
        if not any(mark in after for mark in "/?#"):
            return None
    try:
        parts = urlsplit(head)
        port = parts.port
    except ValueError:
        return None
    host = (parts.hostname or "").rstrip(".")
    if not parts.scheme or not host:
        return None
    return parts.scheme.lower(), host, port


def host_matches(entry: str, scheme: str, host: str, port: int | None) -> bool:
    """Whether a bound host entry covers a request to scheme://host:port. Without a port, an
    entry covers the scheme's default port only, as the allowlist does. Over https only, unless
    the entry says `http://host`: a credential sent in the clear can be read on the way."""
    plain = entry.startswith(PLAIN_HTTP)
    if scheme != "https" and not (plain and scheme == "http"):
        return False
    pattern, bound_port = host_and_port(entry.removeprefix(PLAIN_HTTP))
    default = 443 if scheme == "https" else 80
    if (bound_port or default) != (port or default):
        return False
    host = host.lower().rstrip(".").strip("[]")
    if pattern.startswith("*."):
        return host.endswith(pattern[1:]) and not is_ip(host)
    return host == pattern


def _variables(name: str) -> tuple[str, str]:
    return f"{SECRET_ENV_PREFIX}{name}{HOSTS_SUFFIX}", f"{SECRET_ENV_PREFIX}{name}{HEADERS_SUFFIX}"


def _items(raw: str) -> list[str]:
    return [item.strip() for item in raw.split(",") if item.strip()]


def _host_entry(variable: str, item: str) -> str:
    entry = item.lower()
    plain = entry.startswith(PLAIN_HTTP)
    entry = entry.removeprefix(PLAIN_HTTP)
    host, port = host_and_port(entry)
    valid_port = port is None or 0 < port < 65536
    if not host or "/" in entry or "@" in entry or not valid_port or (":" in host and not entry.startswith("[")):
        raise ConfigError(
            f"{variable}: '{item}' is not a host; write host or host:port, comma-separated (e.g. crm.example.com:8443)"
        )
    return PLAIN_HTTP + entry if plain else entry
