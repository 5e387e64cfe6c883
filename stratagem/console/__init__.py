"""The review console: approvals, answers and repairs in a browser and over HTTP (`stratagem console`).

The names below load on first use: the console's app imports FastAPI (about 0.3 s), which a
command that only reads a guard or the users file (`stratagem mcp`, `status`, ...) never needs.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stratagem.console.app import create_app
    from stratagem.console.guard import Site
    from stratagem.console.identity import AuthMode, IdentityConfig, Users

_HOMES = {
    "create_app": "stratagem.console.app",
    "Site": "stratagem.console.guard",
    "AuthMode": "stratagem.console.identity",
    "IdentityConfig": "stratagem.console.identity",
    "Users": "stratagem.console.identity",
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'stratagem.console' has no attribute {name!r}")
    return getattr(import_module(_HOMES[name]), name)


__all__ = ["AuthMode", "IdentityConfig", "Site", "Users", "create_app"]
