"""Continue-as-new: when a run's history grows long, it hands its state to a fresh execution
of the same run. Before that, routine events move to the output store (in an activity), so the
state carried stays the size of the plan, not of the history. Workflow code: deterministic, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from temporalio import workflow
from temporalio.common import RawValue
from temporalio.exceptions import ActivityError, is_cancelled_exception

with workflow.unsafe.imports_passed_through():
    from stratagem.domain import activity_io
    from stratagem.domain.ledger import EventArchive, EventKind, Ledger
    from stratagem.domain.ledger_events import ContinuedAsNew
    from stratagem.domain.roles import Role
    from stratagem.domain.run_levels import Change
    from stratagem.domain.run_types import RunInput, RunState

from .activity_options import ARCHIVE_RETRY, ARCHIVE_TIMEOUT
from .core import has, outcome_attributes, queue
from .failures import cause_message
from .progress import Progress

# Routine events move to the output store at a continue-as-new, in batches of at least this many.
ARCHIVE_MIN_EVENTS = 200


class Continuation:
    def __init__(self, state: RunState, progress: Progress) -> None:
        self._state = state
        self._progress = progress
        # What the run span reports when this execution handed its state on (_release).
        self._outcome: dict[str, Any] | None = None

    @property
    def outcome(self) -> dict[str, Any] | None:
        return self._outcome

    def due(self) -> bool:
        info = workflow.info()
        limit = self._state.options.continue_as_new_after_events
        if limit is not None:
            return info.get_current_history_length() >= limit
        return info.is_continue_as_new_suggested()

    async def continue_as_new(self, release: Callable[[], None]) -> None:
        """Hand the state to a fresh execution; `release` lets the other parts drop what they hold of it."""
        if has(self._state, Change.ARCHIVE_EVENTS):
            await self._archive_events()
        self._progress.write_memo(final=True)
        # Handlers may still be mutating the state; carry it only once they are done.
        await workflow.wait_condition(workflow.all_handlers_finished)
        self._state.continued += 1
        self._state.ledger.record(
            EventKind.continued_as_new,
            workflow.now(),
            revision=self._state.plan.revision if self._state.plan else None,
            data=ContinuedAsNew(history_events=workflow.info().get_current_history_length()),
        )
        # Converted here, not by Temporal as the run ends, so this execution can let go of its
        # state before the next one reads it in: otherwise the worker holds both at once, twice the
        # memory of a long plan at every continue-as-new. (Temporal does not compare the arguments
        # of a continue-as-new on replay.)
        carried = workflow.payload_converter().to_payload(RunInput(state=self._state, options=self._state.options))
        self._release()
        release()
        workflow.continue_as_new(RawValue(carried))

    async def _archive_events(self) -> None:
        """Move the routine events (a step started, succeeded, called a tool) to the output store,
        so the state a continue-as-new carries stays the size of the plan, not of the history.
        If the store cannot take them, they stay in the state: nothing is lost, it is only larger."""
        ledger = self._state.ledger
        routine = ledger.routine_events()
        if len(routine) < ARCHIVE_MIN_EVENTS:
            return
        try:
            archive = await workflow.execute_activity(
                activity_io.ARCHIVE_EVENTS,
                activity_io.ArchiveEventsInput(run_id=self._state.run_id, events=routine),
                task_queue=queue(Role.workflow),
                result_type=EventArchive,
                start_to_close_timeout=ARCHIVE_TIMEOUT,
                retry_policy=ARCHIVE_RETRY,
                summary=f"archive events {routine[0].seq}-{routine[-1].seq}",
            )
        except ActivityError as exc:
            if is_cancelled_exception(exc):
                raise
            workflow.logger.warning("run %s keeps its events in its state: %s", self._state.run_id, cause_message(exc))
            return
        ledger.archived(routine, archive)

    def _release(self) -> None:
        """Drop the bulk of the state (plan, records, events): the execution ends with the
        continue-as-new that carries it, and answers no query after it."""
        self._outcome = outcome_attributes(self._state)
        self._state.ledger = Ledger(run_id=self._state.run_id)
