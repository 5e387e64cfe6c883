"""Exit statuses, and the command line's own error: a mistake the user can fix, printed as one
line with exit status 2."""

from __future__ import annotations

from stratagem.common.errors import StratagemError

# Exit statuses: 0 the run succeeded (or the command did its job), 1 the run failed, was
# rejected or cancelled, 2 the user's input or environment is wrong, 130 interrupted.
FAILED, USAGE = 1, 2


class CliError(StratagemError):
    """An error the user can fix; printed as one line, exit status 2."""
