"""`stratagem console` and the commands that manage its people: `console-user` sets a password,
`console-token` makes an API token. The console itself is stratagem.console."""

from __future__ import annotations

import argparse
import getpass
import os
import secrets
import sys
from pathlib import Path

from ..config import stratagem_home
from ..errors import ConfigError
from ..signing import Signer
from . import render
from .errors import CliError
from .session import open_client, settings

SECRET_ENV = "STRATAGEM_CONSOLE_SECRET"
USERS_ENV = "STRATAGEM_CONSOLE_USERS"


def users_path(args: argparse.Namespace) -> Path:
    return Path(args.users or os.environ.get(USERS_ENV) or stratagem_home() / "console-users.yaml")


def console_secret() -> bytes:
    """What session cookies and CSRF tokens are signed with: $STRATAGEM_CONSOLE_SECRET, else a
    secret kept in the home (made once, readable by its owner only), so sessions survive a restart."""
    configured = os.environ.get(SECRET_ENV)
    if configured:
        return configured.encode()
    path = stratagem_home() / "console-secret"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_urlsafe(48))
        path.chmod(0o600)
    return path.read_text().strip().encode()


async def cmd_console(args: argparse.Namespace) -> int:
    import uvicorn

    from ..console import AuthMode, IdentityConfig, Users, create_app

    identity = IdentityConfig(
        mode=AuthMode(args.auth),
        secret=console_secret(),
        users=Users.load(users_path(args)),
        header=args.header,
        proxies=args.trusted_proxies or [],
    )
    try:
        identity.check(args.host)
    except ConfigError as exc:
        raise CliError(str(exc)) from None
    if identity.mode is AuthMode.users and not identity.users.passwords:
        raise CliError(
            f"--auth users: {users_path(args)} names nobody yet; add someone with: stratagem console-user NAME"
        )
    if _in_use(args.host, args.port):
        raise CliError(f"{args.host}:{args.port} is in use (the embedded server's Web UI?); choose another with --port")
    client = await open_client(settings())
    app = create_app(client, identity, signer=Signer.from_env())
    render.note(
        f"console on http://{args.host}:{args.port}/ (auth: {identity.mode.value}"
        + (f", as {identity.local_user}" if identity.mode is AuthMode.local else "")
        + "); Ctrl-C stops it",
        json_mode=False,
    )
    # proxy_headers off: the peer address is the connection's, never an X-Forwarded-For a client
    # sent; --auth header believes its header only from the --trusted-proxy addresses themselves.
    config = uvicorn.Config(
        app, host=args.host, port=args.port, log_level="warning", proxy_headers=False, server_header=False
    )
    server = uvicorn.Server(config)
    await server.serve()
    return 0


def _in_use(host: str, port: int) -> bool:
    import socket

    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        try:
            probe.bind((host, port))
        except OSError:
            return True
    return False


def cmd_console_user(args: argparse.Namespace) -> int:
    from ..console import Users

    path = users_path(args)
    users = Users.load(path)
    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\n")
    else:
        password = getpass.getpass(f"password for {args.name}: ")
        if password != getpass.getpass("again: "):
            raise CliError("the two passwords differ; nothing was changed")
    if len(password) < 8:
        raise CliError("a password needs at least 8 characters")
    users.set_password(args.name, password)
    users.save()
    render.note(f"{args.name} can sign in to the console ({path})")
    return 0


def cmd_console_token(args: argparse.Namespace) -> int:
    from ..console import Users

    path = users_path(args)
    users = Users.load(path)
    token = users.new_token(args.label, args.user)
    users.save()
    print(token)  # alone on standard output, so TOKEN=$(stratagem console-token ...) works
    print(
        f"an API token for {args.user} ('{args.label}'), shown once; send it as 'Authorization: Bearer TOKEN'",
        file=sys.stderr,
    )
    return 0
