"""Where Stratagem keeps its own state on this machine: STRATAGEM_HOME. Plain Python, so the
domain (signing keys, stratagem.common.signing) can find the home without importing Temporal's
connection configuration (stratagem.common.config)."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def stratagem_home() -> Path:
    """`STRATAGEM_HOME`, or the user's data directory (XDG on Linux, Application Support on macOS)."""
    configured = os.environ.get("STRATAGEM_HOME")
    if configured:
        return Path(configured).expanduser()
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support" / "stratagem"
    if sys.platform == "win32":
        return Path(os.environ.get("LOCALAPPDATA", Path.home() / "AppData" / "Local")) / "stratagem"
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share") / "stratagem"
