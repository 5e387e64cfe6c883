"""`stratagem` in a real pseudo-terminal, for the interactive review and questions."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time
from pathlib import Path


class Terminal:
    """`stratagem` in a real pseudo-terminal, so it believes a person sits at it."""

    def __init__(self, args: list[str], env: dict[str, str], cwd: Path):
        import fcntl
        import pty
        import termios

        def controlling_terminal() -> None:
            # A session of its own with the pty as its terminal, so Ctrl-C there is a real SIGINT.
            os.setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        self.master, slave = pty.openpty()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "stratagem.cli", *args],
            cwd=cwd,
            env=env,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            preexec_fn=controlling_terminal,
        )
        os.close(slave)
        self.screen = ""

    @property
    def text(self) -> str:
        return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", self.screen)

    async def expect(self, text: str, seconds: float = 60, *, times: int = 1) -> None:
        """Wait until `text` is on the screen (`times` times: a question asked again)."""
        deadline = time.monotonic() + seconds
        while self.text.count(text) < times:
            if time.monotonic() > deadline:
                raise AssertionError(f"never saw {text!r}; screen:\n{self.text}")
            try:
                chunk = await asyncio.wait_for(asyncio.to_thread(os.read, self.master, 4096), 5)
            except (TimeoutError, OSError):
                continue
            self.screen += chunk.decode(errors="replace")

    def type(self, text: str) -> None:
        os.write(self.master, text.encode())

    async def exit_status(self, seconds: float = 30) -> int:
        return await asyncio.to_thread(self.process.wait, seconds)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        os.close(self.master)


def terminal_run_id(text: str) -> str:
    """The id of the run a terminal's `stratagem run` started."""
    return re.search(r"run (\S+) started", text).group(1)
