"""What a worker process serves, from the options of `stratagem worker` and `python worker.py`:
its tool modules, roles, queue layout, rate limits and process count, each checked with a
one-line error; and running several worker processes at once."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from stratagem.common.errors import ConfigError
from stratagem.domain.roles import ALL_ROLES, QueueLayout, Role, default_layout, role_queue
from stratagem.domain.secret_bindings import bindings_from_env
from stratagem.io.email_notify import EmailConfig


@dataclass(frozen=True)
class WorkerOptions:
    """What a worker process serves, from `stratagem worker`'s and `worker.py`'s options."""

    tools: tuple[str, ...] = ()
    roles: tuple[Role, ...] = ALL_ROLES
    layout: QueueLayout = QueueLayout.shared
    rate_limits: Mapping[Role, float] = field(default_factory=dict)
    max_concurrent: int | None = None
    processes: int = 1


def add_worker_arguments(parser: argparse.ArgumentParser) -> None:
    roles = ", ".join(r.value for r in ALL_ROLES)
    parser.add_argument(
        "--tools",
        action="append",
        default=[],
        metavar="MODULE",
        help="tool module (dotted name or .py file), or MCP server (mcp:stdio:COMMAND [ARGS], mcp:http:URL); repeatable",
    )
    parser.add_argument(
        "--role",
        action="append",
        dest="roles",
        choices=[r.value for r in ALL_ROLES],
        metavar="ROLE",
        help=f"serve only this role's task queue ({roles}); repeatable; default: $STRATAGEM_WORKER_ROLES or all",
    )
    parser.add_argument(
        "--rate-limit",
        action="append",
        dest="rate_limits",
        default=[],
        metavar="ROLE=N",
        help="at most N activities per second on ROLE's queue, across all its workers (enforced by Temporal); "
        "repeatable; default: $STRATAGEM_RATE_LIMITS, e.g. planner=1,executor=5",
    )
    parser.add_argument(
        "--split-queues",
        action="store_true",
        default=None,
        help="send each role's activities to its own queue even when this worker serves every role (default: "
        "$STRATAGEM_SPLIT_QUEUES; a worker serving only some roles always splits)",
    )
    parser.add_argument(
        "--max-concurrent", type=int, metavar="N", help="activities one worker of each role runs at once"
    )
    parser.add_argument(
        "--processes",
        type=int,
        default=1,
        metavar="N",
        help="run N worker processes (Python runs one thread at a time per process)",
    )


def roles_from(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> list[Role]:
    env = os.environ if env is None else env
    names = args.roles or [n.strip() for n in (env.get("STRATAGEM_WORKER_ROLES") or "").split(",") if n.strip()]
    if not names:
        return list(ALL_ROLES)
    known = {r.value: r for r in ALL_ROLES}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ConfigError(
            f"unknown worker role '{unknown[0]}' (STRATAGEM_WORKER_ROLES); the roles are {', '.join(known)}"
        )
    return [known[n] for n in dict.fromkeys(names)]


def rate_limits_from(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> dict[Role, float]:
    env = os.environ if env is None else env
    items = list(args.rate_limits) or [
        i.strip() for i in (env.get("STRATAGEM_RATE_LIMITS") or "").split(",") if i.strip()
    ]
    known = {r.value: r for r in ALL_ROLES if r is not Role.workflow}
    limits: dict[Role, float] = {}
    for item in items:
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or name not in known:
            raise ConfigError(f"rate limit '{item}' is not ROLE=N with ROLE one of {', '.join(known)}")
        try:
            number = float(value)
        except ValueError:
            number = -1.0
        if not number > 0 or number != number or number == float("inf"):
            raise ConfigError(f"rate limit '{item}': N must be a positive number of activities per second")
        limits[known[name]] = number
    return limits


def layout_from(args: argparse.Namespace, roles: Sequence[Role], env: Mapping[str, str] | None = None) -> QueueLayout:
    env = os.environ if env is None else env
    split = args.split_queues
    if split is None:
        raw = (env.get("STRATAGEM_SPLIT_QUEUES") or "").strip().lower()
        if raw not in ("", "0", "1", "true", "false", "yes", "no"):
            raise ConfigError(f"STRATAGEM_SPLIT_QUEUES={raw} is not a yes/no value (1 or 0)")
        split = raw in ("1", "true", "yes")
    return QueueLayout.split if split else default_layout(roles)


def check_worker_args(args: argparse.Namespace) -> WorkerOptions:
    """The worker asked for; ConfigError (one line) for anything wrong."""
    if args.max_concurrent is not None and args.max_concurrent < 1:
        raise ConfigError("--max-concurrent must be at least 1")
    if args.processes < 1:
        raise ConfigError("--processes must be at least 1")
    bindings_from_env()  # where the worker's secrets may go (STRATAGEM_SECRET_*_HOSTS), before connecting
    EmailConfig.from_env()  # its mail server and addresses: a typo stops it here, not at the first decision
    roles = roles_from(args)
    return WorkerOptions(
        tools=tuple(args.tools),
        roles=tuple(roles),
        layout=layout_from(args, roles),
        rate_limits=rate_limits_from(args),
        max_concurrent=args.max_concurrent,
        processes=args.processes,
    )


def run_processes(argv: Sequence[str], count: int) -> int:
    """Run `count` worker processes (`stratagem worker` with `argv`, minus --processes) and wait
    for them; SIGTERM and SIGINT reach every one. Each serves Prometheus metrics on its own port
    (OTEL_EXPORTER_PROMETHEUS_PORT, plus one per process). Returns the worst exit status."""
    children = []
    base_port = int(os.environ.get("OTEL_EXPORTER_PROMETHEUS_PORT") or 9464)
    for index in range(count):
        env = {**os.environ, "OTEL_EXPORTER_PROMETHEUS_PORT": str(base_port + index)}
        children.append(subprocess.Popen([sys.executable, "-m", "stratagem.cli", "worker", *argv], env=env))

    def forward(number: int, _frame: object) -> None:
        for child in children:
            if child.poll() is None:
                child.send_signal(number)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    codes = [child.wait() for child in children]
    return max(codes, key=abs)


def child_argv(options: WorkerOptions) -> list[str]:
    """The `stratagem worker` arguments of each of --processes' children: the same worker, one process."""
    argv = [a for t in options.tools for a in ("--tools", t)] + [a for r in options.roles for a in ("--role", r.value)]
    argv += [a for role, n in options.rate_limits.items() for a in ("--rate-limit", f"{role.value}={n:g}")]
    if options.layout is QueueLayout.split and default_layout(options.roles) is QueueLayout.shared:
        argv.append("--split-queues")
    if options.max_concurrent:
        argv += ["--max-concurrent", str(options.max_concurrent)]
    return argv


def describe_worker(options: WorkerOptions, task_queue: str) -> str:
    """One line saying what a worker serves and where its runs' activities go."""
    queues = ", ".join(role_queue(task_queue, r) for r in options.roles)
    where = (
        f"activities of the runs it drives stay on {task_queue}"
        if options.layout is QueueLayout.shared
        else "each role's activities go to its own queue"
    )
    return f"roles {', '.join(r.value for r in options.roles)} on {queues}; {where}"
