"""The names of the run workflow's queries, and how a decision's signal is named after its
update: the workflow registers its handlers under these, and the client and the tests call them
by these. A name here is part of the wire contract (a run in flight answers to the names it
started with), so changing one is a breaking change, like renaming an activity.

A decision kind's update name is its row's in the table of kinds
(stratagem.domain.decisions.kinds), which the workflow, the interceptors and the client read;
a new kind adds nothing here."""

from __future__ import annotations


def signal_name(update: str) -> str:
    """The signal that carries the same decision as `update`."""
    return f"{update}_signal"


# Queries.
STATUS = "status"
PLAN = "plan"
LEDGER = "ledger"
PENDING = "pending"
EVENTS = "events"
CATALOG = "catalog"
