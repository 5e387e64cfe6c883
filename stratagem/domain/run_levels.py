"""Which behaviours a run has: one table of every change to what the run workflow decides, the
level that includes it, and the patch a run without a level still asks for it.

Runs in flight replay their history on the code of today, so a change that would make an old
history decide differently is a row of `Change`, never an `if` on a version written at its call
site. `start_run` stamps each new run with `RUN_LEVEL`; a run at a row's level or above has the
change without asking Temporal (each `workflow.patched` of a new run writes a marker and a
search-attribute upsert: two history events and a visibility write per patch per run). A row with
a patch id came before the levels or rode on the level-less path: a run below its level asks
`workflow.patched(id)` exactly as the code did then, so an old history (no marker) replays without
the change, and a new run without a level (an older client, a start by hand) takes it, so leaving
the level out cannot switch a rule off. A row without a patch id is only for runs at its level:
a run below it never had it. The workflow asks through `workflows.core.has`; the domain's rules,
which cannot ask Temporal, through `reached`, and only for rows without a patch id (or once the
workflow has raised the level, as it does for `SIGNED_DECISIONS`). How to add a row, raise the
level or capture a new golden generation: RELIABILITY.md, "Changing the workflow".
"""

from __future__ import annotations

from enum import Enum
from typing import Protocol

# The level this code stamps on the runs it starts (stratagem.client.start_run) and the highest
# it runs: a worker fails the workflow tasks of a run above it until a newer worker takes them.
RUN_LEVEL = 10


class Change(Enum):
    """One row per change: (level that includes it, legacy patch id or None, what it changes).
    Patch ids are in the histories of runs in flight: never rename one."""

    def __init__(self, level: int, patch: str | None, what: str) -> None:
        self.level = level
        self.patch = patch
        self.what = what

    # Level 1: the run levels themselves. Every change made before them is behind a patch.
    PHASE_MEMO = 1, "phase-in-memo", "the run's phase is kept in the memo, so listings tell the end of a run"
    ARCHIVE_EVENTS = 1, "archive-events", "routine events move to the output store at a continue-as-new"
    LOOSENED_REPLAN = 1, "replan-loosened-needs-a-person", "a replan that loosens an approval waits for a person"
    NO_LITERAL_CREDENTIALS = 1, "no-literal-credentials", "plans may not carry literal credentials in HTTP headers"
    BUDGET_SHORT_OF_A_CALL = 1, "budget-short-of-a-call", "a budget too small for one more call asks a person first"
    BUDGET_HOLDS_HUMAN_STEPS = 1, "budget-holds-human-steps", "a used-up budget holds human steps too"
    MEMO_ONCE_PER_TASK = 1, None, "the phase goes into the memo once per workflow task, not once per phase"
    # Level 2.
    MEMO_HELD_BY_APPROVAL = 2, None, "the task that approves a plan leaves its memo write to the next task"
    # Level 3.
    CATALOG_HERE = 3, None, "the tool catalogue comes from a local activity when the worker serves the tools role"
    # Level 4: repairs, partial re-approval, tool-call approvals, changes while running.
    PARTIAL_REAPPROVAL = 4, "partial-re-approval", "steps as the approved revision had them keep their approval"
    REPAIRS = 4, "repair-instead-of-failure", "a failure no replan can answer waits for a repair"
    TOOL_RISK_FLOOR = 4, "tool-risk-floor", "a tool's declared risk gates its steps whatever the plan says"
    PLAN_APPROVAL_BESIDE_OTHERS = 4, None, "a plan approval is asked beside decisions already pending"
    REVISE_WHILE_RUNNING = 4, None, "a plan may be revised while it runs"
    # Level 5 (stratagem.notify).
    NOTIFICATIONS = 5, None, "a notification per pending decision, when the worker has channels"
    # Level 6: no branch. Checked results (output schemas, success criteria judged by the record
    # and a verifier, criteria_unmet replans), negotiated endpoints, failover tiers, escalation and
    # the final check put fields in activity inputs that an older worker would ignore, running a
    # step unchecked: the level alone keeps such runs from older workers.
    CHECKED_RESULTS = 6, None, "results are checked by the fields of the activity inputs (no branch)"
    # Level 7: signed decisions by default. Runs below it ask the patch in the workflow's
    # __init__, and one that takes it is raised to level 7, so it has every row below too.
    SIGNED_DECISIONS = 7, "signed-decisions-by-default", "unsigned decisions are refused, auto_approve is signed"
    DECISIONS_COUNT_ONCE = 7, None, "a decision needs a worker's verdict, and a signed one counts once"
    HUMAN_STEP_FIELDS = 7, None, "a reference into a field of a human step needs its answer schema"
    FORK_READS_SOURCE = 7, None, "a fork's carried outputs are read from its source run's ledger"
    FORK_OUTPUTS_SHOWN = 7, None, "a fork's plan approval carries the outputs the approver saw"
    CALL_APPROVAL_BOUND = 7, None, "a tool call's approval is bound to the digest of its arguments"
    ANSWERS_BY_APPROVERS = 7, None, "answers are held to the run's approver list"
    # Level 8: approvers see what will run (issue #38).
    RESOLVED_GATES = 8, None, "a gated step is asked with what will run, and runs only with what was approved"
    # Level 9: approvers shape what will happen (issue #38).
    EDIT_AND_APPROVE = 9, None, "a gated tool step is approved with changed arguments, a revision by its approver"
    REJECTED_STEP_REPAIRS = (
        9,
        None,
        "a rejected step is sent back (a replan or a repair), not the run; a retried gated step is asked again; "
        "a retry's arguments merge into the step's",
    )
    # Level 9: more than one person, and not the author (issue #38). An older worker would take a
    # step's or the plan's first approval as enough: the level keeps such runs from it.
    QUORUM = 9, None, "an approval may need several different people (quorum), none of them its author (four eyes)"
    ESCALATION_GROUPS = 9, None, "a decision left past escalate_after goes to the escalate_to group, then expires"
    # Level 10: effects that can be undone or reconciled (issue #41). An older worker would retry
    # an irreversible tool's attempt of unknown outcome blindly, and know no compensation.
    COMPENSATION = 10, None, "a run that ends without its goal may undo its effects (on_failure: compensate, a repair)"
    IN_DOUBT = (
        10,
        None,
        "an attempt of unknown outcome is reconciled (a tool's check) or waits for a person (irreversible), "
        "never retried blindly",
    )
    TOO_SOON_UPDATES = (
        10,
        None,
        "an update that reaches a run holding work no workflow task recorded yet (a query's replay on a new worker "
        "applied it) is refused as too soon; sent again, it is taken in a task of its own",
    )


class Leveled(Protocol):
    @property
    def level(self) -> int: ...


def reached(run: Leveled, change: Change) -> bool:
    """Whether the run's level includes `change`, asking nothing. For a row with a patch id this
    is not whether the run has it: a run below its level asks the patch (workflows.core.has)."""
    return run.level >= change.level
