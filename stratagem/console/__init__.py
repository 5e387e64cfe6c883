"""The review console: approvals, answers and repairs in a browser and over HTTP (`stratagem console`)."""

from .app import create_app
from .guard import Site
from .identity import AuthMode, IdentityConfig, Users

__all__ = ["AuthMode", "IdentityConfig", "Site", "Users", "create_app"]
