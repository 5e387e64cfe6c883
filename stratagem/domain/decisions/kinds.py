"""The table of decision kinds: each decision people send a run (`KINDS`), and each thing a run
waits for a person to decide (`WAITS`).

A kind says how its decision travels (its update and signal: wire names, written here and nowhere
else, part of the contract with runs in flight, so they never change), what it
takes, which commands send it, what a run may be waiting for when it arrives, and who may send
it. A wait says how it is put to people: in a notification, the console or the inbox
(`waiting`), and at the terminal (`question`). Two tables, because the two do not line up: an
approval answers a plan, a step or a call, and a plan under review takes an approval, a
rejection or a revision.

What handles a decision by its kind reads it here instead of naming it again: `RunHandle` sends
each kind's update, the workflow registers it (workflows/decider.py) and the interceptors check
its signature (`BY_UPDATE`, `BY_SIGNAL`), the CLI's deciding commands send theirs through it, and
notifications and the terminal prompt word a wait through `WAITS`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from stratagem.domain import handlers
from stratagem.domain.decisions import answer, budget, call_approval, in_doubt, plan_approval, repair, step_approval
from stratagem.domain.run_types import (
    AnswerInput,
    ApproveInput,
    BudgetInput,
    DecisionInput,
    DecisionKind,
    PendingDecision,
    RejectInput,
    RepairInput,
    ResolveInput,
    ReviseInput,
)


@dataclass(frozen=True)
class Verb:
    """A command of the CLI that sends a kind of decision, and its one-line help."""

    name: str
    help: str


@dataclass(frozen=True)
class Kind:
    """A decision people send a run."""

    name: str
    """Also the name of the update that carries it (with a validator; the sender gets the outcome
    or the refusal). A wire name: runs in flight answer to the names they started with, so it
    never changes."""
    input: type[DecisionInput]
    verbs: tuple[Verb, ...]
    answers: tuple[DecisionKind, ...]
    """What a run may be waiting for that this decides (revise also changes a running plan)."""
    approver_list: bool
    """Whether the run's approver list (RunOptions.approvers) always applies. An answer follows
    it from level 7, and below only on steps that name approvers. Every kind is signed alike
    (stratagem.common.signing): the signature covers its update's name."""
    description: str

    @property
    def update(self) -> str:
        """The update that carries it: the kind's name."""
        return self.name

    @property
    def signal(self) -> str:
        """The signal that carries it (fire-and-forget: a refused one is recorded, not applied),
        named after its update (stratagem.domain.handlers.signal_name)."""
        return handlers.signal_name(self.update)


APPROVE = Kind(
    name="approve",
    input=ApproveInput,
    verbs=(Verb("approve", "approve the plan awaiting review, or a gated step"),),
    answers=(DecisionKind.plan_approval, DecisionKind.step_approval, DecisionKind.tool_call_approval),
    approver_list=True,
    description="Approve the revision under review, a gated step (step_id), or one tool call of a step "
    "(step_id and call_id, with the digest of the arguments shown).",
)
REJECT = Kind(
    name="reject",
    input=RejectInput,
    verbs=(Verb("reject", "reject the plan (ending the run) or a gated step"),),
    answers=(DecisionKind.plan_approval, DecisionKind.step_approval, DecisionKind.tool_call_approval),
    approver_list=True,
    description="Reject the revision under review (the run ends), a gated step (the run ends once running "
    "steps finish), or one tool call (the step is told, and goes on).",
)
REVISE = Kind(
    name="revise",
    input=ReviseInput,
    verbs=(Verb("revise", "replace the plan with an edited plan file: under review, while it runs, or as a repair"),),
    answers=(DecisionKind.plan_approval, DecisionKind.repair),
    approver_list=True,
    description="Replace the plan with a person's edit: the next revision, which awaits approval of what it changed.",
)
ANSWER = Kind(
    name="answer",
    input=AnswerInput,
    verbs=(Verb("answer", "answer a human step"),),
    answers=(DecisionKind.human_answer,),
    approver_list=False,
    description="Answer the question of a human step, in the shape its answer schema asks for.",
)
BUDGET = Kind(
    name="budget",
    input=BudgetInput,
    verbs=(Verb("budget", "raise a run's budget, or stop a run that used it up"),),
    answers=(DecisionKind.budget,),
    approver_list=True,
    description="Raise (or set) budget limits, or stop a run that used its budget up.",
)
REPAIR = Kind(
    name="repair",
    input=RepairInput,
    verbs=(
        Verb("retry", "repair: run a failed step again, with new arguments if given"),
        Verb("skip", "repair: count a failed step as done, with its output given by hand"),
        Verb("ask-again", "repair: ask a human step's question again; the failed steps using it rerun"),
        Verb("stop", "repair: end a run that waits for a repair, as failed"),
        Verb("compensate", "repair: give up on the goal and undo the effects that ran"),
    ),
    answers=(DecisionKind.repair,),
    approver_list=True,
    description="Retry a failed step (with new arguments if given), skip it with an output, ask a human "
    "step's question again, stop the run, or compensate (undo the effects that ran).",
)
RESOLVE = Kind(
    name="resolve",
    input=ResolveInput,
    verbs=(Verb("resolve", "say whether an in-doubt step's effect happened (--happened or --not-happened)"),),
    answers=(DecisionKind.in_doubt,),
    approver_list=True,
    description="Say whether the effect of an in-doubt step happened: it did (with its output, if known) and the "
    "step succeeds, or it did not and the step runs again.",
)

KINDS: tuple[Kind, ...] = (APPROVE, REJECT, REVISE, ANSWER, BUDGET, REPAIR, RESOLVE)
BY_UPDATE: dict[str, Kind] = {kind.update: kind for kind in KINDS}
BY_SIGNAL: dict[str, Kind] = {kind.signal: kind for kind in KINDS}
# The CLI commands that send decisions, each once (`stratagem stop` is a repair, `budget --stop` a budget).
BY_VERB: dict[str, Kind] = {verb.name: kind for kind in KINDS for verb in kind.verbs}


def answered_by(waiting: DecisionKind) -> tuple[Kind, ...]:
    """The kinds that decide something a run waits for."""
    return tuple(kind for kind in KINDS if waiting in kind.answers)


@dataclass(frozen=True)
class Wait:
    """Something a run waits for a person to decide, as people are told of it."""

    kind: DecisionKind
    waiting: Callable[[PendingDecision], str]
    """What it waits for, in words: notifications (stratagem.notify), the console, the inbox."""
    question: Callable[[PendingDecision], str]
    """What the terminal asks, before the choices it offers (stratagem.cli.prompting)."""


WAITS: dict[DecisionKind, Wait] = {
    wait.kind: wait
    for wait in (
        Wait(DecisionKind.plan_approval, plan_approval.waiting, plan_approval.question),
        Wait(DecisionKind.step_approval, step_approval.waiting, step_approval.question),
        Wait(DecisionKind.tool_call_approval, call_approval.waiting, call_approval.question),
        Wait(DecisionKind.human_answer, answer.waiting, answer.question),
        Wait(DecisionKind.budget, budget.waiting, budget.question),
        Wait(DecisionKind.repair, repair.waiting, repair.question),
        Wait(DecisionKind.in_doubt, in_doubt.waiting, in_doubt.question),
    )
}


def waiting_for(pending: PendingDecision) -> str:
    """What a pending decision waits for, in words."""
    return WAITS[pending.kind].waiting(pending)
