"""Bulk runs: `stratagem run PROCESS --inputs rows.csv` starts one run of the process per row.

Each run's id derives from the process, its version and the row's values (`process_run_id`), and
an id a run already had is refused rather than reused, so running the same command again starts
nothing twice: those rows are reported as already started. A row whose inputs do not check is
reported by its line and not started; the others start. The summary counts each outcome, and the
command exits 2 if any row was refused.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from temporalio.client import Client

from stratagem.cli import render
from stratagem.cli.errors import USAGE
from stratagem.cli.process_inputs import Row, checked
from stratagem.common.errors import PlanValidationError, RunAlreadyStartedError
from stratagem.domain.catalog import ToolCatalog
from stratagem.domain.process import ProcessSpec, render_plan
from stratagem.domain.run_types import RunOptions
from stratagem.domain.validation import validate_plan
from stratagem.process_runs import InputsRefusedError, process_run_id, start_process

STARTED, ALREADY, REFUSED = "started", "already started", "refused"


@dataclass
class Outcome:
    line: int
    outcome: str
    run_id: str | None = None
    problems: list[str] = field(default_factory=list)

    def json(self) -> dict[str, Any]:
        found: dict[str, Any] = {"line": self.line, "outcome": self.outcome, "run_id": self.run_id}
        if self.problems:
            found["problems"] = self.problems
        return found


@dataclass
class Batch:
    """What every row's run shares: the process, where and how runs start, and the command line's
    `--input` values, which win over each row's."""

    spec: ProcessSpec
    fixed: dict[str, Any]
    time_zone: str
    task_queue: str
    options: RunOptions
    started_by: str
    catalog: ToolCatalog
    rules: dict[str, Any]
    rpc_timeout: timedelta | None = None


async def start_row(client: Client, batch: Batch, row: Row) -> Outcome:
    """Check one row as a single run is checked (its inputs, then its rendered plan against the
    tools), then start it under the id its values give."""
    given = {**row.values, **batch.fixed}
    values, problems = checked(batch.spec, given, list(row.problems), batch.time_zone)
    if problems:
        return Outcome(row.line, REFUSED, problems=problems)
    draft = render_plan(batch.spec, values)
    if draft is not None:
        try:
            validate_plan(draft, batch.catalog, **batch.rules)
        except PlanValidationError as exc:
            return Outcome(row.line, REFUSED, problems=[str(exc)])
    run_id = process_run_id(batch.spec, values)
    try:
        await start_process(
            client,
            batch.spec,
            given,
            task_queue=batch.task_queue,
            options=batch.options,
            run_id=run_id,
            started_by=batch.started_by,
            time_zone=batch.time_zone,
            once=True,
            rpc_timeout=batch.rpc_timeout,
        )
    except RunAlreadyStartedError:
        return Outcome(row.line, ALREADY, run_id=run_id)
    except InputsRefusedError as exc:
        return Outcome(row.line, REFUSED, problems=exc.problems)
    return Outcome(row.line, STARTED, run_id=run_id)


async def start_rows(client: Client, batch: Batch, rows: list[Row], *, json_mode: bool) -> int:
    """Start every row in order, saying what became of each as it goes (JSON: all at the end)."""
    outcomes: list[Outcome] = []
    for row in rows:
        outcome = await start_row(client, batch, row)
        outcomes.append(outcome)
        if not json_mode:
            said = "; ".join(outcome.problems) if outcome.outcome == REFUSED else outcome.run_id
            render.console.print(f"line {outcome.line}: {outcome.outcome}: {said}", markup=False)
    counts = {kind: sum(1 for o in outcomes if o.outcome == kind) for kind in (STARTED, ALREADY, REFUSED)}
    if json_mode:
        render.emit_json(
            {
                "process": batch.spec.name,
                "version": batch.spec.version,
                "rows": [o.json() for o in outcomes],
                "started": counts[STARTED],
                "already_started": counts[ALREADY],
                "refused": counts[REFUSED],
            }
        )
    else:
        render.console.print(
            f"{len(outcomes)} row{'s' if len(outcomes) != 1 else ''} of {batch.spec.label}: "
            f"{counts[STARTED]} started, {counts[ALREADY]} already started, {counts[REFUSED]} refused",
            markup=False,
        )
        if counts[STARTED]:
            render.console.print(f"see them with: stratagem list --process {batch.spec.name}", markup=False)
    return USAGE if counts[REFUSED] else 0
