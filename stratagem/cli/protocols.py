"""`stratagem a2a` and `stratagem mcp`: Stratagem as a peer of other agents and assistants.

`a2a` serves the process library as an A2A agent (stratagem.protocols.a2a_server): every caller
needs a console API token, and decides as the token's person (signed with the console's issuer
key, as the console signs). `mcp` serves runs and decisions to an MCP client over stdio (the
default) or streamable HTTP (stratagem.protocols.mcp_server): it acts as the person running it,
and signs with that person's own key. Neither listens beyond loopback without tokens.
docs/protocols.md is the guide.
"""

from __future__ import annotations

import argparse
import getpass
from pathlib import Path

from stratagem.cli import render
from stratagem.cli.arguments import Commands
from stratagem.cli.console_cmd import users_path
from stratagem.cli.errors import CliError
from stratagem.cli.library import add_library_options, library
from stratagem.cli.session import open_client, settings
from stratagem.cli.start import add_run_options, run_options
from stratagem.common.errors import ConfigError
from stratagem.common.signing import Keyring, Signer
from stratagem.protocols.access import Tokens, refuse_open

A2A_PORT = 8410
MCP_PORT = 8411


def add_protocols(commands: Commands) -> None:
    a2a = commands.add(
        "a2a", cmd_a2a, "serve the process library to other agents over A2A (a console token each)", json=False
    )
    a2a.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    a2a.add_argument("--port", type=int, default=A2A_PORT, help=f"port (default: {A2A_PORT})")
    a2a.add_argument("--users", metavar="FILE", help="the console's users file, whose tokens are accepted")
    a2a.add_argument("--public-url", metavar="URL", help="the address the agent card names (default: http://HOST:PORT)")
    add_library_options(a2a)
    add_run_options(a2a)  # what the runs it starts run with: the operator's, never a caller's

    mcp = commands.add(
        "mcp", cmd_mcp, "serve runs and decisions to an MCP client, as you (stdio, or --http)", json=False
    )
    mcp.add_argument("--http", action="store_true", help="streamable HTTP instead of stdio")
    mcp.add_argument("--host", default="127.0.0.1", help="--http: address to listen on (default: 127.0.0.1)")
    mcp.add_argument("--port", type=int, default=MCP_PORT, help=f"--http: port (default: {MCP_PORT})")
    mcp.add_argument("--users", metavar="FILE", help="--http: require a console token of yours from this users file")
    mcp.add_argument("--by", metavar="NAME", help="who you are (default: the signing key's name, else your login)")
    add_library_options(mcp)
    add_run_options(mcp)


def _folders(args: argparse.Namespace) -> None:
    missing = [str(folder) for folder in args.processes or [] if not Path(folder).is_dir()]
    if missing:
        raise CliError(f"--processes: {', '.join(missing)} is not a folder")


async def cmd_a2a(args: argparse.Namespace) -> int:
    from stratagem.protocols.a2a_server import serve

    _folders(args)
    options = run_options(args, None, None)
    tokens = Tokens(users_path(args))
    try:
        refuse_open(args.host, authenticated=True, server="stratagem a2a")
        signer = Signer.from_env() or Keyring.of_home().issuer()
    except ConfigError as exc:
        raise CliError(str(exc)) from None
    temporal = settings()
    client = await open_client(temporal)
    render.note(f"A2A agent on http://{args.host}:{args.port}/ (tokens from {tokens.path}); Ctrl-C stops it")
    await serve(
        client,
        host=args.host,
        port=args.port,
        tokens=tokens,
        signer=signer,
        library=library(args),
        task_queue=temporal.task_queue,
        options=options,
        public_url=args.public_url or f"http://{args.host}:{args.port}",
    )
    return 0


def person_of(args: argparse.Namespace) -> tuple[str, Signer]:
    """Who the MCP server acts as, and the key that signs: STRATAGEM_SIGNING_KEY's, else the
    person's own key in the home (made on first use). Says nothing on stdout (stdio is the wire)."""
    signer = Signer.from_env()
    if signer is not None:
        return signer.name, signer
    by = args.by or getpass.getuser()
    try:
        return by, Keyring.of_home().signer(by)
    except ConfigError as exc:
        raise CliError(f"{exc}; choose another name with --by") from None


async def cmd_mcp(args: argparse.Namespace) -> int:
    from stratagem.protocols.mcp_server import serve_http, serve_stdio

    _folders(args)
    options = run_options(args, None, None)
    person, signer = person_of(args)
    tokens = Tokens(users_path(args)) if args.users else None
    if args.http:
        try:
            refuse_open(args.host, authenticated=tokens is not None, server="stratagem mcp --http")
        except ConfigError as exc:
            raise CliError(str(exc)) from None
    temporal = settings()
    client = await open_client(temporal, json_mode=True)  # stdout is the wire under stdio
    found = library(args)
    if args.http:
        render.note(f"MCP server on http://{args.host}:{args.port}/mcp as {person}; Ctrl-C stops it", json_mode=True)
        await serve_http(
            client,
            host=args.host,
            port=args.port,
            person=person,
            signer=signer,
            tokens=tokens,
            library=found,
            task_queue=temporal.task_queue,
            options=options,
        )
    else:
        await serve_stdio(
            client, person=person, signer=signer, library=found, task_queue=temporal.task_queue, options=options
        )
    return 0
