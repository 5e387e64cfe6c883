"""The review console: approvals, answers and repairs in a browser and over HTTP (`stratagem console`)."""

from stratagem.console.app import create_app
from stratagem.console.guard import Site
from stratagem.console.identity import AuthMode, IdentityConfig, Users

__all__ = ["AuthMode", "IdentityConfig", "Site", "Users", "create_app"]
