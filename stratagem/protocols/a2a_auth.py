"""Who calls `stratagem a2a`: a console API token on every route but the agent card.

The token is checked against the console's users file on every request (access.Tokens reads it
again), so a removed token or person stops working at once. Missing, forged or removed: HTTP 401
before any A2A method runs. The person the token was made for is the call's user
(ServerCallContext.user), who starts runs and decides in them.
"""

from __future__ import annotations

import asyncio

from a2a.server.context import ServerCallContext
from a2a.types import InvalidRequestError
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH
from starlette.authentication import AuthCredentials, AuthenticationBackend, AuthenticationError, SimpleUser
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.requests import HTTPConnection
from starlette.responses import JSONResponse, Response

from stratagem.protocols.access import Tokens


class ConsoleTokens(AuthenticationBackend):
    """`Authorization: Bearer <console token>` on every route but the agent card."""

    def __init__(self, tokens: Tokens):
        self.tokens = tokens

    async def authenticate(self, conn: HTTPConnection) -> tuple[AuthCredentials, SimpleUser] | None:
        if conn.url.path == AGENT_CARD_WELL_KNOWN_PATH:
            return None
        scheme, _, token = conn.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise AuthenticationError("a console token is needed: Authorization: Bearer <token>")
        person = await asyncio.to_thread(self.tokens.person, token.strip())
        if person is None:
            raise AuthenticationError("the token is not valid (unknown, or removed)")
        return AuthCredentials(["authenticated"]), SimpleUser(person)


def refused(conn: HTTPConnection, exc: AuthenticationError) -> Response:
    return JSONResponse({"error": str(exc)}, status_code=401, headers={"WWW-Authenticate": 'Bearer realm="stratagem"'})


def token_middleware(tokens: Tokens) -> Middleware:
    return Middleware(AuthenticationMiddleware, backend=ConsoleTokens(tokens), on_error=refused)


def person_of(context: ServerCallContext) -> str:
    """The person the call's token acts for."""
    if not context.user.is_authenticated or not context.user.user_name:
        raise InvalidRequestError(message="a console token is needed")  # the middleware lets none through
    return context.user.user_name
