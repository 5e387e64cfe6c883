"""`stratagem standing grant|list|revoke`: approving a process once, for every later run of it
inside the bounds given (stratagem.domain.standing), and ending that."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from pathlib import Path

from temporalio.client import Client

from stratagem.cli import render
from stratagem.cli.arguments import Commands
from stratagem.cli.decisions import reviewer
from stratagem.cli.errors import CliError
from stratagem.cli.session import open_client, settings, workflow_host
from stratagem.common.config import Settings
from stratagem.common.errors import ConfigError, DecisionRefusedError, PlanFileError
from stratagem.domain.process import ProcessSpec
from stratagem.domain.standing import BOUND_SYNTAX, Grant, Registry, parse_bound
from stratagem.io.plan_files import load_process_file
from stratagem.io.process_library import ProcessLibrary, ProcessNotFound
from stratagem.schedules import delete_schedule
from stratagem.standing_approvals import grant_standing, list_standing, revoke_standing


def add_standing(commands: Commands) -> None:
    standing = commands.add(
        "standing", _usage, "approve a process once for its later runs (standing approvals)", json=False
    )
    sub = standing.add_subparsers(dest="standing_command", required=True, metavar="ACTION")

    grant = sub.add_parser("grant", help="approve a process's version for every later run inside the bounds")
    grant.set_defaults(handler=cmd_grant)
    grant.add_argument("process", metavar="PROCESS", help="a process of the library, or a process file")
    grant.add_argument("--version", help="the version approved (default: the library's latest)")
    grant.add_argument(
        "--bound", action="append", default=[], metavar="EXPR", help=f"a bound on an input: {BOUND_SYNTAX}"
    )
    grant.add_argument(
        "--step", action="append", default=[], metavar="ID", help="a gated step approved too (others ask per run)"
    )
    grant.add_argument("--schedule", metavar="ID", help="approve only the runs this schedule starts")
    grant.add_argument("--expires", metavar="DATE", help="when it ends: YYYY-MM-DD or an ISO time (UTC unless given)")
    grant.add_argument("--comment", default="", help="why, for the audit")
    grant.add_argument("--id", metavar="ID", help="the grant's id (default: PROCESS.<random>)")
    grant.add_argument("--by", help="who grants it (default: the signing key's name, or your login)")
    grant.add_argument("--json", action="store_true", help="machine-readable output (docs/cli.md)")

    listed = sub.add_parser("list", help="the standing approvals of this task queue, and their revocations")
    listed.set_defaults(handler=cmd_list)
    listed.add_argument("process", metavar="PROCESS", nargs="?", help="only this process's")
    listed.add_argument("--json", action="store_true", help="machine-readable output (docs/cli.md)")

    revoke = sub.add_parser("revoke", help="end a standing approval: later runs wait for a person")
    revoke.set_defaults(handler=cmd_revoke)
    revoke.add_argument("grant_id", metavar="ID")
    revoke.add_argument("--reason", required=True, help="why, for the audit")
    revoke.add_argument("--by", help="who revokes it (default: the signing key's name, or your login)")
    revoke.add_argument("--json", action="store_true", help="machine-readable output (docs/cli.md)")


def _usage(args: argparse.Namespace) -> int:  # argparse requires an action; never reached
    raise CliError("give an action: grant, list or revoke")


def find_process(name: str, version: str | None) -> ProcessSpec:
    """A process by its library name (and version), or a process file's path."""
    path = Path(name)
    try:
        if path.suffix.lower() in (".yaml", ".yml", ".json") and path.is_file():
            spec = load_process_file(path)
            if version is not None and spec.version != version:
                raise CliError(f"{path} is {spec.label}, not version {version}")
            return spec
        return ProcessLibrary.from_env().get(name, version)
    except (ProcessNotFound, PlanFileError) as exc:
        raise CliError(str(exc).strip("'\"")) from None


def _when(text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise CliError(f"--expires '{text[:40]}' is not a date (YYYY-MM-DD) or an ISO time") from None
    when = when if when.tzinfo is not None else when.replace(tzinfo=UTC)
    if when <= datetime.now(UTC):
        raise CliError(f"--expires {text[:40]} is in the past")
    return when


def _line(grant: Grant, registry: Registry) -> str:
    revoked = registry.revoked(grant.id)
    state = f"revoked by {revoked.by}: {revoked.reason}" if revoked else "active"
    if not revoked and grant.expires is not None and grant.expires <= datetime.now(UTC):
        state = "expired"
    signed = f", signed by {grant.signer}" if grant.signer else ", unsigned"
    return f"{grant.describe()}; granted {grant.granted_at.isoformat(timespec='minutes')}{signed}; {state}"


async def cmd_grant(args: argparse.Namespace) -> int:
    spec = find_process(args.process, args.version)
    expires = _when(args.expires)
    by = reviewer(args)
    config = settings()
    client = await open_client(config)
    async with workflow_host(client, config.task_queue):
        try:
            grant = await grant_standing(
                client,
                spec,
                by=by,
                bounds=args.bound,
                steps=args.step,
                schedule=args.schedule,
                expires=expires,
                comment=args.comment,
                grant_id=args.id,
                task_queue=config.task_queue,
            )
        except ValueError as exc:
            raise CliError(str(exc)) from None
    if args.json:
        render.emit_json(grant.model_dump(mode="json", exclude={"spec"}))
    else:
        render.console.print(f"granted {grant.describe()}", markup=False)
    return 0


async def cmd_list(args: argparse.Namespace) -> int:
    config = settings()
    client = await open_client(config)
    async with workflow_host(client, config.task_queue):
        registry = await list_standing(client, task_queue=config.task_queue)
    grants = [g for g in registry.grants if args.process in (None, g.process)]
    if args.json:
        revoked = {r.id: r.model_dump(mode="json") for r in registry.revocations}
        rows = [
            {**g.model_dump(mode="json", exclude={"spec"}), "revoked": revoked.get(g.id), "line": _line(g, registry)}
            for g in grants
        ]
        render.emit_json(rows)
        return 0
    if not grants:
        render.console.print("no standing approvals" + (f" of {args.process}" if args.process else ""))
    for grant in grants:
        render.console.print(_line(grant, registry), markup=False)
    return 0


async def cmd_revoke(args: argparse.Namespace) -> int:
    by = reviewer(args)
    config = settings()
    client = await open_client(config)
    async with workflow_host(client, config.task_queue):
        revocation = await revoke_standing(
            client, args.grant_id, by=by, reason=args.reason, task_queue=config.task_queue
        )
    if args.json:
        render.emit_json(revocation.model_dump(mode="json"))
    else:
        render.console.print(f"revoked {revocation.id}: later runs wait for a person", markup=False)
    return 0


# ------------------------------------------------------------------ with `schedule create --standing-approval`


def standing_of(args: argparse.Namespace, spec: ProcessSpec | None) -> bool:
    """Whether create grants a standing approval; its bounds and steps checked before anything is made."""
    if not args.standing_approval:
        if args.bound or args.approve_step:
            raise CliError("--bound and --approve-step go with --standing-approval")
        return False
    if spec is None:
        raise CliError("a standing approval is for a process (a plan file with inputs:, or a library process)")
    try:
        for text in args.bound:
            parse_bound(text, spec)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    steps = {step.id for step in spec.steps}
    if unknown := [s for s in args.approve_step if s not in steps]:
        raise CliError(f"{spec.label} has no step {', '.join(unknown)} (its steps: {', '.join(sorted(steps))})")
    return True


async def grant_for(
    client: Client, config: Settings, args: argparse.Namespace, spec: ProcessSpec | None, schedule_id: str, by: str
) -> Grant:
    """The standing approval of a schedule just created. Refused (an untrusted key, say), the
    schedule is deleted again: it was asked for as one thing, approved."""
    assert spec is not None
    try:
        async with workflow_host(client, config.task_queue):
            return await grant_standing(
                client,
                spec,
                by=by,
                bounds=args.bound,
                steps=args.approve_step,
                schedule=schedule_id,
                comment=f"with schedule {schedule_id}",
                task_queue=config.task_queue,
            )
    except (ValueError, DecisionRefusedError, ConfigError) as exc:
        await delete_schedule(client, schedule_id)
        raise CliError(f"{exc}; schedule {schedule_id} was not kept") from None
