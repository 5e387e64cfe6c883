"""Exit statuses, and the command line's own error: a mistake the user can fix, printed as one
line with exit status 2."""

from __future__ import annotations

from stratagem.common.errors import StratagemError
from stratagem.domain.run_state import Phase

# Exit statuses: 0 the run succeeded (or the command did its job), 1 the run failed, was
# rejected, cancelled or compensated (it did not reach its goal; a compensated run undid what it
# could), 2 the user's input or environment is wrong, 3 the run's compensation failed: it left
# effects a person must look at, 130 interrupted.
FAILED, USAGE, EFFECTS_REMAIN = 1, 2, 3


def run_exit_status(phase: Phase) -> int:
    """How `run`, `wait` and `watch` exit for a run that ended in `phase`."""
    if phase is Phase.succeeded:
        return 0
    return EFFECTS_REMAIN if phase is Phase.compensation_failed else FAILED


class CliError(StratagemError):
    """An error the user can fix; printed as one line, exit status 2."""
