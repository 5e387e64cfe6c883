"""Signing in and out (`--auth users`), and `/api/whoami`: who the console takes a request for."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from stratagem.common.errors import StratagemError
from stratagem.console.access import CheckedForm, Person
from stratagem.console.identity import SESSION_COOKIE, AuthMode
from stratagem.console.state import Console
from stratagem.console.views import safe_next

router = APIRouter()


@router.get("/login", response_class=HTMLResponse, include_in_schema=False)
async def login_page(request: Request, console: Console, next: str = "/", error: str = "") -> Response:
    return console.templates.TemplateResponse(request, "login.html", {"next": safe_next(next), "error": error})


@router.post("/login", include_in_schema=False)
async def login(request: Request, console: Console) -> Response:
    identity = console.identity
    form = await request.form()
    user = identity.users.login(str(form.get("name", "")), str(form.get("password", "")))
    target = safe_next(str(form.get("next", "/")))
    if user is None or identity.mode is not AuthMode.users:
        return RedirectResponse(f"/login?error=wrong+name+or+password&next={target}", status_code=303)
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(
        SESSION_COOKIE,
        identity.session_cookie(user),
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response


@router.post("/logout", include_in_schema=False)
async def logout(post: CheckedForm, console: Console) -> Response:
    try:
        console.identity.end_sessions(post.who)  # every session of theirs, not only this browser's cookie
    except StratagemError as exc:
        raise HTTPException(503, str(exc)) from None
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(SESSION_COOKIE)
    return response


@router.get("/api/whoami", tags=["runs"])
async def whoami(who: Person, console: Console) -> dict[str, str]:
    """Who the console takes you for, and the CSRF token your ambient credentials need."""
    return {"user": who, "csrf": console.identity.csrf_token(who)}


__all__ = ["router"]
