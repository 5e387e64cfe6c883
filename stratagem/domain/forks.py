"""Forks: a new run from a revision of another, carrying over what succeeded there.

A fork is the "what if" of a run: the same plan, or an edited one, started again without
repeating what already happened. A step is carried over (its output reused, never run again)
when it succeeded in the source run under the revision forked from or an earlier one, does
exactly what it did there (kind, tool, arguments, instructions, output format), and every step
it depends on is carried too: a step whose inputs may differ runs again. Whatever runs again
runs under the fork's own idempotency keys, so it is a new call, not a replay of the old one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from stratagem.domain.graph import topological_order
from stratagem.domain.ledger import Ledger, StepStatus
from stratagem.domain.plan import PlanDraft
from stratagem.domain.scheduling import same_definition


@dataclass
class ForkCarry:
    outputs: dict[str, Any] = field(default_factory=dict)
    """Outputs carried over, by step id."""
    rerun: list[str] = field(default_factory=list)
    """Steps of the fork's plan that run again, in plan order."""


def fork_carry(source: Ledger, revision: int, draft: PlanDraft) -> ForkCarry:
    """What a fork of `source` at `revision`, running `draft`, carries over and runs again."""
    carry = ForkCarry()
    by_id = {s.id: s for s in draft.steps}
    carried: set[str] = set()
    for sid in topological_order({s.id: s.depends_on for s in draft.steps}):
        step = by_id[sid]
        record = source.steps.get(sid)
        ran = None
        if (
            record is not None
            and record.status is StepStatus.succeeded
            and record.revision is not None
            and record.revision <= revision
        ):
            try:
                ran = source.revision(record.revision).step(sid)
            except KeyError:
                ran = None
        if ran is not None and same_definition(ran, step) and all(dep in carried for dep in step.depends_on):
            carried.add(sid)
            carry.outputs[sid] = record.output  # type: ignore[union-attr]  # ran is set only with a record
    carry.rerun = [s.id for s in draft.steps if s.id not in carried]
    return carry
