"""The decisions people send a run, one input model each, and the outcome a run answers with.

Every decision is an update and a signal of the run workflow (stratagem.domain.handlers names them;
stratagem.domain.decisions holds what each may do), so each takes one model, whose fields can grow
without breaking runs in flight.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any, NewType

from pydantic import BaseModel, Field, PrivateAttr, field_validator

from stratagem.common.errors import DecisionRefusedError
from stratagem.common.signing import Verdict
from stratagem.domain.plan import PlanDraft
from stratagem.domain.run_state import Phase

NAME_LIMIT = 200
TEXT_LIMIT = 4000
ARGS_LIMIT = 32_000
"""An approval's changed arguments, as JSON: they become part of the plan, carried in every state."""


class DecisionInput(BaseModel):
    """What every decision carries: who decided, and (where the deployment signs) the proof.

    Names and texts are bounded: they are stored in the ledger, refused ones too.
    """

    by: str = Field(min_length=1, max_length=NAME_LIMIT)
    signer: str | None = Field(
        default=None, max_length=64, description="The key that signed it (stratagem.common.signing)."
    )
    signature: str | None = Field(default=None, max_length=200, description="Ed25519 over the decision, base64.")
    nonce: str | None = Field(
        default=None, max_length=32, description="Random, set when it is signed: a signed decision counts once."
    )
    # Set by the worker's VerifyDecisions interceptor, never from the payload.
    _verdict: Verdict | None = PrivateAttr(default=None)

    @property
    def verdict(self) -> Verdict | None:
        return self._verdict


class AutoApproval(DecisionInput):
    """A person's signed consent that a run approves its own plans and gated steps (auto_approve):
    for one input (`digest`, see `start_digest`), at one time (`signed_at`), on one run id."""

    digest: str = Field(min_length=64, max_length=64, description="SHA-256 of the run's input, as start_digest.")
    signed_at: datetime


@dataclass(frozen=True)
class PlanTarget:
    """The plan revision waiting for approval."""


@dataclass(frozen=True)
class StepTarget:
    """One gated step waiting for approval."""

    step_id: str


@dataclass(frozen=True)
class CallTarget:
    """One tool call a step waits to make."""

    step_id: str
    call_id: str


Target = PlanTarget | StepTarget | CallTarget
"""What an approval or a rejection decides on."""

UNANCHORED_CALL = "a tool call is approved with its step: give --step as well as --call"


def target_of(step_id: str | None, call_id: str | None) -> Target:
    """An approval's or a rejection's ids, read as what it decides on.

    The wire keeps its flat optional ids (older clients send them, histories hold them). A call
    without its step is accepted as a payload and refused here, by the run's check, as it always
    was: a model validator would refuse it before the run sees it, so a signal would be dropped
    unread instead of recorded as ignored.
    """
    if call_id is not None:
        if step_id is None:
            raise DecisionRefusedError(UNANCHORED_CALL)
        return CallTarget(step_id, call_id)
    if step_id is not None:
        return StepTarget(step_id)
    return PlanTarget()


class ApproveInput(DecisionInput):
    revision: int | None = Field(default=None, description="Refuse if the pending revision is not this one.")
    step_id: str | None = Field(default=None, description="Approve one gated step instead of the plan.")
    call_id: str | None = Field(default=None, max_length=20, description="Approve one tool call of the step.")
    digest: str | None = Field(
        default=None,
        max_length=64,
        description="A tool call's approval: the digest of the arguments shown (PendingDecision.call.digest); "
        "a gated step's: the digest of what it will run (PendingDecision.preview.digest). Refused as stale if "
        "what waits differs.",
    )
    comment: str = Field(default="", max_length=TEXT_LIMIT)
    args: dict[str, Any] | None = Field(
        default=None,
        description="A gated tool step's approval with changed arguments (level 9): the ones changed, by name, "
        "merged into those shown; it must name the digest of what was shown. A new revision by the approver.",
    )

    @field_validator("args")
    @classmethod
    def _bounded(cls, args: dict[str, Any] | None) -> dict[str, Any] | None:
        if args is not None and (size := len(json.dumps(args, default=str))) > ARGS_LIMIT:
            raise ValueError(f"the changed arguments are {size:,} characters of JSON; at most {ARGS_LIMIT:,}")
        return args

    @property
    def target(self) -> Target:
        """The plan, a step or a call; a call without its step is refused (DecisionRefusedError)."""
        return target_of(self.step_id, self.call_id)


class RejectInput(DecisionInput):
    reason: str = Field(min_length=1, max_length=TEXT_LIMIT)
    revision: int | None = None
    step_id: str | None = None
    call_id: str | None = Field(default=None, max_length=20)

    @property
    def target(self) -> Target:
        """The plan, a step or a call; a call without its step is refused (DecisionRefusedError)."""
        return target_of(self.step_id, self.call_id)


class RepairAction(str, Enum):
    retry = "retry"
    """Run the failed step again, with edited arguments if given (a new revision)."""
    skip = "skip"
    """Count the step as done, with an output supplied by hand."""
    stop = "stop"
    """End the run as failed."""
    ask_again = "ask_again"
    """Ask a human step's question again: its answer is dropped, and the failed steps that used it
    run again with the new one."""
    compensate = "compensate"
    """Give up on the goal and undo the effects that ran: the compensation plan, reviewed like a
    revision (level 10)."""


@dataclass(frozen=True)
class RetryRepair:
    """Run a failed step again; a tool step with new arguments (`args`), a new revision."""

    step_id: str
    args: dict[str, Any] | None


@dataclass(frozen=True)
class SkipRepair:
    """Count a failed step as done, with an output given by hand."""

    step_id: str
    output: Any


@dataclass(frozen=True)
class AskAgainRepair:
    """Ask a human step's question again (`step_id` is the human step)."""

    step_id: str


@dataclass(frozen=True)
class StopRepair:
    """End the run as failed."""


@dataclass(frozen=True)
class CompensateRepair:
    """Give up on the goal and undo the effects that ran."""


Repair = RetryRepair | SkipRepair | AskAgainRepair | StopRepair | CompensateRepair
"""A repair, each action with the fields it means something for."""


class RepairInput(DecisionInput):
    """A person's answer to a run waiting for repair (a human replan is a `ReviseInput`).

    The wire is flat (`args` means something for a retry, `output` for a skip); `repair` reads it
    as one action with its own fields. A field that does not belong to the action is accepted as
    a payload and refused by the run's check (stratagem.domain.repairs.check_repair), as it always was.
    """

    action: RepairAction
    step_id: str | None = Field(
        default=None, description="The failed step (retry, skip), or the human step to ask again (ask_again)."
    )
    args: dict[str, Any] | None = Field(default=None, description="retry: the tool step's new arguments.")
    output: Any = Field(default=None, description="skip: the step's output.")
    reason: str = Field(default="", max_length=TEXT_LIMIT)

    @property
    def repair(self) -> Repair:
        """The action with its fields; one that names no step, where it needs one, is refused
        (DecisionRefusedError)."""
        if self.action is RepairAction.stop:
            return StopRepair()
        if self.action is RepairAction.compensate:
            return CompensateRepair()
        if self.step_id is None:
            if self.action is RepairAction.ask_again:
                raise DecisionRefusedError("ask_again needs the human step whose question is asked again")
            raise DecisionRefusedError(f"{self.action.value} needs the failed step it applies to")
        if self.action is RepairAction.ask_again:
            return AskAgainRepair(self.step_id)
        if self.action is RepairAction.skip:
            return SkipRepair(self.step_id, self.output)
        return RetryRepair(self.step_id, self.args)


class ResolveInput(DecisionInput):
    """A person's word on an in-doubt step (level 10): its effect happened (with the output it had,
    if known) and the step succeeds, or it did not and the step runs again."""

    step_id: str
    happened: bool
    output: Any = Field(default=None, description="happened: the step's output, if known (else null).")
    reason: str = Field(default="", max_length=TEXT_LIMIT)


class ReviseInput(DecisionInput):
    plan: PlanDraft
    reason: str = Field(default="", max_length=TEXT_LIMIT)
    revision: int | None = Field(
        default=None, description="The revision this edit is based on; refused if it is no longer current."
    )


class BudgetInput(DecisionInput):
    """Raise (or set) budget limits, or stop a run that has used its budget up."""

    tokens: int | None = Field(default=None, ge=1)
    cost_usd: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    model_calls: int | None = Field(default=None, ge=1)
    wall_clock_seconds: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    stop: bool = Field(default=False, description="End the run instead (only while it waits on its budget).")
    reason: str = Field(default="", max_length=TEXT_LIMIT)

    @property
    def limits(self) -> dict[str, float]:
        names = ("tokens", "cost_usd", "model_calls", "wall_clock_seconds")
        return {name: getattr(self, name) for name in names if getattr(self, name) is not None}


class AnswerInput(DecisionInput):
    step_id: str
    answer: Any


Stop = NewType("Stop", str)
"""What a rule that applies a decision returns when the run must end: why, in words (the run's
failure or rejection reason). `Stop | None` says what a bare `str | None` left to the reader; it
is a str at run time, so the reason stored and shown is the same text."""


class DecisionOutcome(BaseModel):
    accepted: bool = True
    revision: int
    phase: Phase
    message: str = ""
