"""Decisions sent as signals, signed as the CLI and the Python client sign them (stratagem.common.signing):
with the deciding person's key in the test session's home, which the tests' workers trust."""

from __future__ import annotations

from typing import Any

from stratagem.client import RunHandle, decision_signer
from stratagem.domain.decisions.kinds import BY_SIGNAL


async def send_signed(run: RunHandle, signal: str, decision: Any) -> None:
    """Send `decision` as the signal `signal` (e.g. approve_signal), signed for the decision it carries."""
    signed = decision_signer(decision.by).sign(run.id, BY_SIGNAL[signal].update, decision, await run.execution())
    await run.handle.signal(signal, signed)
