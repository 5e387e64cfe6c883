"""What the HTTP model providers (openai, anthropic) share: configuration, clients and errors.

Both providers are thin translations between our `ModelRequest` and one vendor SDK. Everything
else is the same for both and lives here, once:

- the model string `<name>[@<base url>]`, the base URL's precedence (string, environment, SDK
  default) and the API key, read from the worker's environment when the model is loaded;
- the per-request timeout (`request.timeout_seconds`, else STRATAGEM_REQUEST_TIMEOUT);
- one SDK client per provider, base URL, key and event loop, since `load_model` runs for every
  activity and a fresh client would open fresh connections each time;
- turning SDK exceptions into our error types, so Temporal retries what another attempt can fix
  (429, 5xx, timeouts) and stops at what it cannot (refused credentials, refused requests). Every
  message is one line, names the provider and model, and never carries the API key.

The SDKs are imported on first use: `stratagem.models` is imported by workflow code and the CLI,
which never call a model.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import json
import math
import os
import re
import weakref
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from types import ModuleType
from typing import Any, TypeVar
from urllib.parse import urlsplit

from stratagem.common.errors import ModelConfigError
from stratagem.models.base import (
    ModelAuthError,
    ModelCallError,
    ModelRequest,
    ModelRequestError,
    ModelTimeout,
    redact,
    request_timeout_default,
)

# Local servers (vLLM, Ollama, LM Studio) ignore the key, but the SDKs insist on one.
PLACEHOLDER_KEY = "stratagem-no-key"
_MESSAGE_LIMIT = 500
# `<name>@<scheme>://...`: the last '@' that starts a URL. Model names may hold ':' and '@'.
_BASE_URL_SUFFIX = re.compile(r"^(?P<name>.*)@(?P<url>[A-Za-z][A-Za-z0-9+.\-]*://.*)$", re.DOTALL)


@dataclass(frozen=True)
class Provider:
    """What differs between the HTTP providers, apart from the wire format."""

    name: str
    sdk_name: str
    key_env: str
    url_env: str
    default_url: str

    @property
    def sdk(self) -> ModuleType:
        return importlib.import_module(self.sdk_name)


OPENAI = Provider("openai", "openai", "OPENAI_API_KEY", "OPENAI_BASE_URL", "https://api.openai.com/v1")
ANTHROPIC = Provider("anthropic", "anthropic", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "https://api.anthropic.com")


@dataclass(frozen=True)
class Endpoint:
    """One model behind one URL, with the key and default timeout the worker gave it."""

    provider: Provider
    model: str
    base_url: str
    api_key: str = field(repr=False)
    default_timeout: float
    # Set when the run named a base URL the operator did not configure: the worker's key stays home.
    key_withheld: bool = False

    @property
    def label(self) -> str:
        return f"{self.provider.name}:{self.model}"

    def timeout(self, request: ModelRequest) -> float:
        return request.timeout_seconds or self.default_timeout


def split_base_url(spec: str) -> tuple[str, str | None]:
    """`llama3.1:8b@http://127.0.0.1:11434/v1` -> (`llama3.1:8b`, `http://127.0.0.1:11434/v1`)."""
    match = _BASE_URL_SUFFIX.match(spec)
    if match is None:
        return spec, None
    return match["name"], match["url"]


def resolve_endpoint(provider: Provider, spec: str) -> Endpoint:
    """The endpoint for `<provider>:<spec>`, configured from the string and the worker's environment.

    The model string comes from a run, which anyone who can start one chooses. The worker's API key
    therefore goes only to a URL the worker's own configuration names: the provider's default, its
    `*_BASE_URL`, or one listed in STRATAGEM_MODEL_URLS. Any other URL is called without the key.
    """
    model, url = split_base_url(spec.strip())
    if not model:
        raise ModelConfigError(f"model '{provider.name}:{spec}' has no model name before the '@'")
    label = f"{provider.name}:{model}"
    if url is not None:
        _check_base_url(url, f"the base URL in '{label}@...'", provider)
    else:
        url = os.environ.get(provider.url_env, "").strip() or None
        if url is not None:
            _check_base_url(url, provider.url_env, provider)
    base_url = (url or provider.default_url).rstrip("/")
    key = os.environ.get(provider.key_env, "").strip()
    withheld = bool(key) and _normal_url(base_url) not in trusted_urls(provider)
    if withheld or not key:
        if url is None:
            raise ModelConfigError(f"{provider.key_env} is not set in the worker's environment (needed by {label})")
        key = PLACEHOLDER_KEY
    return Endpoint(provider, model, base_url, key, request_timeout_default(), key_withheld=withheld)


MODEL_URLS_ENV = "STRATAGEM_MODEL_URLS"


def trusted_urls(provider: Provider) -> frozenset[str]:
    """Base URLs the worker's configuration names for `provider`: the only ones that get its key."""
    urls = [provider.default_url, os.environ.get(provider.url_env, "")]
    urls += re.split(r"[,\s]+", os.environ.get(MODEL_URLS_ENV, ""))
    return frozenset(_normal_url(url) for url in urls if url.strip())


def _normal_url(url: str) -> str:
    """scheme://host:port/path, lower-case host, explicit port, no trailing slash: one spelling per URL."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port or (443 if parts.scheme.lower() == "https" else 80)
    except ValueError:
        return ""
    host = (parts.hostname or "").lower()
    return f"{parts.scheme.lower()}://{host}:{port}{parts.path.rstrip('/')}"


def _check_base_url(url: str, source: str, provider: Provider) -> None:
    try:
        parts = urlsplit(url)
    except ValueError:
        raise ModelConfigError(f"{source} is not a valid URL") from None
    if parts.username is not None or parts.password is not None:
        shown = f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}{parts.path}"
        raise ModelConfigError(
            f"{source} carries credentials ({shown} with user:password@); "
            f"put the key in {provider.key_env}, not in the URL"
        )
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ModelConfigError(f"{source} must be an http:// or https:// URL with a host, not '{url}'")


# --- clients ------------------------------------------------------------------------------------

# A model's answer is a few kilobytes; a body past this is a broken or hostile server.
MAX_RESPONSE_BYTES = 8 * 1024 * 1024


def http_client(provider: Provider) -> Any:
    """The HTTP client handed to the SDK's public constructor (`http_client=`): it reads at most
    MAX_RESPONSE_BYTES of a body, through its transport.

    The client must be of the httpx the SDK is built on. openai 3.57 and anthropic 2.14 are built
    on httpx2 (pydantic's fork, a package of its own that both require): their constructors take
    `http_client: httpx2.AsyncClient`, openai's README configures it with httpx2's transports, and
    anthropic refuses an `httpx` client outright. The SDK versions before them took httpx's. Which
    one is read from the SDK's `DefaultAsyncHttpxClient`, public (in its `__all__`) and documented
    as an alias of that AsyncClient, so nothing of the SDK's private modules is imported. The
    client is the plain AsyncClient rather than that default: the SDK's pool limits would differ.
    """
    return _capped_client_class(_sdk_httpx(provider))()


@functools.cache
def _sdk_httpx(provider: Provider) -> ModuleType:
    default = provider.sdk.DefaultAsyncHttpxClient
    for name in ("httpx2", "httpx"):
        try:
            module = importlib.import_module(name)
        except ImportError:  # an SDK on httpx needs no httpx2 installed, and the other way round
            continue
        if issubclass(default, module.AsyncClient):
            return module
    raise ModelConfigError(f"the {provider.sdk_name} SDK's HTTP client is neither httpx2's nor httpx's")


@functools.cache
def _capped_client_class(module: ModuleType) -> Callable[[], Any]:
    class CappedStream(module.AsyncByteStream):  # type: ignore[name-defined]
        def __init__(self, stream: Any, limit: int) -> None:
            self.stream = stream
            self.limit = limit

        async def __aiter__(self) -> Any:
            size = 0
            async for chunk in self.stream:
                size += len(chunk)
                if size > self.limit:
                    raise module.ReadError(
                        f"the response is larger than {self.limit // (1024 * 1024)} MB; reading stopped"
                    )
                yield chunk

        async def aclose(self) -> None:
            await self.stream.aclose()

    class CappedTransport(module.AsyncHTTPTransport):  # type: ignore[name-defined]
        async def handle_async_request(self, request: Any) -> Any:
            response = await super().handle_async_request(request)
            response.stream = CappedStream(response.stream, MAX_RESPONSE_BYTES)
            return response

    return lambda: module.AsyncClient(transport=CappedTransport(), follow_redirects=False)


Client = TypeVar("Client")
# Per event loop: an SDK client's connections belong to the loop that opened them.
_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[str, str, str], Any]] = (
    weakref.WeakKeyDictionary()
)


def client_for(endpoint: Endpoint, make: Callable[[Endpoint], Client]) -> Client:
    """The running loop's client for this provider, base URL and key, made on first use."""
    clients = _clients.setdefault(asyncio.get_running_loop(), {})
    key = (endpoint.provider.name, endpoint.base_url, endpoint.api_key)
    if key not in clients:
        clients[key] = make(endpoint)
    return clients[key]


# --- calls and their failures -------------------------------------------------------------------


async def send(
    endpoint: Endpoint, request: ModelRequest, create: Callable[..., Awaitable[Any]], arguments: dict[str, Any]
) -> Any:
    """`create(**arguments)` within the request's timeout; its failures raised as our error types."""
    timeout = endpoint.timeout(request)
    with _translated_errors(endpoint, timeout):
        # The SDKs' timeout bounds each read; a server that keeps sending would hold the call
        # (and grow the worker's memory) for as long as it likes. This bounds the whole call.
        try:
            # A little later than the SDK's own timeout, which names a silent server better.
            result = await asyncio.wait_for(create(**arguments, timeout=timeout), timeout + min(1.0, timeout / 10))
        except TimeoutError:
            text = f"{endpoint.provider.name} did not finish answering for model {endpoint.model} within {timeout:g} s"
            raise _error(ModelTimeout, endpoint, text) from None
    if isinstance(result, str):  # how the SDKs hand back a body that is not JSON
        raise _unreadable(endpoint, f"the body is not JSON: {_clip(endpoint, result, 200)}")
    return result


async def stream(
    endpoint: Endpoint,
    request: ModelRequest,
    create: Callable[..., Awaitable[Any]],
    arguments: dict[str, Any],
    read: Callable[[Any], None],
) -> bool:
    """A streamed `create(**arguments)`: each event goes to `read` until the stream ends or the
    request's time limit passes, whichever is first. True when it was cut at the limit: what was
    read is then the answer so far, not lost with the call. Failures as `send` raises them."""
    timeout = endpoint.timeout(request)
    ends = asyncio.get_running_loop().time() + timeout
    events = await send(endpoint, request, create, {**arguments, "stream": True})
    cut = False
    try:
        with _translated_errors(endpoint, timeout), reading(endpoint):
            try:
                async with asyncio.timeout_at(ends):
                    async for event in events:
                        read(event)
            except TimeoutError:
                cut = True
    finally:
        await events.close()  # a cut stream's connection is closed, so the server stops generating
    return cut


@contextmanager
def _translated_errors(endpoint: Endpoint, timeout: float) -> Iterator[None]:
    sdk = endpoint.provider.sdk
    try:
        yield
    except sdk.APIStatusError as exc:
        raise _status_error(endpoint, exc) from None
    except sdk.APITimeoutError:
        text = f"{endpoint.provider.name} did not answer for model {endpoint.model}: timed out after {timeout:g} s"
        raise _error(ModelTimeout, endpoint, text) from None
    except sdk.APIConnectionError as exc:
        cause = f": {_clip(endpoint, str(exc.__cause__))}" if exc.__cause__ and str(exc.__cause__) else ""
        text = f"cannot reach {endpoint.base_url} ({endpoint.provider.name}, model {endpoint.model}){cause}"
        raise _error(ModelCallError, endpoint, text) from None
    except (sdk.APIResponseValidationError, json.JSONDecodeError) as exc:
        raise _unreadable(endpoint, f"{type(exc).__name__}: {_clip(endpoint, str(exc))}") from None


@contextmanager
def reading(endpoint: Endpoint) -> Iterator[None]:
    """Around reading an SDK response: a body of the wrong shape is a garbled answer, worth retrying."""
    try:
        yield
    except (AttributeError, TypeError, KeyError, IndexError, ValueError) as exc:
        raise _unreadable(endpoint, f"{type(exc).__name__}: {_clip(endpoint, str(exc))}") from None


def _unreadable(endpoint: Endpoint, detail: str) -> Exception:
    provider, model = endpoint.provider.name, endpoint.model
    text = f"{provider} sent a response that could not be read for model {model}: {detail}"
    return _error(ModelCallError, endpoint, text)


def _status_error(endpoint: Endpoint, exc: Any) -> Exception:
    status: int = exc.status_code
    message = _server_message(endpoint, exc)
    provider, model = endpoint.provider.name, endpoint.model
    if status in (401, 403) and endpoint.key_withheld:
        return _error(
            ModelAuthError,
            endpoint,
            f"{provider} refused model {model} at {endpoint.base_url} (HTTP {status}): {message}; "
            f"the worker sends {endpoint.provider.key_env} only to its own configured URLs "
            f"({endpoint.provider.url_env}, {MODEL_URLS_ENV} or the default), so this call carried no key",
        )
    if status in (401, 403):
        return _error(
            ModelAuthError,
            endpoint,
            f"{provider} refused the credentials for model {model} (HTTP {status}): {message}; "
            f"check {endpoint.provider.key_env} in the worker's environment",
        )
    if status in (408, 409, 429) or status >= 500:
        wait = retry_after(exc.response.headers)
        verb = "rate-limited" if status == 429 else "failed to answer"
        suffix = f"; retry after {wait:g} s" if wait is not None else ""
        text = f"{provider} {verb} model {model} (HTTP {status}): {message}{suffix}"
        return _error(ModelCallError, endpoint, text, retry_after=wait, status=status)
    return _error(
        ModelRequestError,
        endpoint,
        f"{provider} refused the request for model {model} (HTTP {status}): {message}",
        status=status,
    )


def _error(kind: type[Exception], endpoint: Endpoint, text: str, **details: Any) -> Exception:
    return kind(redact(" ".join(text.split()), [endpoint.api_key]), **details)


def _server_message(endpoint: Endpoint, exc: Any) -> str:
    """The server's own words: `error.message` in either vendor's body, else the body itself."""
    body = exc.body
    if isinstance(body, dict) and isinstance(body.get("error"), (dict, str)):
        body = body["error"]
    if isinstance(body, dict) and body.get("message"):
        body = body["message"]
    if not isinstance(body, str):
        body = json.dumps(body) if body is not None else exc.response.reason_phrase
    return _clip(endpoint, body) or "(no message)"


def _clip(endpoint: Endpoint, text: str, limit: int = _MESSAGE_LIMIT) -> str:
    """`text` on one line, cut to `limit` characters, as servers may send whole HTML pages.

    The key goes before the cut, which could otherwise leave a piece of it that no longer matches.
    """
    text = redact(" ".join(text.split()), [endpoint.api_key])
    return text if len(text) <= limit else text[: limit - 1] + "…"


def retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds to wait, from `retry-after-ms` or `retry-after` (seconds or an HTTP date)."""
    millis = _seconds(headers.get("retry-after-ms"))
    if millis is not None:
        return millis / 1000
    value = headers.get("retry-after")
    seconds = _seconds(value)
    if seconds is not None or not value:
        return seconds
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def _seconds(value: str | None) -> float | None:
    try:
        seconds = float(value) if value else math.nan
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None
