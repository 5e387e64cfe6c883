"""What a finished run's page shows first: its outcome, its final outputs (the plan's last steps,
whose outputs the run returns), its synthesis, the reason it failed or was rejected, its usage."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from stratagem.client import RunHandle
from stratagem.domain.ledger import Ledger
from stratagem.domain.plan import Plan
from stratagem.domain.run_types import RunStatus
from stratagem.domain.scheduling import sink_steps
from stratagem.domain.stored import describe, is_stored

FOLD_CHARS = 1200  # a longer value is folded, its beginning shown
PREVIEW_CHARS = 160  # of its first line, in the fold's summary
RESULT_WAIT = 2.0  # a run that has just finished closes within moments; the page does not wait longer


def shown(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, indent=2, ensure_ascii=False, default=str)


def folded(text: str) -> dict[str, Any]:
    first = text.strip().split("\n", 1)[0]
    return {"text": text, "fold": len(text) > FOLD_CHARS, "preview": first[:PREVIEW_CHARS], "chars": len(text)}


async def result_view(run: RunHandle, status: RunStatus, plan: Plan | None, ledger: Ledger) -> dict[str, Any] | None:
    """The result panel of a finished run (None while it runs). The outputs come from the ledger,
    as the run returned them; a stored one is a link to the output route, never loaded here."""
    if not status.phase.finished:
        return None
    synthesis = None
    try:
        synthesis = (await asyncio.wait_for(run.result(), RESULT_WAIT)).synthesis
    except Exception:
        pass  # cancelled or terminated (no result), or a worker that does not answer: the rest still shows
    outputs = []
    for step_id in sink_steps(plan) if plan is not None else []:
        record = ledger.steps.get(step_id)
        if record is None:
            continue
        value = record.output
        entry: dict[str, Any] = {"step_id": step_id, "status": record.status.value, "error": record.error or ""}
        if is_stored(value):
            entry |= {"stored": describe(value), **folded("")}
        elif value is None:
            entry |= {"stored": "", **folded("")}
        else:
            entry |= {"stored": "", **folded(shown(value))}
        outputs.append(entry)
    return {
        "phase": status.phase.value,
        "reason": status.reason or "",
        "usage": status.usage,
        "synthesis": folded(synthesis) if synthesis else None,
        "outputs": outputs,
    }


__all__ = ["result_view"]
