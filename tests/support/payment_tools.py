"""A payment system that is not idempotent, for the tests of unknown outcomes (tests/test_in_doubt.py,
tests/test_crash_effects.py). Every payment is a line appended to `payments.jsonl` in the workspace, keyed
by nothing, so a blind retry pays twice and the file shows it.

What each call does next is scripted: `payment_script` in the workspace holds one word per call,
taken in order (none left: `ok`):

    ok        pay, and answer
    unknown   pay, then raise OutcomeUnknown (the answer was lost)
    unpaid    raise OutcomeUnknown without paying (the request never reached the system)
    declined  raise a known failure without paying
    block     pay, write `blocked` beside it, then hang (for a worker killed mid-call)

`check_script` scripts the reconcile check the same way (`look`, `raise`).
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from typing_extensions import TypedDict

from stratagem.tools import OutcomeUnknown, ToolContext, tool


class Payment(TypedDict):
    invoice: str
    amount: int
    key: str


def _next(workspace: Path, script: str, default: str) -> str:
    path = workspace / script
    if not path.exists():
        return default
    words = path.read_text().split()
    if not words:
        return default
    path.write_text("\n".join(words[1:]))
    return words[0]


def payments(workspace: Path) -> list[dict]:
    path = workspace / "payments.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _pay(invoice: str, amount: int, ctx: ToolContext) -> Payment:
    ctx.workspace.mkdir(parents=True, exist_ok=True)
    what = _next(ctx.workspace, "payment_script", "ok")
    if what == "declined":
        raise RuntimeError(f"the bank declined invoice {invoice}")
    if what == "unpaid":
        raise OutcomeUnknown("the connection dropped before the bank answered")
    payment = Payment(invoice=invoice, amount=amount, key=ctx.idempotency_key)
    with (ctx.workspace / "payments.jsonl").open("a") as f:
        f.write(json.dumps({**payment, "attempt": ctx.attempt}) + "\n")
    if what == "unknown":
        raise OutcomeUnknown("the connection dropped after the payment was sent")
    if what == "block":
        (ctx.workspace / "blocked").write_text(ctx.idempotency_key)
        while True:  # the worker is killed here, the payment made and no answer given
            time.sleep(1)
    return payment


def find_payment(invoice: str, ctx: ToolContext) -> Payment | None:
    """The payment an earlier attempt of this step made (by its idempotency key), if any."""
    if _next(ctx.workspace, "check_script", "look") == "raise":
        raise ConnectionError("the bank's lookup is down")
    for row in payments(ctx.workspace):
        if row["key"] == ctx.idempotency_key and row["invoice"] == invoice:
            return Payment(invoice=row["invoice"], amount=row["amount"], key=row["key"])
    return None


@tool(irreversible=True, reconcile=find_payment)
def pay_invoice(invoice: str, amount: int, ctx: ToolContext) -> Payment:
    """Pay an invoice (reconcilable: the bank can be asked whether a payment went through)."""
    return _pay(invoice, amount, ctx)


@tool(irreversible=True, reconcile=find_payment)
async def pay_slowly(invoice: str, amount: int, seconds: float, ctx: ToolContext) -> Payment:
    """Pay an invoice the way a distant bank does: `seconds` pass in all, half before the payment
    is made and half before its answer comes back, so a process killed mid-call may have paid or
    not (tests/test_crash_effects.py kills workers and the server at random moments)."""
    await asyncio.sleep(seconds / 2)
    payment = _pay(invoice, amount, ctx)
    await asyncio.sleep(seconds / 2)
    return payment


@tool(irreversible=True, reconcile=find_payment)
def pay_late(invoice: str, amount: int, seconds: float, ctx: ToolContext) -> Payment:
    """Pay after `seconds` in a blocking call, whatever the attempt's time limit: a thread nothing
    can stop, so an attempt that timed out goes on and pays while the next one starts
    (stratagem/tools/fence.py)."""
    time.sleep(seconds)
    return _pay(invoice, amount, ctx)


@tool(irreversible=True)
def pay_blind(invoice: str, amount: int, ctx: ToolContext) -> Payment:
    """Pay an invoice (nothing can tell whether a payment went through)."""
    return _pay(invoice, amount, ctx)


@tool(reconcile=find_payment)
def pay_checked(invoice: str, amount: int, ctx: ToolContext) -> Payment:
    """Pay an invoice without an approval (reconcilable, not irreversible)."""
    return _pay(invoice, amount, ctx)


@tool
def note(text: str, ctx: ToolContext) -> str:
    """Write a note after the payment."""
    ctx.workspace.mkdir(parents=True, exist_ok=True)
    with (ctx.workspace / "notes.txt").open("a") as f:
        f.write(text + "\n")
    return text


@tool
async def pause(seconds: float) -> float:
    """Wait a while (a step beside the payment, which ends after it)."""
    await asyncio.sleep(seconds)
    return seconds
