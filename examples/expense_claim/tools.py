"""Tools of the expense-claim example: read a claim, post it to the ledger, reimburse it.

Everything is local files under the workspace; no network, no API key.
"""

from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel

from stratagem import ToolError
from stratagem.tools import ToolContext, tool

CLAIMS = {
    "EC-7": {"employee": "Ada Lovelace", "amount_eur": 184, "category": "travel", "period": "2026-10"},
    "EC-8": {"employee": "Grace Hopper", "amount_eur": 42, "category": "meals", "period": "2026-11"},
}
# The accounting periods still open for posting: October has been closed.
OPEN_PERIODS = ("2026-11", "2026-12")


class Claim(BaseModel):
    claim_id: str
    employee: str
    amount_eur: int
    category: Literal["travel", "meals", "equipment"]
    period: str


class Posting(BaseModel):
    posting_id: str
    period: str
    amount_eur: int


@tool(side_effects=False)
def read_claim(claim_id: str) -> Claim:
    """Read an expense claim: who, how much, what for, and the accounting period it belongs to."""
    if claim_id not in CLAIMS:
        raise ToolError(f"there is no claim {claim_id}", retryable=False)
    return Claim(claim_id=claim_id, **CLAIMS[claim_id])


@tool
def post_to_ledger(claim_id: str, amount_eur: int, period: str, ctx: ToolContext) -> Posting:
    """Post the approved amount of a claim to the general ledger, in an open accounting period.
    Posts once per idempotency key."""
    if period not in OPEN_PERIODS:
        raise ToolError(
            f"accounting period {period} is closed; post to an open one ({', '.join(OPEN_PERIODS)})",
            retryable=False,
        )
    folder = ctx.workspace / "ledger"
    folder.mkdir(parents=True, exist_ok=True)
    posting = Posting(posting_id=f"P-{claim_id}-{period}", period=period, amount_eur=amount_eur)
    path = folder / f"{posting.posting_id}.json"
    if not path.exists():
        path.write_text(json.dumps({**posting.model_dump(), "key": ctx.idempotency_key}))
    return posting


@tool(risk="high")
def reimburse(employee: str, amount_eur: int, reference: str, ctx: ToolContext) -> str:
    """Pay an employee back. Moves money: risk high whatever a plan says, so the step waits for
    its own approval. Pays once per idempotency key."""
    folder = ctx.workspace / "payments"
    folder.mkdir(parents=True, exist_ok=True)
    ledger = folder / "reimbursements.csv"
    rows = ledger.read_text().splitlines() if ledger.exists() else []
    if not any(row.endswith(ctx.idempotency_key) for row in rows):
        with ledger.open("a") as handle:
            handle.write(f"{employee},{amount_eur},{reference},{ctx.idempotency_key}\n")
    return f"EUR {amount_eur} to {employee} ({reference})"
