"""Run control: whether the run is stopping, rejected or winding down, which every waiting step
checks. Workflow code: deterministic, no I/O.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from stratagem.domain import decisions
    from stratagem.domain.run_types import ApproveInput, RejectInput, RunState


class RunControl:
    """Stopping: a step failed or was rejected; waiting steps give up, running ones finish.
    Winding down: a continue-as-new is due; nothing new starts, running steps finish, and steps
    parked on a person (an answer, a step approval) stay parked, as the state carries them.
    A rejection stops the run, which ends rejected once running steps finish."""

    def __init__(self, state: RunState) -> None:
        self._state = state
        self._stopping = False
        self._winding_down = False
        self._rejection: str | None = None
        self._halt: str | None = None
        self._give_up: str | None = None
        # Steps that ended (or stopped waiting on a person) in this execution: a continue-as-new
        # is started only after one, so every execution makes progress.
        self._returned = 0

    @property
    def stopping(self) -> bool:
        return self._stopping

    @property
    def winding_down(self) -> bool:
        return self._winding_down

    @property
    def rejection(self) -> str | None:
        return self._rejection

    @property
    def halt_reason(self) -> str | None:
        return self._halt

    @property
    def gave_up(self) -> str | None:
        """Why the run gave up on its goal and undoes what ran, once running steps finish (level 10)."""
        return self._give_up

    @property
    def returned(self) -> int:
        return self._returned

    def restart(self) -> None:
        """Execution (re)starts on a plan: nothing stops it yet."""
        self._stopping = False
        self._winding_down = False
        self._rejection = None
        self._halt = None
        self._give_up = None

    def stop(self) -> None:
        self._stopping = True

    def reject(self, reason: str) -> None:
        self._rejection = reason
        self._stopping = True

    def halt(self, reason: str) -> None:
        """Stop the run for good (level 9: an escalation's deadline said so): it ends failed once
        running steps finish."""
        self._halt = reason
        self._stopping = True

    def give_up(self, reason: str) -> None:
        """A revision was rejected in a run that compensates: it undoes what ran once running steps finish."""
        self._give_up = reason
        self._stopping = True

    def wind_down(self) -> None:
        self._winding_down = True

    def step_returned(self) -> None:
        self._returned += 1

    def decide_step(self, decision: ApproveInput | RejectInput, *, via: str) -> None:
        """A person's (or auto_approve's) decision on a gated step; a rejection stops the run."""
        rejection = decisions.decide_step(self._state, decision, via=via, now=workflow.now())
        if rejection is not None:
            self.reject(rejection)
