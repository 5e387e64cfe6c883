"""The command line's own error: a mistake the user can fix, printed as one line with exit status 2."""

from __future__ import annotations

from ..errors import StratagemError


class CliError(StratagemError):
    """An error the user can fix; printed as one line, exit status 2."""
