"""Which tool errors leave an effect unknown, how a reconcile check must be written, and how a step
in doubt is put to people (issue #41): the pure parts, without a server."""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from stratagem.common.errors import DecisionRefusedError, ToolError, ToolRegistrationError
from stratagem.domain.catalog import ToolCatalog
from stratagem.domain.in_doubt import check_resolve, doubt, prompt
from stratagem.domain.ledger import Ledger, StepRecord, StepStatus
from stratagem.domain.plan import Plan
from stratagem.domain.run_types import ResolveInput, RunOptions, RunState
from stratagem.tools import OutcomeUnknown, ToolContext, ToolRegistry, fence, tool
from stratagem.tools.outcome import outcome_unknown

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "error",
    [
        OutcomeUnknown("sent, no answer"),
        TimeoutError(),
        TimeoutError(),
        ConnectionResetError(),
        httpx.ReadTimeout("read"),
        httpx.ReadError("read"),
        httpx.RemoteProtocolError("closed without a response"),
    ],
)
def test_errors_after_sending_leave_the_outcome_unknown(error):
    assert outcome_unknown(error)


@pytest.mark.parametrize(
    "error",
    [
        RuntimeError("declined"),
        ToolError("declined"),
        ConnectionRefusedError(),
        httpx.ConnectError("refused"),
        httpx.ConnectTimeout("connect"),
        ValueError("bad amount"),
    ],
)
def test_errors_before_sending_or_of_the_tool_itself_are_known_failures(error):
    assert not outcome_unknown(error)


def test_a_reconcile_check_takes_only_the_tools_parameters_or_a_context():
    def by_key(ctx: ToolContext) -> dict | None:
        return None

    def by_invoice(invoice: str, context: ToolContext) -> dict | None:
        return None

    for check in (by_key, by_invoice):

        @tool(reconcile=check)
        def pay(invoice: str, amount: int, ctx: ToolContext) -> dict:
            return {}

    def by_reference(reference: str) -> dict | None:
        return None

    with pytest.raises(ToolRegistrationError) as refused:

        @tool(reconcile=by_reference)
        def pay_again(invoice: str, amount: int) -> dict:
            return {}

    assert str(refused.value) == (
        "tool 'pay_again': reconcile check by_reference takes 'reference', which is not a parameter of the tool "
        "(amount, invoice) nor a ToolContext"
    )

    def anything(**kwargs) -> None:
        return None

    with pytest.raises(ToolRegistrationError, match="must name each parameter it takes"):

        @tool(reconcile=anything)
        def pay_more(invoice: str) -> dict:
            return {}

    with pytest.raises(ToolRegistrationError, match="reconcile= takes a function, not 'no'"):

        @tool(reconcile="no")  # type: ignore[arg-type]
        def pay_less(invoice: str) -> dict:
            return {}


def test_the_check_is_called_with_the_arguments_it_names_and_the_calls_context(tmp_path: Path):
    seen = []

    def find(invoice: str, ctx: ToolContext) -> dict | None:
        seen.append((invoice, ctx.idempotency_key))
        return {"invoice": invoice} if invoice == "INV-7" else None

    @tool(reconcile=find)
    def pay(invoice: str, amount: int, ctx: ToolContext) -> dict:
        raise AssertionError("the check runs, not the tool")

    registry = ToolRegistry()
    registry.register(pay)
    context = ToolContext(run_id="r", step_id="pay", revision=1, attempt=2, workspace=tmp_path, execution_id="e")
    assert asyncio.run(registry.reconcile("pay", {"invoice": "INV-7", "amount": 5}, context)) == {"invoice": "INV-7"}
    assert asyncio.run(registry.reconcile("pay", {"invoice": "INV-8", "amount": 5}, context)) is None
    assert seen == [("INV-7", "r/e/pay/r1"), ("INV-8", "r/e/pay/r1")]
    assert registry.catalog().get("pay").reconcile is True


def _state(approvers: list[str] | None = None) -> RunState:
    plan = Plan.model_validate(
        {
            "goal": "pay",
            "revision": 1,
            "author": {"kind": "human", "name": "alice"},
            "steps": [
                {"id": "pay", "title": "Pay", "tool": "pay", "args": {"invoice": "INV-7"}, "approvers": ["dana"]},
                {"id": "note", "title": "Note", "tool": "note", "args": {}, "depends_on": ["pay"]},
            ],
        }
    )
    ledger = Ledger(run_id="r")
    ledger.steps = {s.id: StepRecord(step_id=s.id) for s in plan.steps}
    ledger.revisions = [plan]
    catalog = ToolCatalog.model_validate(
        {
            "tools": [
                {
                    "name": "pay",
                    "description": "",
                    "parameters": {},
                    "irreversible": True,
                    "returns": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]},
                }
            ]
        }
    )
    return RunState(
        run_id="r",
        execution_id="e",
        goal="pay",
        plans=[plan],
        ledger=ledger,
        options=RunOptions(approvers=approvers),
        catalog=catalog,
    )


def test_a_step_in_doubt_is_asked_about_once_and_resolved_only_as_its_rules_allow():
    state = _state(approvers=["dana", "lee"])
    assert state.plan is not None
    step, record = state.plan.step("pay"), state.ledger.steps["pay"]
    word = ResolveInput(by="dana", step_id="pay", happened=True, output={"id": "P-1"})
    with pytest.raises(DecisionRefusedError, match="step 'pay' is not in doubt; the steps in doubt are: none"):
        check_resolve(state, word)
    now = datetime(2026, 11, 27, tzinfo=UTC)
    pending = doubt(state, record, step, {"invoice": "INV-7", "token": "sk-" + "a" * 40}, "the worker was lost", 2, now)
    assert record.status is StepStatus.in_doubt and record.attempts == 2
    assert "sk-aaaa" not in pending.prompt and pending.prompt.startswith("step 'pay' called pay(invoice=\"INV-7\", ")
    assert pending.prompt.endswith("and its outcome is unknown (the worker was lost): did it happen?")
    # A continue-as-new carrying the question does not ask it again.
    assert doubt(state, record, step, {}, "again", 1, now) is pending and len(state.pending) == 1
    check_resolve(state, word)
    for refused, why in [
        (word.model_copy(update={"by": "mallory"}), "mallory is not on this run's approver list"),
        (word.model_copy(update={"by": "lee"}), "lee may not decide on step 'pay'"),
        (word.model_copy(update={"output": {"ref": 1}}), "refused the output, which does not match the return type"),
        (word.model_copy(update={"happened": False}), "an output goes with happened"),
        (word.model_copy(update={"step_id": "note"}), "step 'note' is not in doubt; the steps in doubt are: pay"),
    ]:
        with pytest.raises(DecisionRefusedError, match=why):
            check_resolve(state, refused)
    check_resolve(state, word.model_copy(update={"output": None}))  # an output that is not known


def test_the_question_shows_long_arguments_cut():
    state = _state()
    assert state.plan is not None
    text = prompt(state.plan.step("pay"), {"memo": "x" * 5000}, "a timeout")
    assert len(text) < 1200 and "..." in text


async def test_a_check_waits_for_an_earlier_call_of_its_key_that_is_still_running(tmp_path: Path) -> None:
    started, release, paid = threading.Event(), threading.Event(), []

    def look(invoice: str) -> dict | None:
        return {"paid": invoice} if paid else None

    @tool(reconcile=look)
    def pay(invoice: str) -> dict:
        started.set()
        release.wait(10)
        paid.append(invoice)
        return {"paid": invoice}

    @tool
    def plain(invoice: str) -> str:
        started.set()
        release.wait(10)
        return invoice

    registry = ToolRegistry()
    registry.register(pay)
    registry.register(plain)
    context = ToolContext(run_id="r", step_id="pay", revision=1, attempt=1, workspace=tmp_path, execution_id="e")
    call = asyncio.create_task(registry.invoke("pay", {"invoice": "I-1"}, context))
    await asyncio.to_thread(started.wait, 10)
    call.cancel()  # the attempt ends (its time limit, a cancellation); its thread goes on
    with pytest.raises(asyncio.CancelledError):
        await call
    assert fence.running(context.idempotency_key) == 1
    check = asyncio.create_task(registry.reconcile("pay", {"invoice": "I-1"}, context))
    await asyncio.sleep(0.3)
    assert not check.done()  # it waits: looking now would miss the payment about to be made
    release.set()
    assert await check == {"paid": "I-1"}
    assert paid == ["I-1"] and fence.running(context.idempotency_key) == 0
    # A tool without a check or irreversibility is not held: its retries stay Temporal's.
    started.clear()
    release.clear()
    other = asyncio.create_task(registry.invoke("plain", {"invoice": "I-2"}, context))
    await asyncio.to_thread(started.wait, 10)
    assert fence.running(context.idempotency_key) == 0
    release.set()
    assert await other == "I-2"
