"""The console's session cookies and CSRF tokens, signed with itsdangerous (issue #37 item 5): what
each is refused for, without a server. The attacks over HTTP are in tests/test_console_attacks.py."""

from __future__ import annotations

import time
from typing import Any

import pytest

from stratagem.console import AuthMode, IdentityConfig, Users
from stratagem.console.identity import SESSION_SECONDS

pytestmark = pytest.mark.unit


def console(secret: bytes = b"identity-test") -> IdentityConfig:
    users = Users()
    users.set_password("dana", "correct horse")
    users.set_password("erin", "battery staple")
    return IdentityConfig(mode=AuthMode.users, secret=secret, users=users)


def test_a_cookie_holds_for_its_twelve_hours_and_not_a_second_more():
    identity = console()
    issued = time.time()
    cookie = identity.session_cookie("dana", now=issued)
    assert identity.session_user(cookie, now=issued + SESSION_SECONDS - 1) == "dana"
    assert identity.session_user(cookie, now=issued + SESSION_SECONDS + 2) is None
    assert identity.session_user(cookie, now=issued - 60) is None  # minted in the future: not ours


def test_a_cookie_or_token_from_another_secret_or_purpose_is_refused():
    identity, other = console(), console(b"another-secret")
    assert other.session_user(identity.session_cookie("dana")) is None
    assert not other.csrf_ok("dana", identity.csrf_token("dana"))
    # A CSRF token is not a cookie, nor one person's token another's.
    assert identity.session_user(identity.csrf_token("dana")) is None
    assert not identity.csrf_ok("erin", identity.csrf_token("dana"))
    token = identity.csrf_token("dana")
    assert identity.csrf_ok("dana", token)
    for wrong in ("", None, token + "!", token[:-1], "é" + token[1:]):
        assert not identity.csrf_ok("dana", wrong), wrong


def test_an_altered_cookie_is_refused():
    identity = console()
    cookie = identity.session_cookie("dana")
    for altered in (cookie[:-1], cookie.replace(".", "", 1), "x" + cookie, cookie + "x", "junk", "a.b.c"):
        assert identity.session_user(altered) is None, altered


def test_a_logout_ends_the_cookie_and_the_csrf_token_it_was_issued_with():
    identity = console()
    cookie, token = identity.session_cookie("dana"), identity.csrf_token("dana")
    identity.end_sessions("dana")
    assert identity.session_user(cookie) is None and not identity.csrf_ok("dana", token)
    assert identity.session_user(identity.session_cookie("dana")) == "dana"


def test_every_route_but_the_login_form_asks_who_is_asking_and_every_change_checks_csrf():
    """Identity reaches routes as dependencies (stratagem.console.access): a route added without
    one would serve anybody, so this looks at each route's dependencies, not at its code."""
    from fastapi.routing import APIRoute

    from stratagem.console import decisions, inbox, runs, sessions, stream
    from stratagem.console.access import checked_api, checked_form, person

    def needs(dependant: Any) -> set[Any]:
        return {d.call for d in dependant.dependencies} | {c for d in dependant.dependencies for c in needs(d)}

    routes = [r for area in (inbox, runs, stream, decisions, sessions) for r in area.router.routes]
    assert all(isinstance(r, APIRoute) for r in routes) and len(routes) == 23  # with POST /api/runs/{id}/resolve
    for route in routes:
        calls = needs(route.dependant)
        if route.path == "/login":
            assert person not in calls, route.name
        elif "POST" in route.methods:
            assert person in calls and (checked_form in calls or checked_api in calls), route.name
        else:
            assert person in calls, route.name
