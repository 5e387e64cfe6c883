"""The in-doubt decision, as people see it (level 10): a step's attempt ended without telling
whether its effect happened (a lost worker, a timeout), its tool is irreversible and has no
reconcile check, so the step is not retried blindly: a person says whether the effect happened
(the step succeeds, with the output they give) or not (the step runs again).
"""

from __future__ import annotations

from stratagem.domain.run_types import PendingDecision


def waiting(pending: PendingDecision) -> str:
    """What the run waits for, in words (notifications, the console, the inbox)."""
    return f"word on whether step {pending.step_id}'s effect happened"


def question(pending: PendingDecision) -> str:
    """The question a person is asked at the terminal (before the choices)."""
    return pending.prompt
