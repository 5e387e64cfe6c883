"""Attempts of unknown outcome (issue #41, items 3 and 4), on the time-skipping server.

A tool that declares `reconcile` has its check run before any retry of an attempt whose outcome is
unknown: what it finds becomes the output and the tool does not run again; None, and the tool runs.
An irreversible tool without a check is never retried blindly: the step waits in doubt until a
person says whether its effect happened (`resolve`). The payment system of these tests
(tests/support/payment_tools.py) is not idempotent: `payments.jsonl` holds one line per payment
made, so a blind retry would show as a second line.
"""

from __future__ import annotations

from typing import Any

import pytest
import pytest_asyncio
from conftest import harness_for
from support import PAYMENT_TOOLS
from support.payment_tools import payments
from temporalio.client import WorkflowFailureError

from stratagem.common.errors import DecisionRefusedError
from stratagem.domain.decisions import kinds
from stratagem.domain.ledger import EventKind, StepStatus
from stratagem.domain.ledger_events import InDoubtResolved
from stratagem.domain.run_levels import RUN_LEVEL, Change
from stratagem.domain.run_types import ApproveInput, DecisionKind, Phase, ResolveInput
from stratagem.tools import ToolRegistry

pytestmark = pytest.mark.workflow

INVOICE = {"invoice": "INV-7", "amount": 1200}


@pytest_asyncio.fixture
async def bank(time_env, tmp_path):
    async with harness_for(time_env, tmp_path, ToolRegistry.from_modules([PAYMENT_TOOLS])) as harness:
        harness.workspace.mkdir(parents=True, exist_ok=True)
        yield harness


def plan(tool: str) -> dict[str, Any]:
    return {
        "goal": "pay invoice INV-7",
        "steps": [
            {"id": "pay", "title": "Pay INV-7", "tool": tool, "args": INVOICE, "approvers": ["dana"]},
            {
                "id": "note",
                "title": "Note it",
                "tool": "note",
                "args": {"text": "paid ${pay.key}"},
                "depends_on": ["pay"],
            },
        ],
    }


def script(harness, *words: str, check: tuple[str, ...] = ()) -> None:
    (harness.workspace / "payment_script").write_text("\n".join(words))
    (harness.workspace / "check_script").write_text("\n".join(check))


def in_doubt(status) -> bool:
    return any(p.kind is DecisionKind.in_doubt for p in status.pending)


async def approved(harness, tool: str):
    """A run of `plan(tool)` with its plan and its payment step approved by dana."""
    run = await harness.start(plan(tool), approvers=["dana", "lee"])
    await harness.wait_for(run, lambda s: s.phase is Phase.awaiting_approval)
    await run.approve(ApproveInput(by="dana", revision=1))
    await harness.wait_for(run, lambda s: any(p.kind is DecisionKind.step_approval for p in s.pending))
    await run.approve(ApproveInput(by="dana", step_id="pay"))
    return run


async def resolve(run, by: str = "dana", step_id: str = "pay", **word: Any):
    return await run.decide(kinds.RESOLVE, ResolveInput(by=by, step_id=step_id, **word))


async def test_a_lost_answer_of_an_irreversible_payment_waits_in_doubt_and_a_person_says_it_happened(bank):
    assert RUN_LEVEL >= Change.IN_DOUBT.level
    script(bank, "unknown")
    run = await approved(bank, "pay_blind")
    status = await bank.wait_for(run, in_doubt)
    assert status.steps.in_doubt == 1 and status.phase is Phase.running
    [pending] = [p for p in status.pending if p.kind is DecisionKind.in_doubt]
    assert pending.step_id == "pay"
    assert pending.prompt == (
        "step 'pay' called pay_blind(invoice=\"INV-7\", amount=1200) and its outcome is unknown "
        "(OutcomeUnknown: the connection dropped after the payment was sent): did it happen?"
    )
    [paid] = payments(bank.workspace)
    assert paid["attempt"] == 1

    # Attacks, each refused, and nothing paid again meanwhile.
    with pytest.raises(DecisionRefusedError, match="mallory is not on this run's approver list"):
        await resolve(run, by="mallory", happened=True)
    with pytest.raises(DecisionRefusedError, match="lee may not decide on step 'pay': its approvers are dana"):
        await resolve(run, by="lee", happened=False)
    with pytest.raises(DecisionRefusedError, match="step 'note' is not in doubt; the steps in doubt are: pay"):
        await resolve(run, step_id="note", happened=True)
    with pytest.raises(DecisionRefusedError, match="does not match the return type of tool 'pay_blind'"):
        await resolve(run, happened=True, output={"invoice": "INV-7"})
    with pytest.raises(DecisionRefusedError, match="an output goes with happened"):
        await resolve(run, happened=False, output={"invoice": "INV-7"})
    ledger = await run.ledger()
    assert ledger.steps["pay"].status is StepStatus.in_doubt
    assert [e.kind for e in ledger.events].count(EventKind.in_doubt_resolved) == 0

    given = {"invoice": "INV-7", "amount": 1200, "key": paid["key"]}
    outcome = await resolve(run, happened=True, output=given, reason="the bank statement shows it")
    assert outcome.message == "step 'pay' succeeded with the output given; the run goes on"
    result = await run.result()
    assert result.status is Phase.succeeded
    ledger = await run.ledger()
    assert ledger.steps["pay"].output == given and result.outputs["note"] == f"paid {paid['key']}"
    assert len(payments(bank.workspace)) == 1
    kinds_of_pay = [e.kind for e in ledger.events if e.step_id == "pay"]
    assert kinds_of_pay[-3:] == [EventKind.step_in_doubt, EventKind.in_doubt_resolved, EventKind.step_succeeded]
    word = next(e for e in ledger.events if e.kind is EventKind.in_doubt_resolved)
    assert word.actor == "dana" and "the bank statement shows it" in word.message
    assert word.details_as(InDoubtResolved).happened is True
    # Once resolved, the word is not taken again.
    with pytest.raises(DecisionRefusedError):
        await resolve(run, happened=False)


async def test_a_person_saying_it_did_not_happen_runs_the_step_again(bank):
    script(bank, "unpaid", "ok")
    run = await approved(bank, "pay_blind")
    await bank.wait_for(run, in_doubt)
    assert payments(bank.workspace) == []
    outcome = await resolve(run, happened=False)
    assert outcome.message == "step 'pay' runs again"
    result = await run.result()
    assert result.status is Phase.succeeded
    [paid] = payments(bank.workspace)
    assert paid["attempt"] == 2  # a fresh attempt, numbered after the one in doubt
    ledger = await run.ledger()
    assert ledger.steps["pay"].attempts == 2
    assert ledger.steps["pay"].output["key"] == paid["key"]


async def test_the_reconcile_check_finds_the_payment_and_the_tool_does_not_run_again(bank):
    script(bank, "unknown")
    run = await approved(bank, "pay_invoice")
    result = await run.result()
    assert result.status is Phase.succeeded
    [paid] = payments(bank.workspace)
    ledger = await run.ledger()
    assert ledger.steps["pay"].output == {"invoice": "INV-7", "amount": 1200, "key": paid["key"]}
    assert [e.kind for e in ledger.events].count(EventKind.step_reconciled) == 1
    assert ledger.steps["pay"].attempts == 2  # the lost one, and the check that found it
    assert not any(e.kind is EventKind.step_in_doubt for e in ledger.events)


async def test_a_check_that_finds_nothing_lets_the_tool_run(bank):
    script(bank, "unpaid", "ok")
    run = await approved(bank, "pay_invoice")
    result = await run.result()
    assert result.status is Phase.succeeded
    [paid] = payments(bank.workspace)
    assert paid["attempt"] == 2
    ledger = await run.ledger()
    assert not any(e.kind is EventKind.step_reconciled for e in ledger.events)


async def test_a_check_that_fails_is_tried_again_before_the_tool_and_never_pays_twice(bank):
    script(bank, "unknown", check=("raise",))
    run = await approved(bank, "pay_invoice")
    result = await run.result()
    assert result.status is Phase.succeeded
    assert len(payments(bank.workspace)) == 1
    ledger = await run.ledger()
    assert ledger.steps["pay"].attempts == 3  # lost, the check failed, the check found it
    assert [e.kind for e in ledger.events].count(EventKind.step_reconciled) == 1


async def test_a_known_failure_is_retried_as_before_and_fails_the_step_after_its_attempts(bank):
    script(bank, "declined", "declined", "declined")
    run = await bank.start(
        {
            "goal": "g",
            "steps": [{"id": "pay", "title": "Pay", "tool": "pay_checked", "args": INVOICE, "max_attempts": 3}],
        },
        auto_approve=True,
        on_failure="fail",
    )
    with pytest.raises(WorkflowFailureError):
        await run.result()
    assert (await run.status()).phase is Phase.failed
    ledger = await run.ledger()
    assert ledger.steps["pay"].attempts == 3
    assert "the bank declined invoice INV-7" in (ledger.steps["pay"].error or "")
    assert payments(bank.workspace) == []


async def test_with_no_attempt_left_the_check_alone_runs_and_an_unpaid_step_fails(bank):
    script(bank, "unpaid")
    run = await bank.start(
        {
            "goal": "g",
            "steps": [{"id": "pay", "title": "Pay", "tool": "pay_checked", "args": INVOICE, "max_attempts": 1}],
        },
        auto_approve=True,
        on_failure="fail",
    )
    with pytest.raises(WorkflowFailureError):
        await run.result()
    assert (await run.status()).phase is Phase.failed
    assert payments(bank.workspace) == []
    ledger = await run.ledger()
    assert "the connection dropped before the bank answered" in (ledger.steps["pay"].error or "")


async def test_a_level_9_run_retries_an_unknown_outcome_blindly_as_it_always_did(bank):
    from stratagem.domain.plan import Author, AuthorKind, PlanDraft
    from stratagem.domain.run_types import RunInput, RunOptions

    script(bank, "unknown", "ok")
    run = await bank.start_input(
        RunInput(
            plan=PlanDraft.model_validate(
                {"goal": "g", "steps": [{"id": "pay", "title": "Pay", "tool": "pay_checked", "args": INVOICE}]}
            ),
            author=Author(kind=AuthorKind.human, name="alice"),
            options=RunOptions(auto_approve=True),
            level=Change.IN_DOUBT.level - 1,
        )
    )
    result = await run.result()
    assert result.status is Phase.succeeded
    assert len(payments(bank.workspace)) == 2  # why level 10 exists


async def test_a_run_cancelled_while_a_step_is_in_doubt_leaves_it_in_doubt_and_pays_nothing_more(bank):
    script(bank, "unknown")
    run = await approved(bank, "pay_blind")
    await bank.wait_for(run, in_doubt)
    await run.cancel()
    with pytest.raises(WorkflowFailureError):
        await run.result()
    ledger = await run.ledger()
    # Nobody said whether it happened: the ledger does not pretend to know.
    assert ledger.steps["pay"].status is StepStatus.in_doubt
    assert ledger.steps["note"].status is StepStatus.cancelled
    assert ledger.events[-1].kind is EventKind.run_cancelled
    assert len(payments(bank.workspace)) == 1


async def test_a_check_that_cannot_tell_with_no_attempt_left_puts_the_step_in_doubt(bank):
    script(bank, "unknown", check=("raise",))
    plan = {
        "goal": "g",
        "steps": [{"id": "pay", "title": "Pay", "tool": "pay_checked", "args": INVOICE, "max_attempts": 1}],
    }
    run = await bank.start(plan, auto_approve=True)
    status = await bank.wait_for(run, in_doubt)
    [pending] = status.pending
    assert "OutcomeUnknown: the connection dropped after the payment was sent" in pending.prompt
    assert "its reconcile check could not tell: ConnectionError: the bank's lookup is down" in pending.prompt
    [paid] = payments(bank.workspace)
    await resolve(run, by="ops", happened=True, output={k: paid[k] for k in ("invoice", "amount", "key")})
    result = await run.result()
    assert result.status is Phase.succeeded and result.outputs["pay"]["key"] == paid["key"]
    assert len(payments(bank.workspace)) == 1
