"""Decisions people send a run: whether it takes an approve, reject, revise, answer or budget
decision, and what taking one records.

Plain functions over `RunState`, with no Temporal in them, so they can be tested on their own.
The workflow calls the checks from its update validators and signal handlers, and the other
functions to ask for a decision and to apply one. Those only change the state and its ledger;
time comes in as `now` (workflow time, in the workflow), and what the run loop must do next
(stop, end the run) is left to the caller.

One module per kind of decision: `plan_approval`, `step_approval`, `call_approval` (approve and
reject of each target, checked together in `approval`), `edit` (a step approved with changed
arguments), `revise`, `answer`, `budget` and
`repair` (whose rules are `stratagem.domain.repairs`); what they share in `common`; and the table of
kinds, which the client, the CLI and notifications read, in `kinds`. Every function is also
here, where callers have always found it.
"""

from __future__ import annotations

from stratagem.domain.decisions.answer import check_answer, record_answer, request_answer
from stratagem.domain.decisions.approval import check_approve, check_reject
from stratagem.domain.decisions.budget import apply_budget, check_budget, request_budget
from stratagem.domain.decisions.call_approval import check_call_digest, decide_call, pending_call, request_call_approval
from stratagem.domain.decisions.common import (
    check_approver,
    check_open,
    check_revision,
    outcome,
    pending_for,
    pending_key,
    record_decision,
    remove_pending,
    step_of,
    with_step_args,
)
from stratagem.domain.decisions.edit import approve_edited, argument_edits, check_edit, edited_plan
from stratagem.domain.decisions.kinds import KINDS, WAITS, Kind, Verb, Wait, waiting_for
from stratagem.domain.decisions.plan_approval import (
    approve_plan,
    carry_approval,
    covered,
    loosened,
    plan_approval_request,
    plan_changes,
    record_plan_rejection,
    review_changes,
)
from stratagem.domain.decisions.revise import check_revise, record_revision, running_problems
from stratagem.domain.decisions.step_approval import (
    check_step_approver,
    decide_step,
    kept_step_approvals,
    rejection,
    request_step_approval,
    sent_back,
    step_approvers,
)

__all__ = [
    "KINDS",
    "WAITS",
    "Kind",
    "Verb",
    "Wait",
    "apply_budget",
    "approve_edited",
    "approve_plan",
    "argument_edits",
    "carry_approval",
    "check_answer",
    "check_approve",
    "check_approver",
    "check_budget",
    "check_call_digest",
    "check_edit",
    "check_open",
    "check_reject",
    "check_revise",
    "check_revision",
    "check_step_approver",
    "covered",
    "decide_call",
    "decide_step",
    "edited_plan",
    "kept_step_approvals",
    "loosened",
    "outcome",
    "pending_call",
    "pending_for",
    "pending_key",
    "plan_approval_request",
    "plan_changes",
    "record_answer",
    "record_decision",
    "record_plan_rejection",
    "record_revision",
    "rejection",
    "remove_pending",
    "request_answer",
    "request_budget",
    "request_call_approval",
    "request_step_approval",
    "review_changes",
    "running_problems",
    "sent_back",
    "step_approvers",
    "step_of",
    "waiting_for",
    "with_step_args",
]
