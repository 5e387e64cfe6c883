"""`stratagem console` and the commands that manage its people: `console-user` sets a password
(or, with --remove, removes a person and their tokens), `console-token` makes an API token. The
console itself is stratagem.console; a running console sees these changes at once."""

from __future__ import annotations

import argparse
import getpass
import os
import secrets
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from stratagem.cli import render
from stratagem.cli.arguments import Commands
from stratagem.cli.errors import CliError
from stratagem.cli.session import open_client, settings
from stratagem.common.config import stratagem_home
from stratagem.common.errors import ConfigError
from stratagem.common.signing import Keyring, Signer
from stratagem.io.notify import CONSOLE_URL_ENV

if TYPE_CHECKING:
    from stratagem.console import Users

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


def add_console_commands(commands: Commands) -> None:
    """`console`, and `console-user` and `console-token`, which manage the people it lets in."""
    console = commands.add(
        "console",
        cmd_console,
        "serve the review console: the inbox and every decision, in a browser and over HTTP",
        json=False,
    )
    console.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    console.add_argument("--port", type=int, default=8400, help="port (default: 8400)")
    console.add_argument(
        "--auth",
        choices=["local", "users", "header"],
        default="local",
        help="who decides: local (your OS user; loopback only), users (passwords in --users), or header (set by "
        "a reverse proxy at --trusted-proxy)",
    )
    console.add_argument("--users", metavar="FILE", help="the users file (default: $STRATAGEM_HOME/console-users.yaml)")
    console.add_argument("--header", default="X-Forwarded-User", help="--auth header: the header naming the person")
    console.add_argument(
        "--trusted-proxy",
        action="append",
        dest="trusted_proxies",
        metavar="ADDRESS",
        help="--auth header: a proxy address or network; repeatable",
    )
    console.add_argument(
        "--public-url",
        action="append",
        dest="public_urls",
        metavar="URL",
        help="an address people open the console at, e.g. https://review.example.com behind a proxy; the "
        "console answers to no other name but its own address (default: $STRATAGEM_CONSOLE_URL); repeatable",
    )
    console.add_argument(
        "--processes",
        action="append",
        dest="process_folders",
        metavar="FOLDER",
        help="a folder of process files for the Processes page, read before $STRATAGEM_PROCESSES and "
        "$STRATAGEM_HOME/processes; repeatable",
    )

    console_user = commands.add(
        "console-user",
        cmd_console_user,
        "set a console password for NAME (ending their sessions), map NAME to a Slack user, or remove NAME",
        json=False,
    )
    console_user.add_argument("name")
    console_user.add_argument("--users", metavar="FILE")
    slack = console_user.add_mutually_exclusive_group()
    slack.add_argument(
        "--slack",
        metavar="UXXXX",
        help="NAME's Slack user id (a profile's member ID): their clicks on Slack buttons decide as NAME; "
        "no password is asked unless --password-stdin",
    )
    slack.add_argument("--no-slack", action="store_true", help="unmap NAME from their Slack user")
    how = console_user.add_mutually_exclusive_group()
    how.add_argument("--password-stdin", action="store_true", help="read the password from standard input")
    how.add_argument(
        "--remove", action="store_true", help="remove NAME and their API tokens; their sessions end at once"
    )

    console_token = commands.add(
        "console-token",
        cmd_console_token,
        "make an API token acting for a person (printed once)",
        json=False,
    )
    console_token.add_argument("label", help="what the token is for, e.g. slack-bot")
    console_token.add_argument("--user", required=True, help="the person its decisions are recorded as")
    console_token.add_argument("--users", metavar="FILE")


async def cmd_console(args: argparse.Namespace) -> int:
    import uvicorn

    from stratagem.console import AuthMode, IdentityConfig, Site, Users, create_app
    from stratagem.console.slack_app import SlackApp

    identity = IdentityConfig(
        mode=AuthMode(args.auth),
        secret=console_secret(),
        users=Users.load(users_path(args)),
        header=args.header,
        proxies=args.trusted_proxies or [],
    )
    # Notifications link to $STRATAGEM_CONSOLE_URL: the console answers there too.
    public_urls = [*(args.public_urls or []), *filter(None, [os.environ.get(CONSOLE_URL_ENV, "").strip()])]
    try:
        identity.check(args.host)
        site = Site.configure(args.host, public_urls)
    except ConfigError as exc:
        raise CliError(str(exc)) from None
    if identity.mode is AuthMode.header and not site.public:
        raise CliError(
            "--auth header needs --public-url URL (the address people open through the proxy): "
            "the console answers only to the names it serves"
        )
    if identity.mode is AuthMode.users and not any(identity.users.passwords.values()):
        raise CliError(
            f"--auth users: {users_path(args)} names nobody yet; add someone with: stratagem console-user NAME"
        )
    folders = [Path(folder) for folder in args.process_folders or []]
    missing = [str(folder) for folder in folders if not folder.is_dir()]
    if missing:
        raise CliError(f"--processes: {', '.join(missing)} is not a folder")
    if _in_use(args.host, args.port):
        raise CliError(f"{args.host}:{args.port} is in use (the embedded server's Web UI?); choose another with --port")
    temporal = settings()
    client = await open_client(temporal)
    # It signs what people decide with an issuer key of its own (SECURITY.md, "Issuers"): the one
    # in STRATAGEM_SIGNING_KEY, else its home's, made on first use, which this home's workers trust.
    try:
        signer = Signer.from_env() or Keyring.of_home().issuer()
    except ConfigError as exc:
        raise CliError(str(exc)) from None
    slack_app = SlackApp.from_env()
    app = create_app(
        client,
        identity,
        signer=signer,
        site=site,
        slack_app=slack_app,
        task_queue=temporal.task_queue,
        process_folders=folders,
    )
    if slack_app is not None:
        where = f"{site.public[0]}/slack/interactions" if site.public else "/slack/interactions (give --public-url)"
        bot = "" if slack_app.bot_token else "; no STRATAGEM_SLACK_BOT_TOKEN: Reject rejects without asking why"
        render.note(f"taking Slack's clicks at {where}{bot}", json_mode=False)
    render.note(
        f"signing decisions as issuer '{signer.name}'; workers not started from {stratagem_home()} must list "
        f"it in STRATAGEM_ISSUER_KEYS:\n  {signer.public_line()}",
        json_mode=False,
    )
    render.note(
        f"console on http://{args.host}:{args.port}/ (auth: {identity.mode.value}"
        + (f", as {identity.local_user}" if identity.mode is AuthMode.local else "")
        + "".join(f", at {origin}" for origin in site.public)
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
    from stratagem.console import Users

    path = users_path(args)
    if args.remove and (args.slack or args.no_slack):
        raise CliError("--remove removes NAME with their Slack mapping; give it without --slack or --no-slack")
    if (args.slack or args.no_slack) and not args.password_stdin:
        return _map_slack(path, args.name, args.slack)
    if args.remove:
        with Users.editing(path) as users:
            tokens = users.remove(args.name)
            if tokens is None:
                raise CliError(f"{args.name} is not in {path}; nothing was changed")
        render.note(
            f"{args.name} removed from {path}, with {tokens} API token{'' if tokens == 1 else 's'}: "
            "their sessions and tokens stop working now, in a running console too"
        )
        return 0
    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\n")
    else:
        password = getpass.getpass(f"password for {args.name}: ")
        if password != getpass.getpass("again: "):
            raise CliError("the two passwords differ; nothing was changed")
    if len(password) < 8:
        raise CliError("a password needs at least 8 characters")
    with Users.editing(path) as users:
        known = bool(users.passwords.get(args.name))
        if args.slack or args.no_slack:
            _set_slack(users, args.name, args.slack)
        users.set_password(args.name, password)
    ended = "; every session they had has ended" if known else ""
    render.note(f"{args.name} can sign in to the console ({path}){ended}")
    if args.slack or args.no_slack:
        _say_slack(args.name, args.slack)
    return 0


def _map_slack(path: Path, name: str, slack_id: str | None) -> int:
    from stratagem.console import Users

    with Users.editing(path) as users:
        if slack_id is None and name not in users.slack:
            raise CliError(f"{name} has no Slack user in {path}; nothing was changed")
        _set_slack(users, name, slack_id)
    _say_slack(name, slack_id)
    return 0


def _set_slack(users: Users, name: str, slack_id: str | None) -> None:
    try:
        users.set_slack(name, slack_id)
    except ConfigError as exc:
        raise CliError(f"{exc}; nothing was changed") from None


def _say_slack(name: str, slack_id: str | None) -> None:
    if slack_id is None:
        render.note(f"{name} no longer decides from Slack")
    else:
        render.note(f"Slack user {slack_id} decides as {name} (Approve / Reject in Slack messages)")


def cmd_console_token(args: argparse.Namespace) -> int:
    from stratagem.console import Users

    path = users_path(args)
    with Users.editing(path) as users:
        token = users.new_token(args.label, args.user)
    print(token)  # alone on standard output, so TOKEN=$(stratagem console-token ...) works
    print(
        f"an API token for {args.user} ('{args.label}'), shown once; send it as 'Authorization: Bearer TOKEN'",
        file=sys.stderr,
    )
    return 0
