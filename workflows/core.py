"""What every part of the run workflow shares: its clock, the one check that versions its
behaviour (`has`, over the table in stratagem/domain/run_levels.py), where its activities go, and what
its span reports at the end.

The run workflow (`workflows.stratagem_run.StratagemRun`) is one class, as Temporal requires, that
holds parts, each an object with a small interface and the only writer of its own fields (as
`stratagem.domain.scheduling.Frontier` and `workflows.observe.Observer` are):

    RunControl    stopping, rejection, winding down for a continue-as-new (control.py)
    Progress      the step table, memo, status search attribute and notifications (progress.py)
    Steps         a step's record as it moves, which steps may start, the run's end (steps.py)
    Budgets       model usage, budgets and the waits on them (budgets.py)
    Compensation  a run that gives up on its goal undoes its effects: the undos' revision (compensation.py)
    Planning      the tool catalogue, planner calls, adopting a revision, replans (planning.py)
    processes     a run of a process: its nominal time, its rendered plan, the ledger's record (processes.py)
    Continuation  continue-as-new and the archive of routine events (continuation.py)
    Waits         a step waiting on a person: approvals, questions, paused calls (waits.py)
    Escalation    a wait on a person that escalates at its deadlines (escalation.py)
    StepRunner    one step: its gates, its slot, its activity and what its outcome records (step_runner.py)
    Execution     scheduling ready steps and ending the execution (execution.py)
    Finishing     the final check and the synthesis (finishing.py)
    Review        the review gate of a revision (review.py)
    Decider       what the decisions people send do (decider.py)
    Messages      every update, signal and query, on the class as Temporal requires (messages.py)
    StratagemRun  the phase loop: plan -> review -> execute -> replan (or compensate) -> finish (stratagem_run.py)

A part is handed the parts it uses when it is built, so what each one may touch is in its
constructor. Workflow code: deterministic, no I/O.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from stratagem.domain.roles import Role, role_queue
    from stratagem.domain.run_levels import Change
    from stratagem.domain.run_types import RunState


def now() -> datetime:
    return workflow.now()


def has(state: RunState, change: Change) -> bool:
    """Whether the run has `change` (a row of stratagem.domain.run_levels.Change): always at the row's
    level or above; below it, what its patch answers (an old history: no; a new run: yes, with a
    marker), and never for a row without one. Every version check of the workflow is this call."""
    return state.level >= change.level or (change.patch is not None and workflow.patched(change.patch))


def queue(role: Role) -> str:
    """Where a role's activities go: a queue per role, beside the workflow's own (stratagem/domain/roles.py)."""
    return role_queue(workflow.info().task_queue, role)


def outcome_attributes(state: RunState) -> dict[str, Any]:
    """What the run's span reports as it ends."""
    return {
        "stratagem.phase": state.phase.value,
        "stratagem.replans": state.ledger.replans,
        "stratagem.model_calls": state.ledger.usage.calls,
        "stratagem.cost_usd": state.ledger.usage.cost_usd,
    }
