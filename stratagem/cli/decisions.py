"""The commands that decide on a run: approve, reject, revise, answer, budget, the repairs
(retry, skip, ask-again, stop), each sending its kind of decision (stratagem.domain.decisions.kinds),
and cancel; who decides (`reviewer`) and the key they sign with (keygen); and reading the limits
and answers a person types, shared with the questions asked at a terminal.

Each deciding command's options are written beside its handler, and `DECIDING` gives both by the
verb's name (stratagem.cli.parser_decisions adds them in the table's order), so a new kind's
command is this file's alone."""

from __future__ import annotations

import argparse
import getpass
import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from temporalio.client import WorkflowExecutionStatus

from stratagem.cli import render
from stratagem.cli.arguments import positive
from stratagem.cli.errors import CliError
from stratagem.cli.listing import EXECUTION_STATUS
from stratagem.cli.session import find_run, hosted_run, open_client, settings
from stratagem.common.config import stratagem_home
from stratagem.common.errors import ConfigError
from stratagem.common.signing import SIGNING_KEY_ENV, Keyring, Signer
from stratagem.domain.answers import json_problem
from stratagem.domain.decision_inputs import CallTarget, StepTarget
from stratagem.domain.decisions import Kind, kinds
from stratagem.domain.redaction import masked
from stratagem.domain.run_types import (
    AnswerInput,
    ApproveInput,
    BudgetInput,
    DecisionInput,
    DecisionOutcome,
    RejectInput,
    RepairAction,
    RepairInput,
    ReviseInput,
)
from stratagem.io.plan_files import load_plan_file


def reviewer(args: argparse.Namespace) -> str:
    """Who decides: the signing key's name when one is set (STRATAGEM_SIGNING_KEY), else --by or the
    login, whose key in the home signs (made now, the first time, as ssh-keygen makes one)."""
    signer = Signer.from_env()
    if signer is None:
        by: str = args.by or getpass.getuser()
        keyring = Keyring.of_home()
        if not keyring.has(by):
            try:
                keyring.signer(by)
            except ConfigError as exc:
                raise CliError(f"{exc}; choose another name with --by") from None
            render.note(
                f"made a signing key for {by} ({keyring.folder / (by + '.key')}); your decisions are signed with it, "
                "and workers started from this home trust it",
                json_mode=bool(getattr(args, "json", False)),
            )
        return by
    if args.by and args.by != signer.name:
        raise CliError(
            f"--by {args.by} does not match the signing key's name '{signer.name}' ({SIGNING_KEY_ENV}); drop --by"
        )
    return signer.name


async def decide(args: argparse.Namespace, kind: Kind, decision: DecisionInput) -> int:
    async with hosted_run(args.run_id) as run:
        outcome = await run.decide(kind, decision)
    return _done(args, run.id, outcome)


def _done(args: argparse.Namespace, run_id: str, outcome: DecisionOutcome) -> int:
    if args.json:
        render.emit_json(outcome.model_dump(mode="json"))
    else:
        render.console.print(f"{run_id}: {outcome.message} (revision {outcome.revision}, {outcome.phase.value})")
    return 0


def _call(args: argparse.Namespace) -> str | None:
    if args.call is not None and args.step is None:
        raise CliError("--call needs --step: a tool call is approved with the step that makes it")
    return args.call


def approve_options(approve: argparse.ArgumentParser) -> None:
    approve.add_argument("run_id")
    approve.add_argument("--revision", type=int, help="refuse if the plan under review is not this revision")
    approve.add_argument("--step", metavar="STEP_ID", help="approve this gated step instead of the plan")
    approve.add_argument("--call", metavar="CALL_ID", help="with --step: approve this tool call of the llm step")
    approve.add_argument(
        "--digest",
        metavar="DIGEST",
        help="with --step: approve only what `status` showed (its digest, or the first 12 characters of it)",
    )
    approve.add_argument(
        "--args",
        metavar="JSON",
        help="with --step: approve the tool step with these arguments changed (a JSON object, or @FILE with one), "
        "merged into those it was shown with; a new revision by you",
    )
    approve.add_argument("--by", metavar="NAME")
    approve.add_argument("--comment", default="")


def changed_args(text: str | None, step: str | None, call: str | None) -> dict[str, Any] | None:
    """`approve --args`: a JSON object, given inline or as @FILE."""
    if text is None:
        return None
    if step is None or call is not None:
        raise CliError("--args goes with --step (and no --call): it changes a gated tool step's arguments")
    if text.startswith("@"):
        try:
            text = Path(text[1:]).read_text()
        except OSError as exc:
            raise CliError(f"--args: cannot read {text[1:]}: {exc.strerror}") from None
    parsed = json_option(text, "--args")
    if not isinstance(parsed, dict):
        raise CliError("--args takes a JSON object, the arguments to change by name (e.g. '{\"amount\": 90}')")
    return parsed


async def cmd_approve(args: argparse.Namespace) -> int:
    edit = changed_args(getattr(args, "args", None), args.step, args.call)
    try:
        decision = ApproveInput(
            by=reviewer(args),
            revision=args.revision,
            step_id=args.step,
            call_id=_call(args),
            comment=args.comment,
            args=edit,
        )
    except ValidationError as exc:
        raise CliError(f"--args: {exc.errors()[0]['msg'].removeprefix('Value error, ')}") from None
    call = decision.target
    if isinstance(call, StepTarget):
        return await _approve_step(args, decision)
    if not isinstance(call, CallTarget):
        return await decide(args, kinds.APPROVE, decision)
    async with hosted_run(args.run_id) as run:
        waiting = next(
            (
                p.call
                for p in await run.pending()
                if p.step_id == call.step_id and p.call and p.call.call_id == call.call_id
            ),
            None,
        )
        if waiting is not None:
            # The approval names the arguments it approves, shown here in full (folded, never cut).
            render.note(f"approving {waiting.tool}({waiting.arguments})", json_mode=args.json)
            decision.digest = waiting.digest or None
        outcome = await run.decide(kinds.APPROVE, decision)
    return _done(args, run.id, outcome)


async def _approve_step(args: argparse.Namespace, decision: ApproveInput) -> int:
    """A gated step is approved as it was shown: what it will run, printed here in full (folded,
    never cut), and the digest of it, which the run compares with what waits when it decides."""
    async with hosted_run(args.run_id) as run:
        waiting = next(
            (p.preview for p in await run.pending() if p.step_id == decision.step_id and p.preview is not None), None
        )
        seen = getattr(args, "digest", None)
        if seen is not None and (len(seen) < 12 or waiting is None or not waiting.digest.startswith(seen)):
            now = f" ({waiting.digest[:12]}... waits)" if waiting is not None else ""
            raise CliError(f"step '{decision.step_id}' changed since it was shown (digest {seen[:12]}...){now}")
        if decision.args is not None:
            if waiting is None or waiting.args is None:
                raise CliError(
                    f"step '{decision.step_id}' is not a tool step waiting for approval: no arguments to change"
                )
            # What it approves is what was shown with the changes in it; the digest stays that of
            # what was shown, so the run refuses the change if the step changed meanwhile.
            before = waiting.args
            merged = waiting.model_copy(update={"args": {**before, **masked(decision.args)}})
            was = ", ".join(
                f"{key} was " + (json.dumps(before[key], ensure_ascii=False) if key in before else "not given")
                for key in decision.args
            )
            shown = "\n  ".join(merged.lines())
            render.note(
                f"approving step '{decision.step_id}' with changed arguments ({was}), to run:\n  {shown}",
                json_mode=args.json,
            )
            decision.digest = waiting.digest
        elif waiting is not None:
            shown = "\n  ".join(waiting.lines())
            render.note(f"approving step '{decision.step_id}', to run:\n  {shown}", json_mode=args.json)
            decision.digest = waiting.digest
        outcome = await run.decide(kinds.APPROVE, decision)
    return _done(args, run.id, outcome)


def reject_options(reject: argparse.ArgumentParser) -> None:
    reject.add_argument("run_id")
    reject.add_argument("--reason", required=True)
    reject.add_argument("--revision", type=int)
    reject.add_argument("--step", metavar="STEP_ID")
    reject.add_argument("--call", metavar="CALL_ID", help="with --step: reject this tool call (the step is told)")
    reject.add_argument("--by", metavar="NAME")


async def cmd_reject(args: argparse.Namespace) -> int:
    decision = RejectInput(
        by=reviewer(args), reason=args.reason, revision=args.revision, step_id=args.step, call_id=_call(args)
    )
    return await decide(args, kinds.REJECT, decision)


def json_option(text: str, option: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CliError(f"{option}: not JSON: {json_problem(exc)}") from None


# The repairs of a run that waits after a failed step: run it again, skip it, ask again, or stop.


def retry_options(retry: argparse.ArgumentParser) -> None:
    retry.add_argument("run_id")
    retry.add_argument("step_id")
    retry.add_argument("--args", metavar="JSON", help="the tool step's new arguments, a JSON object")
    retry.add_argument("--reason", default="")
    retry.add_argument("--by", metavar="NAME")


async def cmd_retry(args: argparse.Namespace) -> int:
    new_args: dict[str, object] | None = None
    if args.args is not None:
        parsed = json_option(args.args, "--args")
        if not isinstance(parsed, dict):
            raise CliError("--args takes a JSON object, the tool's arguments by name")
        new_args = parsed
    decision = RepairInput(
        by=reviewer(args), action=RepairAction.retry, step_id=args.step_id, args=new_args, reason=args.reason
    )
    return await decide(args, kinds.REPAIR, decision)


def skip_options(skip: argparse.ArgumentParser) -> None:
    skip.add_argument("run_id")
    skip.add_argument("step_id")
    skip.add_argument("--output", required=True, metavar="JSON", help="the step's output, as JSON")
    skip.add_argument("--reason", default="")
    skip.add_argument("--by", metavar="NAME")


async def cmd_skip(args: argparse.Namespace) -> int:
    output = json_option(args.output, "--output")
    decision = RepairInput(
        by=reviewer(args), action=RepairAction.skip, step_id=args.step_id, output=output, reason=args.reason
    )
    return await decide(args, kinds.REPAIR, decision)


def ask_again_options(again: argparse.ArgumentParser) -> None:
    again.add_argument("run_id")
    again.add_argument("step_id", help="the human step whose answer a failed step used")
    again.add_argument("--reason", default="")
    again.add_argument("--by", metavar="NAME")


async def cmd_ask_again(args: argparse.Namespace) -> int:
    decision = RepairInput(by=reviewer(args), action=RepairAction.ask_again, step_id=args.step_id, reason=args.reason)
    return await decide(args, kinds.REPAIR, decision)


def stop_options(stop: argparse.ArgumentParser) -> None:
    stop.add_argument("run_id")
    stop.add_argument("--reason", default="")
    stop.add_argument("--by", metavar="NAME")


async def cmd_stop(args: argparse.Namespace) -> int:
    decision = RepairInput(by=reviewer(args), action=RepairAction.stop, reason=args.reason)
    return await decide(args, kinds.REPAIR, decision)


def revise_options(revise: argparse.ArgumentParser) -> None:
    revise.add_argument("run_id")
    revise.add_argument("plan_file")
    revise.add_argument("--revision", type=int, help="the revision your edit is based on")
    revise.add_argument("--reason", default="")
    revise.add_argument("--by", metavar="NAME")


async def cmd_revise(args: argparse.Namespace) -> int:
    draft = load_plan_file(args.plan_file)
    decision = ReviseInput(by=reviewer(args), plan=draft, revision=args.revision, reason=args.reason)
    return await decide(args, kinds.REVISE, decision)


def answer_options(answer: argparse.ArgumentParser) -> None:
    answer.add_argument("run_id")
    answer.add_argument("step_id")
    answer.add_argument("text")
    answer.add_argument("--json-value", action="store_true", help="parse TEXT as JSON")
    answer.add_argument("--by", metavar="NAME")


async def cmd_answer(args: argparse.Namespace) -> int:
    answer: object = args.text
    if args.json_value:
        try:
            answer = json.loads(args.text)
        except json.JSONDecodeError as exc:
            raise CliError(f"--json-value: the answer is not JSON: {json_problem(exc)}") from None
    return await decide(args, kinds.ANSWER, AnswerInput(step_id=args.step_id, answer=answer, by=reviewer(args)))


_LIMIT_NAMES = {"tokens": "tokens", "cost": "cost_usd", "calls": "model_calls", "seconds": "wall_clock_seconds"}


def parse_limits(text: str) -> dict[str, float]:
    """`tokens=200000 cost=5` as BudgetInput fields; a clear error for anything else."""
    limits: dict[str, float] = {}
    for part in text.replace(",", " ").split():
        name, sep, value = part.partition("=")
        if not sep or name not in _LIMIT_NAMES:
            raise CliError(f"'{part}' is not a limit; write name=value with name one of {', '.join(_LIMIT_NAMES)}")
        try:
            number = float(value)
        except ValueError:
            raise CliError(f"'{value}' is not a number (in '{part}')") from None
        if not math.isfinite(number) or number <= 0:
            raise CliError(f"{name} must be a finite number above zero (in '{part}')")
        if name in ("tokens", "calls"):
            if not number.is_integer():
                raise CliError(f"{name} must be a whole number (in '{part}')")
            number = int(number)
        limits[_LIMIT_NAMES[name]] = number
    if not limits:
        raise CliError("give at least one limit, for example tokens=200000")
    return limits


def budget_options(budget: argparse.ArgumentParser) -> None:
    budget.add_argument("run_id")
    budget.add_argument("--tokens", type=positive(int), metavar="N", help="new token limit (input + output)")
    budget.add_argument("--cost", type=positive(float), metavar="USD", help="new cost limit in US dollars")
    budget.add_argument("--calls", type=positive(int), metavar="N", help="new limit on model calls")
    budget.add_argument(
        "--seconds", type=positive(float), metavar="N", help="new wall-clock limit, from the run's start"
    )
    budget.add_argument("--stop", action="store_true", help="end the run instead (it must be waiting on its budget)")
    budget.add_argument("--reason", default="")
    budget.add_argument("--by", metavar="NAME")


async def cmd_budget(args: argparse.Namespace) -> int:
    by = reviewer(args)
    if args.stop:
        if any(v is not None for v in (args.tokens, args.cost, args.calls, args.seconds)):
            raise CliError("--stop ends the run; give it no limits")
        decision = BudgetInput(by=by, stop=True, reason=args.reason or "stopped at the budget")
    else:
        given = {"tokens": args.tokens, "cost": args.cost, "calls": args.calls, "seconds": args.seconds}
        limits = {_LIMIT_NAMES[k]: v for k, v in given.items() if v is not None}
        if not limits:
            raise CliError("give a limit to raise (--tokens, --cost, --calls, --seconds) or --stop")
        decision = BudgetInput.model_validate({"by": by, "reason": args.reason or "", **limits})
    return await decide(args, kinds.BUDGET, decision)


Options = Callable[[argparse.ArgumentParser], None]
# Each deciding command's handler and options, by its verb's name (stratagem.domain.decisions.kinds).
DECIDING: dict[str, tuple[Callable[[argparse.Namespace], Any], Options]] = {
    "approve": (cmd_approve, approve_options),
    "reject": (cmd_reject, reject_options),
    "revise": (cmd_revise, revise_options),
    "answer": (cmd_answer, answer_options),
    "budget": (cmd_budget, budget_options),
    "retry": (cmd_retry, retry_options),
    "skip": (cmd_skip, skip_options),
    "ask-again": (cmd_ask_again, ask_again_options),
    "stop": (cmd_stop, stop_options),
}


async def cmd_cancel(args: argparse.Namespace) -> int:
    client = await open_client(settings())
    run, _ = await find_run(client, args.run_id)
    description = await run.handle.describe()
    if description.status != WorkflowExecutionStatus.RUNNING:
        state = EXECUTION_STATUS.get(description.status, "finished") if description.status else "finished"
        raise CliError(f"run {run.id} has already finished ({state}); there is nothing to cancel")
    await run.cancel()
    render.console.print(f"{run.id}: cancellation requested")
    return 0


async def cmd_keygen(args: argparse.Namespace) -> int:
    """Write a private key (readable by you only) and print the public entry for the workers."""
    signer = Signer.generate(args.name)
    path = Path(args.out) if args.out else stratagem_home() / "keys" / f"{signer.name}.key"
    if path.exists():
        raise CliError(f"{path} already exists; choose another --out or remove it first")
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        raise CliError(f"cannot write {path}: {exc.strerror}") from None
    with os.fdopen(fd, "w") as file:
        file.write(signer.private_line() + "\n")
    if args.json:
        render.emit_json({"name": signer.name, "private_key_file": str(path), "approver_key": signer.public_line()})
    else:
        render.console.print(
            f"private key written to {path} (keep it to yourself); sign with:\n  export {SIGNING_KEY_ENV}={path}"
        )
        render.console.print(
            f"give the workers the public key, in STRATAGEM_APPROVER_KEYS (a person's key) or, for a review "
            f"console that signs for the people it signs in, STRATAGEM_ISSUER_KEYS:\n  {signer.public_line()}"
        )
    return 0
