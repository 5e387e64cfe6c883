"""Who is asking, as FastAPI dependencies: a route names the one it needs and never checks by hand.

- `Person`: the signed-in person, for reading. Nobody signed in raises `NotSignedIn`, which
  `not_signed_in` answers: a 401 for the API and in every mode but `users`, else the login form.
- `CheckedForm`: a form post from a console page: the person and the form, whose CSRF token must
  be the person's (403 without it).
- `Decider`: a change over the REST API: a bearer token, or ambient credentials (a cookie, the
  proxy's header, the local user) with the `X-Stratagem-CSRF` header a page gives (403 without it).

Who the credentials name is stratagem.console.identity's job; whether a request is addressed to
this console and comes from its own pages is stratagem.console.guard's, before any route runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response

from stratagem.console.identity import SESSION_COOKIE, AuthMode
from stratagem.console.state import Console, ConsoleState

CSRF_FIELD = "csrf"
CSRF_HEADER = "X-Stratagem-CSRF"


class NotSignedIn(Exception):
    pass


# Every dependency here is async: FastAPI runs a plain function dependency in a thread.


async def person(request: Request, console: Console) -> str:
    """The authenticated person, or NotSignedIn. A bearer token wins over ambient credentials."""
    identity = console.identity
    auth = request.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        user = identity.token_user(auth[7:].strip())
        if user is None:
            raise NotSignedIn()
        return user
    if identity.mode is AuthMode.local:
        return identity.local_user
    if identity.mode is AuthMode.header:
        peer = request.client.host if request.client else None
        name = request.headers.get(identity.header, "").strip()
        if name and identity.from_proxy(peer):
            return name
        raise NotSignedIn()
    user = identity.session_user(request.cookies.get(SESSION_COOKIE))
    if user is None:
        raise NotSignedIn()
    return user


Person = Annotated[str, Depends(person)]


@dataclass(frozen=True)
class FormPost:
    who: str
    form: dict[str, Any]


async def checked_form(request: Request, who: Person, console: Console) -> FormPost:
    form = dict(await request.form())
    if not console.identity.csrf_ok(who, str(form.get(CSRF_FIELD) or "")):
        raise HTTPException(403, "the form's CSRF token is missing or wrong; reload the page and try again")
    return FormPost(who, form)


CheckedForm = Annotated[FormPost, Depends(checked_form)]


async def checked_api(request: Request, who: Person, console: Console) -> str:
    if ambient(request) and not console.identity.csrf_ok(who, request.headers.get(CSRF_HEADER)):
        raise HTTPException(403, f"use a bearer token, or send the {CSRF_HEADER} header a console page gives")
    return who


Decider = Annotated[str, Depends(checked_api)]


def ambient(request: Request) -> bool:
    """Whether the browser sent the credentials by itself (cookie, proxy header, the local user):
    such a request changes state only with the person's CSRF token."""
    return not request.headers.get("authorization", "").lower().startswith("bearer ")


async def not_signed_in(request: Request, _exc: Exception) -> Response:
    console: ConsoleState = request.app.state.console
    if request.url.path.startswith("/api/") or console.identity.mode is not AuthMode.users:
        return JSONResponse({"detail": "not signed in"}, status_code=401)
    return RedirectResponse(f"/login?next={request.url.path}", status_code=303)


__all__ = ["CSRF_HEADER", "CheckedForm", "Decider", "FormPost", "NotSignedIn", "Person", "not_signed_in"]
