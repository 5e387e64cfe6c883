"""What every command's options are built with: `Commands`, which each area's module adds its
commands to (`stratagem.cli.parser` puts them together), and the argument types they share."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any


class Commands:
    """The subcommands of `stratagem`. Each is added with its handler, so `main` dispatches on
    `args.handler` alone, and takes `--json` unless added with `json=False`."""

    def __init__(self, top: argparse.ArgumentParser) -> None:
        self._sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(self, name: str, handler: Callable[..., Any], help: str, *, json: bool = True) -> argparse.ArgumentParser:
        command = self._sub.add_parser(name, help=help, description=help)
        command.set_defaults(handler=handler)
        if json:
            command.add_argument("--json", action="store_true", help="machine-readable output (docs/cli.md)")
        return command


def positive(kind: type) -> Callable[[str], Any]:
    """An argument type for a count or a limit: a finite number above zero, or a one-line usage error."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}' is not a {'whole ' if kind is int else ''}number") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"'{text}' is not a finite number")
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{text} is not above zero")
        return value

    return parse
