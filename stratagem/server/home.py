"""STRATAGEM_HOME, the folder that holds the embedded server's database and the state files
(server.pid, worker.json) that name what runs from it."""

from __future__ import annotations

import os
from pathlib import Path

from stratagem.common.errors import ConfigError


def prepare_home(home: Path) -> Path:
    """Create STRATAGEM_HOME if it is missing. A home that cannot hold state (a file, a folder
    that cannot be created or written) is a ConfigError with one clear line, not a traceback."""
    advice = "set STRATAGEM_HOME to a folder you can write (it is created if missing)"
    if home.exists() and not home.is_dir():
        raise ConfigError(f"STRATAGEM_HOME {home} is a file, not a folder; {advice}")
    try:
        home.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create STRATAGEM_HOME {home}: {exc.strerror or exc}; {advice}") from None
    if not os.access(home, os.W_OK | os.X_OK):
        raise ConfigError(f"STRATAGEM_HOME {home} is not writable; {advice}")
    return home


def write_atomically(path: Path, text: str) -> None:
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(text)
    os.replace(partial, path)
