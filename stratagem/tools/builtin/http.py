"""The `http_request` tool: one HTTP call to an allowed host, with the worker's credentials
filled into its headers and its response read within bounds.

Which hosts are allowed lives in allowlist.py, where a connection may go in guard.py.
"""

import json
import time
from typing import Any, Literal
from urllib.parse import quote

import httpx

from stratagem.common.errors import ToolError
from stratagem.models.base import without_secrets
from stratagem.tools.builtin.allowlist import check_allowed, http_allowlist
from stratagem.tools.builtin.credentials import fill_secrets
from stratagem.tools.builtin.guard import guarded_transport
from stratagem.tools.definition import ToolContext, tool

MAX_RESPONSE_TEXT_CHARS = 100_000
# Reading stops here so a huge response cannot exhaust the worker's memory.
MAX_RESPONSE_BYTES = 10 * 1024 * 1024

_ERROR_EXCERPT_CHARS = 300
_KEPT_RESPONSE_HEADERS = ("content-type",)
IDEMPOTENCY_HEADER = "Idempotency-Key"
# What of a key is sent as it is: ASCII that means nothing special in a header value (not '%').
_KEY_SAFE = "/:@!$&'()*+,;=-._~"


@tool
def http_request(
    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE"],
    url: str,
    headers: dict[str, str] = {},  # noqa: B006 - read only, never mutated
    json_body: Any = None,
    body: str | None = None,
    timeout_seconds: float = 30,
    *,
    ctx: ToolContext,
) -> dict[str, Any]:
    """Send an HTTP request to an allowed host and return the response.

    Only http and https URLs on hosts the operator allowed may be called. Pass `json_body` to send
    JSON, or `body` to send raw text (not both). Requests other than GET carry an
    `Idempotency-Key` header unique to this step, so a retried request can be recognised by the
    server; an `Idempotency-Key` in `headers` is replaced by it. Redirects are followed only to allowed hosts. A header value may name a credential the
    worker holds as `${secret:NAME}` (for example "Authorization": "Bearer ${secret:CRM_TOKEN}");
    plans never contain the credential itself, and the worker sends it only to the hosts it is
    bound to.

    Returns {"status": HTTP status code, "headers": {"content-type": ...}, "json": the parsed body
    when the response is JSON (else null), "text": the body as text (at most 100000 characters)}.
    Fails on 4xx and 5xx responses.
    """
    if json_body is not None and body is not None:
        raise ToolError("http_request: pass either 'json_body' or 'body', not both", retryable=False)
    if timeout_seconds <= 0:
        raise ToolError("http_request: 'timeout_seconds' must be greater than 0", retryable=False)
    try:
        target = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise ToolError(f"http_request: invalid URL '{url}': {exc}", retryable=False) from None
    allowlist = http_allowlist()
    check_allowed(target, allowlist)

    filled = fill_secrets(headers, target)
    request_headers = with_step_key(filled.headers, method, ctx.idempotency_key)

    def check_each_request(request: httpx.Request) -> None:
        # Runs for the first request and for every redirect, so a redirect can neither leave the
        # allowlist nor carry a secret to a host it is not bound to.
        check_allowed(request.url, allowlist)
        filled.check(request.url, request.headers)

    deadline = time.monotonic() + timeout_seconds
    transport = guarded_transport(allowlist, deadline)
    try:
        # trust_env=False: a proxy from the environment would connect on our behalf, past the
        # address checks the transport makes at connect time.
        with httpx.Client(
            timeout=timeout_seconds,
            follow_redirects=True,
            event_hooks={"request": [check_each_request]},
            transport=transport,
            trust_env=False,
        ) as client:
            with client.stream(
                method,
                target,
                headers=request_headers,
                json=json_body,
                content=body.encode() if body is not None else None,
            ) as response:
                raw = _read_capped(response)
    except httpx.TimeoutException:
        raise ToolError(f"http_request: {method} {url} timed out after {timeout_seconds:g}s", retryable=True) from None
    except httpx.TooManyRedirects:
        raise ToolError(f"http_request: {method} {url} redirected too many times", retryable=False) from None
    except (httpx.InvalidURL, httpx.UnsupportedProtocol) as exc:
        raise ToolError(f"http_request: {method} {url}: {exc}", retryable=False) from None
    except httpx.TransportError as exc:
        reason = str(exc) or type(exc).__name__
        raise ToolError(f"http_request: {method} {url} failed: {reason}", retryable=True) from None
    except httpx.DecodingError as exc:
        raise ToolError(f"http_request: {method} {url}: cannot decode the response: {exc}", retryable=False) from None

    text = raw.decode(response.encoding or "utf-8", errors="replace")
    # A server that echoes the request, in a body or an error page, must not put a credential
    # into the step's output or error: the secrets filled in, and any literal one (an executor
    # model writes its calls' headers itself; no plan validation stands between).
    if redactions := filled.redactions():
        text = without_secrets(text, redactions)
        raw = text.encode()
    status = response.status_code
    if status == 429 or status >= 500:
        raise ToolError(f"http_request: {method} {url} returned {status}: {_excerpt(text)}", retryable=True)
    if status >= 400:
        raise ToolError(f"http_request: {method} {url} returned {status}: {_excerpt(text)}", retryable=False)

    content_type = response.headers.get("content-type", "")
    return {
        "status": status,
        "headers": {name: response.headers[name] for name in _KEPT_RESPONSE_HEADERS if name in response.headers},
        "json": _parse_json(raw) if _is_json(content_type) else None,
        "text": text[:MAX_RESPONSE_TEXT_CHARS],
    }


def with_step_key(headers: dict[str, str], method: str, key: str) -> dict[str, str]:
    """The headers with the step's idempotency key as the only `Idempotency-Key` (none on a GET).

    The header is the worker's, whoever wrote the request: a key a plan or an executor model
    chose could be another run's (a server that replays the stored response of a known key would
    hand that run's answer to this one, or take this payment for one already made), the same in
    every revision (a deliberate new payment would be swallowed), or new at every attempt (a
    retry would pay twice). Only the step's key is the same for exactly the attempts that must
    have one effect."""
    kept = {name: value for name, value in headers.items() if name.strip().lower() != IDEMPOTENCY_HEADER.lower()}
    if method != "GET":
        # A header is ASCII, and a run id chosen with --id need not be: percent-encoded (as UTF-8,
        # and '%' itself too, so two keys never become one), an ASCII key is sent as it is.
        kept[IDEMPOTENCY_HEADER] = quote(key, safe=_KEY_SAFE)
    return kept


def _read_capped(response: httpx.Response) -> bytes:
    chunks, size = [], 0
    for chunk in response.iter_bytes():
        chunks.append(chunk)
        size += len(chunk)
        if size >= MAX_RESPONSE_BYTES:
            break
    return b"".join(chunks)[:MAX_RESPONSE_BYTES]


def _is_json(content_type: str) -> bool:
    media_type = content_type.split(";", 1)[0].strip().lower()
    return media_type == "application/json" or media_type.endswith("+json")


def _parse_json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:  # a body cut at MAX_RESPONSE_BYTES, or a server that mislabels its content
        return None


def _excerpt(text: str) -> str:
    flat = " ".join(text.split())
    if not flat:
        return "(empty body)"
    return flat if len(flat) <= _ERROR_EXCERPT_CHARS else flat[:_ERROR_EXCERPT_CHARS] + "..."
