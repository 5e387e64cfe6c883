"""Asking a person at the terminal for the decisions a run waits on, and acting on the replies:
approve, reject or edit a plan, approve a step, raise or stop a budget, answer a question."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from stratagem.cli import render
from stratagem.cli.decisions import parse_limits
from stratagem.cli.errors import CliError
from stratagem.client import RunHandle
from stratagem.common.errors import DecisionRefusedError, PlanFileError
from stratagem.domain.answers import answer_fields, answer_problem, coerce, describe_field, json_problem
from stratagem.domain.decisions.kinds import WAITS
from stratagem.domain.run_types import (
    AnswerInput,
    ApproveInput,
    BudgetInput,
    DecisionKind,
    PendingDecision,
    RejectInput,
    RepairAction,
    RepairInput,
    ResolveInput,
    ReviseInput,
)
from stratagem.io.plan_files import dump_plan, load_plan_file


class Prompter:
    """Questions at the terminal that never block the event loop.

    stdin is read only when a line is ready (`loop.add_reader`), so progress keeps printing
    while a question is open, a question decided elsewhere can be dropped, one Ctrl-C stops
    everything, and an editor owns the terminal while it runs.
    """

    def __init__(self) -> None:
        self.closed = False
        # The fields of a typed answer the run took before refusing another, by step: asked
        # again, only the refused field is (it once asked every field again).
        self.kept: dict[str, dict[str, Any]] = {}

    async def line(self, timeout: float | None) -> str | None:
        """The next line typed, or None on timeout. End of input closes the prompter."""
        if self.closed:
            await asyncio.sleep(timeout or 0)
            return None
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[str] = loop.create_future()
        descriptor = sys.stdin.fileno()

        def on_readable() -> None:
            if not ready.done():
                ready.set_result(sys.stdin.readline())

        loop.add_reader(descriptor, on_readable)
        try:
            text = await asyncio.wait_for(ready, timeout)
        except TimeoutError:
            return None
        finally:
            loop.remove_reader(descriptor)
        if text == "":
            self.closed = True
            return None
        return text.strip()


def question(pending: PendingDecision, schema: dict[str, Any] | None = None, kept: dict[str, Any] | None = None) -> str:
    """What the terminal asks: the kind's question (stratagem.domain.decisions.kinds.WAITS), then the
    choices `respond` understands."""
    asked = WAITS[pending.kind].question(pending)
    if pending.kind is DecisionKind.plan_approval:
        return render.carried_text(pending) + f"{asked} [a]pprove / [r]eject / [e]dit / [l]ater: "
    if pending.kind is DecisionKind.step_approval:
        return f"{asked} [y]es / [n]o / [l]ater: "
    if pending.kind is DecisionKind.tool_call_approval:
        return f"{asked} [y]es / [n]o (the step is told) / [l]ater: "
    if pending.kind is DecisionKind.repair:
        if pending.step_id is None:
            return f"{asked}\n[e]dit the plan / [s]top the run / [c]ompensate (undo what ran) / [l]ater: "
        again = "".join(f"ask {h} a[g]ain / " for h in pending.ask_again[:1])
        return (
            f"{asked}\n[r]etry / retry with new [a]rguments / [s]kip with an output / {again}[e]dit the plan / "
            "s[t]op the run / [c]ompensate (undo what ran) / [l]ater: "
        )
    if pending.kind is DecisionKind.in_doubt:
        # Neither answer is the default: one counts the step done, the other runs it again.
        return f"{asked}\nits effect [h]appened / did [n]ot happen (it runs again) / [l]ater: "
    if pending.kind is DecisionKind.budget:
        return f"{asked}\nraise it (for example: tokens=200000 cost=5 calls=100 seconds=3600), [s]top, or [l]ater: "
    fields = answer_fields(schema)
    if fields:
        missing = [f for f in fields if f[0] not in (kept or {})]
        name, sub, required = (missing or fields)[0]
        names = ", ".join(n for n, _, _ in fields)
        have = f"; kept: {', '.join(kept)}" if kept else ""
        return (
            f"{asked}\n"
            f"(the answer has the fields {names}: type each, or the whole answer as JSON; empty for later{have})\n"
            f"{_field_question(name, sub, required)}"
        )
    return f"{asked}\n(type the answer; JSON if it starts with {{ or [; empty for later)\n> "


def _label(name: str, schema: dict[str, Any]) -> str:
    """How a field is called: its schema's title, else its name."""
    title = schema.get("title")
    return title.strip() if isinstance(title, str) and title.strip() else name


def _field_question(name: str, schema: dict[str, Any], required: bool) -> str:
    """`title [name] (what it takes, optional) — description: `, as the plan's schema words it."""
    label = f"{_label(name, schema)} [{name}]" if _label(name, schema) != name else name
    about = schema.get("description")
    said = f" — {about}" if isinstance(about, str) and about.strip() else ""
    return f"{label} ({describe_field(schema)}{'' if required else ', optional'}){said}: "


async def _typed_answer(
    first: str, fields: list[tuple[str, dict[str, Any], bool]], prompter: Prompter
) -> dict[str, Any]:
    """The answer's fields, the first from the line already typed, the rest asked one by one.
    A value that cannot be what its field wants is asked again; an optional field may be left empty."""
    answer: dict[str, Any] = {}
    reply: str | None = first
    for name, schema, required in fields:
        while True:
            if reply is None:
                render.console.print(_field_question(name, schema, required), end="", markup=False)
                reply = await prompter.line(timeout=None)
                if reply is None:  # end of input
                    raise CliError("the answer was left unfinished")
            if not reply:
                if not required:
                    break
                # Nothing is chosen for the person: a choice left empty is asked again, saying so.
                if "enum" in schema or schema.get("type") == "boolean":
                    render.errors.print(
                        f"error: {_label(name, schema)}: choose one of {describe_field(schema)}", markup=False
                    )
                else:
                    render.errors.print(f"error: {_label(name, schema)} is required", markup=False)
            else:
                try:
                    value = coerce(reply, schema)
                except ValueError as exc:
                    render.errors.print(f"error: {exc}; try again", markup=False)
                else:
                    # Its bounds (length, range, choices) are checked here, before the run sees it.
                    problem = answer_problem(value, schema, f"'{_label(name, schema)}'")
                    if problem is None:
                        answer[name] = value
                        break
                    render.errors.print(f"error: {problem}; try again", markup=False)
            reply = None
        reply = None
    return answer


async def _reason(prompter: Prompter) -> str:
    render.console.print("reason: ", end="")
    return await prompter.line(timeout=None) or "rejected at the terminal"


async def respond(
    run: RunHandle,
    pending: PendingDecision,
    reply: str,
    by: str,
    prompter: Prompter,
    drafts: dict[int, Path],
    schema: dict[str, Any] | None = None,
) -> str:
    """Act on a reply. Returns "later" when the person deferred the question."""
    choice = reply.lower()
    try:
        if pending.kind is DecisionKind.plan_approval:
            if choice.startswith("a"):
                await run.approve(ApproveInput(by=by, revision=pending.revision))
            elif choice.startswith("r"):
                await run.reject(RejectInput(by=by, revision=pending.revision, reason=await _reason(prompter)))
            elif choice.startswith("e"):
                await edit_plan(run, pending.revision, by, drafts)
            elif choice.startswith("l"):
                return "later"
            else:
                render.console.print("please answer a, r, e or l")
        elif pending.kind is DecisionKind.step_approval:
            if choice.startswith("y"):
                # Bound to what was shown above: if the step would now run anything else, the run refuses it.
                digest = pending.preview.digest if pending.preview is not None else None
                await run.approve(ApproveInput(by=by, step_id=pending.step_id, digest=digest))
            elif choice.startswith("n"):
                await run.reject(RejectInput(by=by, step_id=pending.step_id, reason=await _reason(prompter)))
            elif choice.startswith("l"):
                return "later"
            else:
                render.console.print("please answer y, n or l")
        elif pending.kind is DecisionKind.tool_call_approval:
            assert pending.call is not None
            call = pending.call.call_id
            if choice.startswith("y"):
                # Bound to the arguments shown above: if the call changed meanwhile, the run refuses it.
                digest = pending.call.digest or None
                await run.approve(ApproveInput(by=by, step_id=pending.step_id, call_id=call, digest=digest))
            elif choice.startswith("n"):
                reason = await _reason(prompter)
                await run.reject(RejectInput(by=by, step_id=pending.step_id, call_id=call, reason=reason))
            elif choice.startswith("l"):
                return "later"
            else:
                render.console.print("please answer y, n or l")
        elif pending.kind is DecisionKind.repair:
            return await _repair(run, pending, choice, by, prompter, drafts)
        elif pending.kind is DecisionKind.in_doubt:
            return await _resolve(run, pending, choice, by, prompter)
        elif pending.kind is DecisionKind.budget:
            if choice in ("", "l", "later"):
                return "later"
            if choice in ("s", "stop"):
                await run.budget(BudgetInput(by=by, stop=True, reason=await _reason(prompter)))
            else:
                try:
                    limits = parse_limits(reply)
                except CliError as exc:
                    render.errors.print(f"error: {exc}", markup=False)
                    return "retry"
                await run.budget(BudgetInput.model_validate({"by": by, **limits}))
        else:
            if not reply:
                return "later"
            answer: object = reply
            fields = answer_fields(schema)
            step_id = pending.step_id or ""
            kept = prompter.kept.pop(step_id, {})
            if fields and not reply.startswith("{"):
                missing = [f for f in fields if f[0] not in kept]
                answer = {**kept, **await _typed_answer(reply, missing, prompter)}
            elif schema and not fields and not reply.startswith(("{", "[")):
                try:
                    answer = coerce(reply, schema)
                except ValueError as exc:
                    render.errors.print(f"error: {exc}; try again", markup=False)
                    return "retry"
            elif reply.startswith(("{", "[")):
                try:
                    answer = json.loads(reply)
                except json.JSONDecodeError as exc:
                    render.errors.print(
                        f"error: that answer is not valid JSON: {json_problem(exc)}; try again", markup=False
                    )
                    return "retry"
            try:
                await run.answer(AnswerInput(step_id=step_id, answer=answer, by=by))
            except DecisionRefusedError as exc:
                refused = re.search(r"field '([^'.]+)", str(exc))
                if isinstance(answer, dict) and refused:  # keep what the run did not object to
                    prompter.kept[step_id] = {k: v for k, v in answer.items() if k != refused.group(1)}
                raise
    except DecisionRefusedError as exc:
        render.errors.print(f"error: {exc}", markup=False)
    return "done"


async def _json_line(prompt: str, prompter: Prompter) -> Any:
    """A JSON value typed on one line; asked again until it parses (end of input gives up)."""
    while True:
        render.console.print(prompt, end="", markup=False)
        text = await prompter.line(timeout=None)
        if text is None:
            raise CliError("the repair was left unfinished")
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            render.errors.print(f"error: that is not valid JSON: {json_problem(exc)}; try again", markup=False)


async def _repair(
    run: RunHandle, pending: PendingDecision, choice: str, by: str, prompter: Prompter, drafts: dict[int, Path]
) -> str:
    step = pending.step_id
    if choice.startswith("l") or not choice:
        return "later"
    if choice.startswith("e"):
        await edit_plan(run, pending.revision, by, drafts)
    elif choice.startswith("c"):
        render.console.print("why give up and undo what ran (empty: no reason): ", end="", markup=False)
        reason = await prompter.line(timeout=None) or ""
        await run.repair(RepairInput(by=by, action=RepairAction.compensate, reason=reason))
    elif choice.startswith("t") or (choice.startswith("s") and step is None):
        await run.repair(RepairInput(by=by, action=RepairAction.stop, reason=await _reason(prompter)))
    elif step is None:
        render.console.print("please answer e, s, c or l")
    elif choice.startswith("r"):
        await run.repair(RepairInput(by=by, action=RepairAction.retry, step_id=step))
    elif choice.startswith("a"):
        args = await _json_line("new arguments (a JSON object): ", prompter)
        await run.repair(RepairInput(by=by, action=RepairAction.retry, step_id=step, args=args))
    elif choice.startswith("s"):
        output = await _json_line("the step's output (JSON): ", prompter)
        await run.repair(RepairInput(by=by, action=RepairAction.skip, step_id=step, output=output))
    elif choice.startswith("g") and pending.ask_again:
        human = pending.ask_again[0]
        await run.repair(RepairInput(by=by, action=RepairAction.ask_again, step_id=human))
    else:
        render.console.print("please answer r, a, s, " + ("g, " if pending.ask_again else "") + "e, t, c or l")
    return "done"


async def _resolve(run: RunHandle, pending: PendingDecision, choice: str, by: str, prompter: Prompter) -> str:
    """A person's word on an in-doubt step: it happened (with its output, if they know it), or
    it did not and the step runs again. Only a clear h or n decides; anything else asks again."""
    step = pending.step_id or ""
    if choice.startswith("l") or not choice:
        return "later"
    if choice.startswith("h"):
        output = None
        while True:
            render.console.print("its output, if you know it (JSON; empty: none): ", end="", markup=False)
            text = await prompter.line(timeout=None)
            if text is None:
                raise CliError("the word on the step was left unfinished")
            try:
                output = json.loads(text) if text else None
                break
            except json.JSONDecodeError as exc:
                render.errors.print(f"error: that is not valid JSON: {json_problem(exc)}; try again", markup=False)
        await run.resolve(ResolveInput(by=by, step_id=step, happened=True, output=output))
    elif choice.startswith("n"):
        await run.resolve(ResolveInput(by=by, step_id=step, happened=False))
    else:
        render.console.print("please answer h, n or l")
    return "done"


async def edit_plan(run: RunHandle, revision: int, by: str, drafts: dict[int, Path]) -> None:
    """Open $EDITOR on the plan under review; a saved, valid plan becomes the next revision.

    An edit that cannot be used is kept, and the next edit reopens it, so no work is lost."""
    path = drafts.get(revision)
    if path is None or not path.exists():
        plan = await run.plan()
        if plan is None:
            return
        draft = plan.draft().model_copy(update={"reason": ""})  # the reason for *this* edit, which the reviewer writes
        succeeded = sorted(
            sid for sid, record in (await run.ledger()).steps.items() if record.status.value == "succeeded"
        )
        header = (
            f"# Revision {revision} of run {run.id}. Edit the steps, then write why in `reason:` and save;\n"
            "# Nothing changes until a valid plan is saved; a broken edit is kept for the next `e`.\n"
            + (
                f"# Steps that already succeeded keep their results and do not run again: {', '.join(succeeded)}.\n"
                if succeeded
                else ""
            )
        )
        text = dump_plan(draft)
        if "\nreason:" not in "\n" + text:
            text += "reason: ''\n"
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", prefix=f"{run.id}-r{revision}-", delete=False) as handle:
            handle.write(header + text)
            path = drafts[revision] = Path(handle.name)
    editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
    try:
        status = await asyncio.to_thread(subprocess.call, [*shlex.split(editor), str(path)])
    except OSError as exc:
        render.errors.print(f"error: cannot start the editor '{editor}': {exc.strerror}; set EDITOR", markup=False)
        return
    if status != 0:
        render.errors.print(
            f"error: the editor exited with status {status}; the plan was not changed (your edit is kept in {path})",
            markup=False,
        )
        return
    try:
        draft = load_plan_file(path)
        reason = draft.reason.strip() or "edited in the terminal"
        outcome = await run.revise(ReviseInput(by=by, plan=draft, revision=revision, reason=reason))
    except (PlanFileError, DecisionRefusedError) as exc:
        render.errors.print(f"error: {exc}\nyour edit is kept in {path}; choose e to fix it", markup=False)
        return
    path.unlink(missing_ok=True)
    drafts.pop(revision, None)
    render.console.print(outcome.message)
