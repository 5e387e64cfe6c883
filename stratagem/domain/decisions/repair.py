"""The repair decision, as people see it: a run whose failure no replan can answer waits for a
person to retry a failed step, skip it, ask a human step's question again, revise the plan or
stop.

Its rules live in `stratagem.domain.repairs`, which builds on the checks of this package (so the
package cannot import it back without a loop).
"""

from __future__ import annotations

from stratagem.domain.run_types import PendingDecision


def waiting(pending: PendingDecision) -> str:
    """What the run waits for, in words (notifications, the console, the inbox)."""
    return f"a repair of step {pending.step_id}" if pending.step_id else "a repair"


def question(pending: PendingDecision) -> str:
    """The question a person is asked at the terminal (before the choices)."""
    return pending.prompt
