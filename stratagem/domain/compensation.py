"""Compensation (level 10): when a run gives up on its goal after effects ran, the plan that undoes
them, derived from what the ledger says ran.

Every step that succeeded here and had an effect gets an undo: its own `compensate` ({tool, args})
or else the compensation its tool declares (`@tool(compensate=...)`, ToolSpec.compensate). The
undo takes the plan's arguments if it names any, else the step's own arguments (references kept:
they resolve against outputs that never change once a step succeeded) restricted to the undo's
parameters, plus `original_output: "${step}"` when the undo takes that parameter.

The undo's arguments are written into the revision as they will run: the references filled from
outputs that never change once their steps succeeded, so the person who approves the
compensation sees the values each undo is called with, not `${register.vendor_id}` (a reference
into an output in the store, which only an activity reads, stays as written).

The undos become a new revision: the succeeded steps as they are (never run again) and one tool
step per undo, `undo-<id>`, depending on its step and on the undos of every compensable step that
depends on it, so an effect is undone only after everything built on it was, and independent
undos run side by side. The failed and never-run steps leave the revision (their records stay).
References, the resolved-argument gates, step approvals, repairs and continue-as-new then work
on it as on any revision. Plain functions over `RunState`; the workflow adopts the revision
(workflows/compensation.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from stratagem.common.errors import ReferenceResolutionError
from stratagem.domain.catalog import ToolCatalog
from stratagem.domain.graph import ancestry
from stratagem.domain.ledger import EventKind, StepRecord, StepStatus, ToolCallStatus
from stratagem.domain.ledger_events import CompensationPlanned, StepRepaired
from stratagem.domain.plan import Compensation, PlanDraft, Step, StepKind
from stratagem.domain.references import literal, references_in, resolve
from stratagem.domain.run_state import RunState
from stratagem.domain.stored import is_stored

ORIGINAL_OUTPUT = "original_output"
"""The undo's parameter that receives the output of the step it undoes."""
UNDO_PREFIX = "undo-"
_ID_LIMIT = 64  # stratagem.domain.plan.STEP_ID_PATTERN


@dataclass
class Derived:
    """What a run that gives up on its goal would undo."""

    effects: list[str] = field(default_factory=list)
    """Steps that ran here with an effect, in plan order."""
    undos: dict[str, Step] = field(default_factory=dict)
    """Each undoable step's id and its undo step, the step it undoes first."""
    cannot_undo: list[str] = field(default_factory=list)
    """Steps that ran with an effect and have no compensation: they stay."""
    draft: PlanDraft | None = None
    """The revision: the succeeded steps and the undo steps (None when nothing can be undone)."""

    @property
    def originals(self) -> dict[str, str]:
        """Each undo step's id, and the step it undoes."""
        return {undo.id: original for original, undo in self.undos.items()}


def parameters(catalog: ToolCatalog, tool: str) -> set[str] | None:
    """The parameters a tool takes, by name; None for a tool the catalogue does not know."""
    spec = catalog.get(tool)
    if spec is None:
        return None
    return set((spec.parameters or {}).get("properties") or {})


def undo_of(step: Step, catalog: ToolCatalog) -> Compensation | None:
    """How a step's effect is undone: its own compensation, or its tool's declared one."""
    if step.compensate is not None:
        return step.compensate
    spec = catalog.get(step.tool) if step.kind is StepKind.tool and step.tool else None
    if spec is not None and spec.compensate:
        return Compensation(tool=spec.compensate)
    return None


def undo_args(step: Step, undo: Compensation, catalog: ToolCatalog) -> dict[str, Any]:
    """The undo's arguments: the plan's, else the step's own that the undo takes; and the step's
    output as `original_output` when the undo takes it and the plan's arguments leave it out."""
    takes = parameters(catalog, undo.tool)
    if undo.args is not None:
        args = dict(undo.args)
    else:
        args = {name: value for name, value in step.args.items() if takes is None or name in takes}
    if takes is not None and ORIGINAL_OUTPUT in takes and ORIGINAL_OUTPUT not in args:
        args[ORIGINAL_OUTPUT] = "${" + step.id + "}"
    return args


def as_run(args: dict[str, Any], outputs: Mapping[str, Any]) -> dict[str, Any]:
    """An undo's arguments with their references filled, escaped so that they run as shown; as
    written when one names an output in the store or cannot be filled (validation then says why)."""
    if any(is_stored(outputs.get(ref.step_id)) for ref in references_in("", args)):
        return args
    try:
        filled = resolve(args, outputs)
    except ReferenceResolutionError:
        return args
    return dict(literal(filled))


def _by_hand(state: RunState) -> set[str]:
    """Steps whose output a person gave (skipped at a repair) or a fork carried: whatever their
    effect was, it did not happen in this run."""
    steps = set()
    for event in state.ledger.events:
        if event.step_id is None:
            continue
        if event.kind is EventKind.step_carried:
            steps.add(event.step_id)
        elif event.kind is EventKind.step_repaired and event.details_as(StepRepaired).action == "skip":
            steps.add(event.step_id)
    return steps


def had_effect(step: Step, record: StepRecord, catalog: ToolCatalog) -> bool:
    """Whether a succeeded step changed something: a tool step of a tool with side effects (one
    the catalogue does not know counts), an llm step that called such a tool. Human steps and
    read-only tools change nothing."""
    if step.kind is StepKind.tool and step.tool:
        spec = catalog.get(step.tool)
        return spec is None or spec.side_effects
    if step.kind is StepKind.llm:
        for call in record.tool_calls:
            spec = catalog.get(call.tool)
            if call.status is ToolCallStatus.ok and (spec is None or spec.side_effects):
                return True
    return False


def effects(state: RunState) -> list[str]:
    """The steps of the current plan that ran here with an effect, in plan order; a step whose
    outcome is in doubt may have had its effect, and counts (it is never undone: `derive`)."""
    if state.plan is None:
        return []
    by_hand = _by_hand(state)
    records = state.ledger.steps
    return [
        s.id
        for s in state.plan.steps
        if records[s.id].status is StepStatus.in_doubt
        or (
            records[s.id].status is StepStatus.succeeded
            and s.id not in by_hand
            and had_effect(s, records[s.id], state.catalog)
        )
    ]


def undo_id(step_id: str, taken: set[str]) -> str:
    """`undo-<id>`, cut to the id limit and numbered if a step already has it."""
    base = (UNDO_PREFIX + step_id)[:_ID_LIMIT]
    candidate, number = base, 2
    while candidate in taken:
        suffix = f"-{number}"
        candidate = base[: _ID_LIMIT - len(suffix)] + suffix
        number += 1
    return candidate


def derive(state: RunState, reason: str) -> Derived:
    """The compensation of the run as it stands: which effects ran, their undos in reverse
    dependency order, and what nothing undoes."""
    plan = state.plan
    derived = Derived(effects=effects(state))
    if plan is None or not derived.effects:
        return derived
    # An undo of an effect that may not have happened could do harm of its own (a refund of a
    # charge never made): a step in doubt stays, named, for a person to settle.
    certain = [sid for sid in derived.effects if state.ledger.steps[sid].status is StepStatus.succeeded]
    compensable = {sid: undo for sid in certain if (undo := undo_of(plan.step(sid), state.catalog))}
    derived.cannot_undo = [sid for sid in derived.effects if sid not in compensable]
    if not compensable:
        return derived
    is_ancestor = ancestry({s.id: s.depends_on for s in plan.steps})
    taken = set(plan.step_ids) | set(state.ledger.steps)
    ids: dict[str, str] = {}
    for sid in compensable:
        ids[sid] = undo_id(sid, taken)
        taken.add(ids[sid])
    outputs = state.ledger.outputs()
    # Reverse plan order, so the revision reads as the undoing goes: the last effect first.
    for sid in reversed(list(compensable)):
        step, undo = plan.step(sid), compensable[sid]
        first = [ids[other] for other in compensable if other != sid and is_ancestor(other, sid)]
        derived.undos[sid] = Step(
            id=ids[sid],
            title=f"Undo: {step.title}"[:200],
            kind=StepKind.tool,
            tool=undo.tool,
            args=as_run(undo_args(step, undo, state.catalog), outputs),
            depends_on=[sid, *first],
        )
    kept = [s for s in plan.steps if state.ledger.steps[s.id].status is StepStatus.succeeded]
    derived.draft = PlanDraft(
        goal=plan.goal,
        steps=[*kept, *derived.undos.values()],
        reason=f"undo what ran, as the run ends without its goal ({reason})",
    )
    return derived


def prompt(derived: Derived, reason: str) -> str:
    """What the compensation's reviewer is asked, naming the effects that stay."""
    count = len(derived.undos)
    text = f"undo {count} effect{'s' if count != 1 else ''} of a run that ends without its goal ({reason})"
    if derived.cannot_undo:
        text += f"; these stay: {', '.join(derived.cannot_undo)}"
    return text


def _planned(state: RunState) -> CompensationPlanned | None:
    for event in reversed(state.ledger.events):
        if event.kind is EventKind.compensation_planned:
            return event.details_as(CompensationPlanned)
    return None


def remaining(state: RunState) -> list[str]:
    """The effects a compensation left standing: those whose undo did not succeed (yet), and
    those nothing undoes."""
    compensating = state.compensation
    planned = _planned(state)
    left = [
        original
        for undo, original in (planned.undos.items() if planned else [])
        if (record := state.ledger.steps.get(undo)) is None or record.status is not StepStatus.succeeded
    ]
    return left + (compensating.cannot_undo if compensating else [])


def failed_reason(state: RunState, why: str) -> str:
    """Why a compensation ended without finishing, and which effects remain."""
    left = remaining(state)
    remains = f"effects remain: {', '.join(left)}" if left else "no effect remains"
    return f"the compensation did not finish ({why}); {remains}"


def compensated_reason(state: RunState) -> str:
    """Why a run ended compensated: what it gave up on, what was undone, what stays."""
    compensating = state.compensation
    assert compensating is not None
    planned = _planned(state)
    undone = sorted(planned.undos.values()) if planned else []
    text = f"{compensating.reason}; undone: {', '.join(undone) or 'nothing'}"
    if compensating.cannot_undo:
        text += f"; these stay: {', '.join(compensating.cannot_undo)}"
    return text
