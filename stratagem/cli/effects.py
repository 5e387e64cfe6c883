"""The commands that decide about a run's effects (level 10): `compensate`, a repair that gives up
on the goal and undoes what ran, and `resolve`, a person's word on whether an in-doubt step's
effect happened. Their rows join `DECIDING` (stratagem.cli.decisions) in the parser."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from stratagem.cli.decisions import Options, decide, json_option, reviewer
from stratagem.cli.errors import CliError
from stratagem.domain.decisions import kinds
from stratagem.domain.run_types import RepairAction, RepairInput, ResolveInput


def compensate_options(compensate: argparse.ArgumentParser) -> None:
    compensate.add_argument("run_id")
    compensate.add_argument("--reason", default="")
    compensate.add_argument("--by", metavar="NAME")


async def cmd_compensate(args: argparse.Namespace) -> int:
    decision = RepairInput(by=reviewer(args), action=RepairAction.compensate, reason=args.reason)
    return await decide(args, kinds.REPAIR, decision)


def resolve_options(resolve: argparse.ArgumentParser) -> None:
    resolve.add_argument("run_id")
    resolve.add_argument("step_id", help="the step whose outcome is in doubt")
    said = resolve.add_mutually_exclusive_group(required=True)
    said.add_argument("--happened", action="store_true", help="its effect happened: the step succeeds")
    said.add_argument("--not-happened", action="store_true", help="its effect did not happen: the step runs again")
    resolve.add_argument("--output", metavar="JSON", help="with --happened: the step's output, as JSON")
    resolve.add_argument("--reason", default="")
    resolve.add_argument("--by", metavar="NAME")


async def cmd_resolve(args: argparse.Namespace) -> int:
    if args.output is not None and not args.happened:
        raise CliError("--output goes with --happened: a step whose effect did not happen runs again")
    output = json_option(args.output, "--output") if args.output is not None else None
    decision = ResolveInput(
        by=reviewer(args), step_id=args.step_id, happened=bool(args.happened), output=output, reason=args.reason
    )
    return await decide(args, kinds.RESOLVE, decision)


EFFECTS: dict[str, tuple[Callable[[argparse.Namespace], Any], Options]] = {
    "compensate": (cmd_compensate, compensate_options),
    "resolve": (cmd_resolve, resolve_options),
}
