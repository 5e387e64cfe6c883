"""Whether a failed tool call may have had its effect: the difference between "it did not
happen" (retried as any failure) and "it may have happened" (an unknown outcome, reconciled or
decided by a person before any retry: docs/plans.md, "Attempts of unknown outcome").

A tool says so itself by raising `OutcomeUnknown` ("I sent it and the connection dropped"). A few
errors of Python and of httpx say so too, because they happen only after a request went out: a
read that timed out or failed, a server that closed the connection before answering, a connection
reset. Errors before sending (a refused connection, a connect timeout, bad arguments) are known
failures: nothing reached the other side. A tool that catches one of these and raises its own
error decides for itself, as its error says.
"""

from __future__ import annotations

import httpx


class OutcomeUnknown(Exception):
    """Raise it from a tool when the request may have reached the other side but no answer came
    back (sent, then the connection dropped or timed out). The step's attempt then counts as one
    of unknown outcome: its tool's `reconcile` check runs before any retry, and an irreversible
    tool without one waits for a person to say whether the effect happened."""


# Sent, then no answer: the effect may have happened.
_SENT_NO_ANSWER: tuple[type[BaseException], ...] = (
    OutcomeUnknown,
    TimeoutError,  # asyncio.TimeoutError is the same class
    ConnectionResetError,
    httpx.ReadError,
    httpx.ReadTimeout,
    httpx.RemoteProtocolError,
)


def outcome_unknown(exc: BaseException) -> bool:
    """Whether a tool's error leaves its effect unknown (see the module's docstring)."""
    return isinstance(exc, _SENT_NO_ANSWER)
