"""The decisions about a run's effects (level 10), as `RunHandle` methods: `resolve`, a person's
word on an in-doubt step, and `compensate`, the repair that gives up on the goal and undoes what
ran. Here rather than in stratagem/client.py, which holds the handle's other methods, to keep
that module under its size; each is one call of `decide`, as the handle's other typed methods are."""

from __future__ import annotations

from typing import TYPE_CHECKING

from stratagem.domain.decisions import Kind, kinds
from stratagem.domain.run_types import DecisionInput, DecisionOutcome, RepairAction, RepairInput, ResolveInput


class EffectDecisions:
    """What `RunHandle` decides about a run's effects, through its `decide`."""

    if TYPE_CHECKING:  # RunHandle's: send the decision as its kind's update

        async def decide(self, kind: Kind, decision: DecisionInput) -> DecisionOutcome: ...

    async def resolve(self, decision: ResolveInput) -> DecisionOutcome:
        """Say whether an in-doubt step's effect happened: it did (`happened=True`, with its output
        if known) and the step succeeds, or it did not and the step runs again. The step's approver
        rules apply; a step not in doubt is refused (DecisionRefusedError)."""
        return await self.decide(kinds.RESOLVE, decision)

    async def compensate(self, by: str, reason: str = "") -> DecisionOutcome:
        """At a repair: give up on the goal and undo the effects that ran (the compensation plan,
        reviewed like a revision unless the run approves itself). The run ends compensated, or
        compensation_failed if an undo fails for good."""
        return await self.decide(kinds.REPAIR, RepairInput(by=by, action=RepairAction.compensate, reason=reason))
