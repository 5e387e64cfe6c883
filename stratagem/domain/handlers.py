"""The names of the run workflow's queries, and how a decision's signal is named after its
update: the workflow registers its handlers under these, and the client and the tests call them
by these. A name here is part of the wire contract (a run in flight answers to the names it
started with), so changing one is a breaking change, like renaming an activity.

A decision kind's update name is its row's in the table of kinds
(stratagem.domain.decisions.kinds), which the workflow, the interceptors and the client read;
a new kind adds nothing here."""

from __future__ import annotations

# The six decisions that shipped before the table of kinds carried their names: each an update
# (with a validator, answering with an outcome) and a signal of the same name plus "_signal"
# (fire-and-forget, for tools that can only signal). Nothing in the package reads these any more;
# they stay, unchanged, for the tests that pin the wire names runs in flight answer to
# (tests/test_public_api.py, tests/test_decision_kinds.py) and the tests' signing helper, and for
# callers that imported them.
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
