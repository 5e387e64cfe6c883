"""The `stratagem` command line run as a real process, as a person or a script would run it."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import yaml

from support import FIXTURE_TOOLS

ROOT = Path(__file__).resolve().parents[2]
"""The repository: where a CLI process runs unless the environment names a CLI_CWD."""

TOOLS = ("--tools", FIXTURE_TOOLS)


def cli(
    *args: str, env: dict[str, str], timeout: float = 90, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "stratagem.cli", *args],
        cwd=env.get("CLI_CWD", ROOT),
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        input=stdin,
    )


async def acli(*args: str, env: dict[str, str], timeout: float = 90) -> subprocess.CompletedProcess[str]:
    """Run the CLI without blocking the event loop that hosts the test's worker."""
    return await asyncio.to_thread(cli, *args, env=env, timeout=timeout)


def one_line_error(done: subprocess.CompletedProcess[str], expected: str) -> None:
    assert done.returncode == 2, done
    assert "Traceback" not in done.stderr
    assert expected in done.stderr
    assert done.stderr.startswith("error: ")


def write_plan(path: Path, plan: dict) -> str:
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    return str(path)
