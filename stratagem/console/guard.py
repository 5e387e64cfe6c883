"""What a request must show before the console reads it: that it was addressed to this console
(its Host), and, when it changes anything, that it came from the console's own pages (its Origin).

DNS rebinding: a page on evil.example whose name then resolves to 127.0.0.1 talks to a console
listening there as if it were its own site. The browser sends `Host: evil.example:8400`, no
cookie is needed in `local` mode, and `/api/whoami` hands over the CSRF token. So the console
answers only to the names it serves (`Site`): the address the request arrived on, `localhost`,
`127.0.0.1` and `[::1]` when it listens on loopback (or on every address), and the public URLs
it is configured with (`--public-url`, `STRATAGEM_CONSOLE_URL`); anything else gets a 421.
An IP-literal Host cannot be rebound: a page whose origin is that address is the console's own.

Origin: every request that may change state (anything but GET, HEAD and OPTIONS), login and
logout included, whose Origin (or, without one, Referer) is not one of the console's own origins
is refused with 403. A request with neither passes only with a bearer token (scripts send one
and no Origin); one that relies on credentials a browser sends by itself (a cookie, the proxy
header, the local user) must show where it came from. This holds where a CSRF token leaked, and
before any route runs. One path is outside the Origin rule: Slack's `/slack/interactions`, whose
requests come from Slack's servers (no Origin), are believed only with Slack's signature, and read
no credential a browser could send by itself (stratagem.console.slack).

Starlette's TrustedHostMiddleware is not used: it takes a fixed list of names, so it cannot
accept the address a connection arrived on (which a console listening on every address needs),
it ignores the port, and its refusal ("Invalid host header") does not say what to do.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import urlsplit

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from stratagem.common.errors import ConfigError

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
WILDCARDS = frozenset({"", "0.0.0.0", "::"})
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
DEFAULT_PORTS = {"http": 80, "https": 443}
# Paths whose requests prove themselves by a signature over the body, and use no cookie or header credential.
SIGNED_PATHS = frozenset({"/slack/interactions"})


@dataclass(frozen=True)
class Arrival:
    """Where a request arrived: the console's own address and port for this connection, and scheme."""

    address: str
    port: int
    scheme: str = "http"

    @classmethod
    def of(cls, scope: Scope) -> Arrival | None:
        server = scope.get("server")  # None, or (address, port); no port: the scheme's default
        scheme = str(scope.get("scheme", "http")).replace("ws", "http")
        if not server:
            return None
        return cls(str(server[0]), int(server[1] or DEFAULT_PORTS.get(scheme, 80)), scheme)


@dataclass(frozen=True)
class Origin:
    scheme: str
    host: str  # lower case; an IP address in its canonical form, without brackets
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}" + ("" if DEFAULT_PORTS.get(self.scheme) == self.port else f":{self.port}")


def loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@lru_cache(maxsize=1024)  # parsing IP addresses was most of the guard's cost: 73 -> 9 µs a POST
def canonical(host: str) -> str:
    """A host name as compared here: lower case, an IP address in one spelling (IPv4-mapped IPv6 as IPv4)."""
    host = host.lower()
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host
    mapped = getattr(address, "ipv4_mapped", None)
    return str(mapped or address)


def parse_host(value: str) -> tuple[str, int | None] | None:
    """`name`, `name:port`, `[v6]` or `[v6]:port`; None for anything else (userinfo, paths, junk)."""
    if not value or any(c in value for c in "/\\@?# \t"):
        return None
    try:
        parts = urlsplit(f"//{value}")
        port = parts.port
    except ValueError:
        return None
    if not parts.hostname or (value.startswith("[") != (":" in parts.hostname)):
        return None
    return canonical(parts.hostname), port


def parse_origin(value: str) -> Origin | None:
    """The origin of an Origin header or a Referer URL; None for `null` and anything not http(s)."""
    try:
        parts = urlsplit(value.strip())
        scheme = parts.scheme.lower()
        host = parts.hostname
        port = parts.port or DEFAULT_PORTS.get(scheme)
    except ValueError:
        return None
    if scheme not in DEFAULT_PORTS or not host or port is None or parts.username or parts.password:
        return None
    return Origin(scheme, canonical(host), port)


@dataclass(frozen=True)
class Site:
    """The names the console answers to: where it listens (`bind`), and where people open it (`public`)."""

    bind: str = "127.0.0.1"
    public: tuple[Origin, ...] = ()

    @classmethod
    def configure(cls, bind: str, public_urls: list[str]) -> Site:
        """A site from the command line's values; a public URL that is not a bare origin is refused."""
        origins = []
        for url in public_urls:
            origin = parse_origin(url)
            if origin is None or urlsplit(url.strip()).path not in ("", "/") or "?" in url or "#" in url:
                raise ConfigError(
                    "a public URL of the console (--public-url, $STRATAGEM_CONSOLE_URL) must be like "
                    f"https://review.example.com, scheme, host and port only, not '{url}'"
                )
            origins.append(origin)
        return cls(bind=bind, public=tuple(dict.fromkeys(origins)))

    def direct_names(self, local: str) -> frozenset[str]:
        """Names that reach the console directly, at its port: the address the request arrived on
        (an IP address, which DNS cannot rebind), the name it was told to listen on, and the
        loopback names when it listens on loopback or on every address (loopback among them)."""
        return _direct_names(self.bind, local)

    def serves_host(self, value: str, here: Arrival | None) -> bool:
        parsed = parse_host(value)
        if parsed is None:
            return False
        host, port = parsed
        # A proxy may forward the public name without its port (nginx's $host): the name decides.
        if any(host == o.host and (port is None or port == o.port) for o in self.public):
            return True
        if here is None:
            return False
        return (port or DEFAULT_PORTS[here.scheme]) == here.port and host in self.direct_names(here.address)

    def own_origin(self, origin: Origin, here: Arrival | None) -> bool:
        if origin in self.public:
            return True
        return (
            here is not None
            and (origin.scheme, origin.port) == (here.scheme, here.port)
            and origin.host in self.direct_names(here.address)
        )


class Guard:
    """ASGI middleware holding the two rules above, in front of every route."""

    def __init__(self, app: ASGIApp, site: Site) -> None:
        self.app = app
        self.site = site

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        refusal = self.refusal(scope)
        if refusal is None:
            await self.app(scope, receive, send)
            return
        status, detail = refusal
        await JSONResponse({"detail": detail}, status_code=status)(scope, receive, send)

    def refusal(self, scope: Scope) -> tuple[int, str] | None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        here = Arrival.of(scope)
        host = headers.get("host", "")
        if not host:
            return 400, "a request to the console must name it in its Host header"
        if not self.site.serves_host(host, here):
            return 421, (
                f"this console does not answer to the name '{host[:100]}': open it at the address it listens "
                "on, or start it with --public-url naming the address people use"
            )
        if scope.get("method", "GET") in SAFE_METHODS or scope.get("path") in SIGNED_PATHS:
            return None
        claimed = headers.get("origin") or headers.get("referer")
        if claimed is None:
            if headers.get("authorization", "").lower().startswith("bearer "):
                return None  # a script: its token is checked by the route
            return 403, (
                "a change from a browser must come from the console's own pages (this request has no Origin "
                "or Referer); scripts send an API token (Authorization: Bearer)"
            )
        origin = parse_origin(claimed)
        if origin is None or not self.site.own_origin(origin, here):
            return 403, f"refused: this request comes from another site ({_shown(claimed)}), not the console's pages"
        return None


@lru_cache(maxsize=64)  # a machine has few addresses
def _direct_names(bind: str, local: str) -> frozenset[str]:
    names = {canonical(local)}
    if bind not in WILDCARDS:
        names.add(canonical(bind.strip("[]")))
    if bind in WILDCARDS or loopback(bind):
        names |= LOOPBACK_NAMES
    return frozenset(names)


def _shown(value: str) -> str:
    origin = parse_origin(value)
    return str(origin) if origin is not None else repr(value[:60])


__all__ = ["Arrival", "Guard", "Origin", "Site", "loopback", "parse_host", "parse_origin"]
