"""The names of the run workflow's updates, signals and queries: the workflow registers its
handlers under these, and the client, the decision checks and the tests call them by these.
A name here is part of the wire contract (a run in flight answers to the names it started
with), so changing one is a breaking change, like renaming an activity."""

from __future__ import annotations

# Decisions, each an update (with a validator, answering with an outcome) and a signal of the
# same name plus "_signal" (fire-and-forget, for tools that can only signal).
APPROVE = "approve"
REJECT = "reject"
REVISE = "revise"
ANSWER = "answer"
BUDGET = "budget"
REPAIR = "repair"
DECISION_UPDATES = frozenset({APPROVE, REJECT, REVISE, ANSWER, BUDGET, REPAIR})


def signal_name(update: str) -> str:
    """The signal that carries the same decision as `update`."""
    return f"{update}_signal"


DECISION_SIGNALS = {signal_name(update): update for update in DECISION_UPDATES}

# Queries.
STATUS = "status"
PLAN = "plan"
LEDGER = "ledger"
PENDING = "pending"
EVENTS = "events"
CATALOG = "catalog"
