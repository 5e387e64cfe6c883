"""Readable terminal output: plans, statuses, progress lines, results."""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Iterable
from typing import Any

from rich.cells import cell_len
from rich.console import Console
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from stratagem.domain.answers import answer_fields, describe_field
from stratagem.domain.catalog import ToolCatalog
from stratagem.domain.decisions import quorum
from stratagem.domain.graph import topological_order
from stratagem.domain.ledger import Decision, EventKind, Ledger, LedgerEvent, StepStatus, ToolCallRecord, ToolCallStatus
from stratagem.domain.plan import PlanDraft, StepKind
from stratagem.domain.process import describe_inputs
from stratagem.domain.risk import risk_label
from stratagem.domain.run_reports import undo_steps
from stratagem.domain.run_types import Compensating, DecisionKind, PendingDecision, RunResult, RunStatus
from stratagem.domain.stored import describe, is_stored
from stratagem.domain.usage import Budget, UsageTotals
from stratagem.domain.visible_text import written_out


def plain(text: str) -> str:
    """`text` safe to show: every control character written out (`\\x1b`), so it is seen, not obeyed."""
    return written_out(text)


class PlainConsole(Console):
    """A console for text that models and users wrote: no markup, no emoji codes, no control characters.

    Plan titles, arguments, actor names and messages come from untrusted hands: as rich markup a
    title ending in "[conceal]" hid the tool list from the reviewer, and "[/]" crashed the CLI.
    Styling is applied with Text objects instead. Strings are cleaned when rendered, and every
    segment again when written, so text inside tables and trees is covered too.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(markup=False, emoji=False, highlight=False, soft_wrap=True, **kwargs)

    def render_str(self, text: str, **kwargs: Any) -> Text:
        kwargs["markup"] = False
        kwargs["emoji"] = False
        return super().render_str(plain(text), **kwargs)

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        safe = (segment if segment.control else Segment(plain(segment.text), segment.style) for segment in buffer)
        return super()._render_buffer(safe)


# soft_wrap: long lines (paths, hints to copy) are not broken when output is not a terminal.
# Piped or redirected (`status | less`, a file, CI), a table is laid out for 160 columns, not the
# 80 rich assumes: at 80 the plan table's seven columns wrapped into ten-character strips.
# COLUMNS still decides when it is set.
_PIPED_WIDTH = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 160
console = PlainConsole(width=_PIPED_WIDTH)
errors = PlainConsole(stderr=True, width=_PIPED_WIDTH)

STATUS_STYLE = {
    StepStatus.pending: "dim",
    StepStatus.running: "cyan",
    StepStatus.succeeded: "green",
    StepStatus.failed: "red",
    StepStatus.skipped: "yellow",
    StepStatus.cancelled: "yellow",
    StepStatus.in_doubt: "bold magenta",
}

_EVENT_MARK = {
    EventKind.step_started: "▶",
    EventKind.step_succeeded: "✔",
    EventKind.step_failed: "✘",
    EventKind.plan_proposed: "✎",
    EventKind.plan_approved: "✔",
    EventKind.plan_rejected: "✘",
    EventKind.replan_requested: "↻",
    EventKind.run_succeeded: "★",
    EventKind.run_failed: "✘",
    EventKind.tool_call_refused: "⛔",
    EventKind.budget_exhausted: "⏸",
    EventKind.step_in_doubt: "?",
    EventKind.compensation_planned: "↺",
    EventKind.run_compensated: "↺",
    EventKind.run_compensation_failed: "✘",
}


def plan_table(
    plan: PlanDraft, ledger: Ledger | None = None, *, title: str | None = None, catalog: ToolCatalog | None = None
) -> Table:
    """The plan in dependency order: what each step does, after what, at what risk (the tool's
    floor counted, when the run's `catalog` is known)."""
    table = Table(title=title, title_justify="left", show_lines=False, expand=True)
    # fold: a long word wraps onto the next line instead of ending in "…", in every column (at 40
    # columns the risk read "appr…"); what a step does takes most of the width.
    table.add_column("step", overflow="fold", max_width=24)
    table.add_column("kind", overflow="fold")
    table.add_column("does", overflow="fold", ratio=1, min_width=16)  # the rest of the width
    table.add_column("after", overflow="fold", max_width=20)
    table.add_column("risk", overflow="fold", max_width=10)
    if ledger is not None:
        table.add_column("status", overflow="fold", max_width=10)
        table.add_column("usage", overflow="fold", max_width=22)
    order = topological_order({s.id: s.depends_on for s in plan.steps})
    by_id = {s.id: s for s in plan.steps}
    for step_id in order:
        step = by_id[step_id]
        # In full, wrapped in the cell: a cut argument once hid the amount of a payment.
        does = step.title
        if step.kind is StepKind.tool:
            does += f"\n{step.tool}({_args(step.args)})"
        elif step.instructions:
            does += f"\n{step.instructions}"
        if step.kind is StepKind.llm:
            # What the executor may do is part of what a reviewer approves.
            does += f" · tools: {', '.join(step.tools) if step.tools else 'none'}"
            if step.tier:
                does += f" · tier {step.tier}"
        risk = risk_label(step, catalog)
        row: list[str | Text] = [step.id, step.kind.value, does, ", ".join(step.depends_on) or "-", risk]
        if ledger is not None:
            record = ledger.steps.get(step.id)
            status = record.status if record else StepStatus.pending
            row.append(Text(status.value, STATUS_STYLE[status]))
            row.append(step_usage(record.usage, record.tool_calls) if record else "")
        table.add_row(*row)
    return table


def step_usage(usage: UsageTotals | None, tool_calls: list[ToolCallRecord]) -> str:
    if usage is None:
        return ""
    text = f"{usage.calls} call{'s' if usage.calls != 1 else ''}, {usage.tokens:,} tok"
    if usage.unpriced_calls == 0:
        text += f", ${usage.cost_usd:.4f}"
    refused = sum(1 for c in tool_calls if c.status is ToolCallStatus.refused)
    if tool_calls:
        text += f"; tools {len(tool_calls)}" + (f" ({refused} refused)" if refused else "")
    return text


def budget_line(budget: Budget) -> str:
    parts = []
    if budget.tokens is not None:
        parts.append(f"{budget.tokens:,} tokens")
    if budget.cost_usd is not None:
        parts.append(f"${budget.cost_usd:,.2f}")
    if budget.model_calls is not None:
        parts.append(f"{budget.model_calls:,} model calls")
    if budget.wall_clock_seconds is not None:
        parts.append(f"{budget.wall_clock_seconds:,.0f} s wall clock")
    return ", ".join(parts)


def _args(args: dict[str, Any]) -> str:
    return ", ".join(f"{k}={json.dumps(v, default=str, ensure_ascii=False)}" for k, v in args.items())


def event_line(event: LedgerEvent, *, message: bool = True) -> Text:
    """One event on one line; `message=False` leaves out what follows it anyway (a question)."""
    mark = _EVENT_MARK.get(event.kind, "·")
    line = Text(f"{event.at:%H:%M:%S} {mark} {event.kind.value.replace('_', ' ')}")
    if event.step_id:
        line.append(" ").append(plain(event.step_id), "bold")
    if event.actor:
        line.append(f" by {plain(event.actor)}")
    if event.message and message:
        line.append(f" — {plain(event.message)}")
    return line


def decision_line(decision: Decision) -> str:
    """One decision and whether its author was verified: signed (a key the worker trusts) or not."""
    what = f"{decision.action.value} " + (
        f"step {decision.step_id}" if decision.step_id else f"revision {decision.revision}"
    )
    if decision.call_id is not None:
        what += f" call {decision.call_id}"
    if decision.covers:
        what += f" (covering {', '.join(decision.covers)})"
    proof = (
        f"signed by {decision.signed_by}"
        if decision.signed_by
        else ("automatic" if decision.via in ("auto", "policy") else "unsigned")
    )
    return f"decision: {what} by {decision.by} ({proof}, via {decision.via})"


def carried_text(pending: PendingDecision) -> str:
    """A fork's carried outputs, each in full: the approver sees what the run goes on with."""
    if not pending.carried:
        return ""
    lines = ["carried over from the source run, not run here:"]
    for step_id, value in pending.carried.items():
        lines.append(f"  {step_id} = {describe(value) if is_stored(value) else readable(value)}")
    return "\n".join(lines) + "\n"


def _quorum(pending: PendingDecision) -> str:
    """Who approved so far and who still may (quorum), and who may not (four eyes), on a line."""
    said = quorum.progress(pending)
    return f"\n  {plain(said)}" if said else ""


def decision_hint(run_id: str, pending: PendingDecision, schema: dict[str, Any] | None = None) -> str:
    """What a person can do about `pending`, as commands; `schema`: a question's answer schema."""
    if pending.kind.value == "plan_approval":
        return (
            carried_text(pending)
            + (f"{plain(pending.standing)}\n" if pending.standing else "")
            + (
                f"waiting for approval of revision {pending.revision}: "
                f"stratagem approve {run_id} --revision {pending.revision}  (or reject / revise)"
            )
            + _quorum(pending)
        )
    if pending.kind.value == "step_approval":
        hint = f"step '{pending.step_id}' waits for approval: stratagem approve {run_id} --step {pending.step_id}"
        if pending.preview is None:
            return hint + _quorum(pending)
        hint += f" --digest {pending.preview.digest[:12]}"  # approves only what is shown below
        # Every value it will run with, in full: the console folds long lines, nothing cuts them.
        shown = "".join(f"\n  {line}" for line in pending.preview.lines())
        edit = (
            "\n  to change arguments as you approve it, add --args with them: --args JSON"
            if pending.preview.tool
            else ""
        )
        return f"{hint}{_quorum(pending)}\n  it will run:{shown}\n  (digest {pending.preview.digest[:12]}...){edit}"
    if pending.kind.value == "tool_call_approval" and pending.call is not None:
        call = f"--step {pending.step_id} --call {pending.call.call_id}"
        return (
            f"{pending.prompt}\n  approve: stratagem approve {run_id} {call}\n"
            f"  reject:  stratagem reject {run_id} {call} --reason TEXT  (the step is told, and goes on)"
        )
    if pending.kind.value == "repair":
        step = pending.step_id
        lines = [f"waiting for a repair: {pending.prompt}"]
        if step is not None:
            lines += [
                f"  retry:  stratagem retry {run_id} {step} [--args JSON]",
                f"  skip:   stratagem skip {run_id} {step} --output JSON",
            ]
            lines += [f"  ask again: stratagem ask-again {run_id} {human}" for human in pending.ask_again]
        lines += [f"  revise: stratagem revise {run_id} PLAN_FILE", f"  stop:   stratagem stop {run_id} --reason TEXT"]
        lines.append(f"  compensate (give up, undo what ran): stratagem compensate {run_id} --reason TEXT")
        return "\n".join(lines)
    if pending.kind is DecisionKind.in_doubt:
        step = pending.step_id
        return (
            f"in doubt: {pending.prompt}\n"
            f"  it happened:        stratagem resolve {run_id} {step} --happened [--output JSON]\n"
            f"  it did not happen:  stratagem resolve {run_id} {step} --not-happened  (the step runs again)"
        )
    if pending.kind.value == "budget":
        return (
            f"paused: {pending.prompt}\n"
            f"  raise it with: stratagem budget {run_id} --tokens N --cost USD --calls N --seconds N  (any of them)\n"
            f"  or stop with:  stratagem budget {run_id} --stop --reason TEXT"
        )
    asks = f"step '{pending.step_id}' asks: {pending.prompt}\n"
    fields = answer_fields(schema)
    if not fields:
        return (
            asks
            + f"  answer with: stratagem answer {run_id} {pending.step_id} TEXT   (add --json-value if TEXT is JSON)"
        )
    # A typed answer: a sentence would be refused, so the hint shows the JSON it takes.
    template = json.dumps({name: _placeholder(sub) for name, sub, _ in fields}, ensure_ascii=False)
    described = "; ".join(
        f"{name}{'' if required else ' (optional)'}: {describe_field(sub)}"
        + (f", {sub['description']}" if isinstance(sub.get("description"), str) else "")
        for name, sub, required in fields
    )
    return asks + (
        f"  answer with: stratagem answer {run_id} {pending.step_id} {shlex.quote(template)} --json-value\n"
        f"  fields: {described}\n"
        f"  or run `stratagem wait {run_id}` at a terminal, which asks field by field"
    )


def _placeholder(schema: dict[str, Any]) -> Any:
    """A value of the kind a field takes, for the example answer a hint shows."""
    if schema.get("enum"):
        return schema["enum"][0]
    kinds: dict[str, Any] = {"integer": 0, "number": 0, "boolean": True, "array": [], "object": {}}
    return kinds.get(str(schema.get("type")), "...")


def answer_schema_of(ledger: Ledger | None, pending: PendingDecision) -> dict[str, Any] | None:
    """The answer schema of the human step a question comes from, if it has one."""
    if ledger is None or pending.kind is not DecisionKind.human_answer or pending.step_id is None:
        return None
    try:
        return ledger.revision(pending.revision).step(pending.step_id).answer_schema
    except KeyError:  # a revision or step this ledger does not hold
        return None


def status_view(
    status: RunStatus, ledger: Ledger | None, plan: PlanDraft | None, catalog: ToolCatalog | None = None
) -> None:
    console.print(
        Text.assemble((plain(status.run_id), "bold"), f"  {status.phase.value}  revision {status.revision or '-'}")
    )
    console.print(f"goal: {status.goal}")
    if status.process is not None:
        inputs = describe_inputs(status.process.inputs)
        console.print(f"process: {status.process.label}" + (f" · inputs: {inputs}" if inputs else ""))
    counts = status.steps
    console.print(
        f"steps: {counts.succeeded} succeeded, {counts.running} running, {counts.pending} pending, "
        f"{counts.failed} failed, {counts.skipped} skipped, {counts.cancelled} cancelled"
        + (f", {counts.in_doubt} in doubt" if counts.in_doubt else "")
        + f"; replans {status.replans}/{status.max_replans}"
    )
    if status.phase.value == "planning" and status.revision is None:
        console.print(f"the planner is making the first revision; follow it with: stratagem wait {status.run_id}")
    if status.workspace:
        console.print(f"workspace: {status.workspace}")
    if status.reason:
        console.print(f"reason: {status.reason}")
    if status.usage.calls or status.budget.is_set:
        console.print(f"model usage: {status.usage.describe()}")
    if status.budget.is_set:
        console.print(f"budget: {budget_line(status.budget)}")
    if ledger is not None:
        for decision in ledger.decisions[-5:]:
            console.print(decision_line(decision))
    if plan is not None:
        console.print(plan_table(plan, ledger, catalog=catalog))
    if status.compensation is not None:
        console.print("\n".join(compensation_lines(status.compensation, ledger)))
    for pending in status.pending:
        console.print(
            escalation_line(pending) + decision_hint(status.run_id, pending, answer_schema_of(ledger, pending))
        )


def compensation_lines(compensation: Compensating, ledger: Ledger | None) -> list[str]:
    """A run that gave up on its goal: why, its undo steps (ordinary steps of its compensation
    revision) with their statuses, and the effects that stay because nothing undoes them."""
    lines = [f"compensation (revision {compensation.revision}): {compensation.reason}"]
    current = ledger is not None and ledger.revisions and ledger.revisions[-1].revision == compensation.revision
    for step, undoes in undo_steps(ledger, compensation) if ledger is not None else []:
        record = ledger.steps.get(step.id) if ledger is not None and current else None
        what = f"{step.tool}({_args(step.args)})" if step.tool else step.title
        of = f" (undoes {', '.join(undoes)})" if undoes else ""
        lines.append(f"  undo {step.id}{of}: {what} — {record.status.value if record else 'pending'}")
    if compensation.cannot_undo:
        lines.append(f"  effects that stay (nothing undoes them): {', '.join(compensation.cannot_undo)}")
    return lines


def escalation_line(pending: PendingDecision) -> str:
    """Where an escalated decision went (level 9): its group may decide it too."""
    if not pending.escalated_to:
        return ""
    return f"escalated to {pending.escalated_to}: its members may decide this too\n"


def result_view(result: RunResult) -> None:
    if result.status.value == "succeeded":
        console.print(
            Text.assemble(
                ("succeeded", "green"),
                f" (revision {result.revision}, {result.replans} replan{'s' if result.replans != 1 else ''})",
            )
        )
        for step_id, output in result.outputs.items():
            if is_stored(output):
                text = f"{describe(output)} (print it with: stratagem output {result.run_id} {step_id})"
            else:
                text = (
                    output if isinstance(output, str) else json.dumps(output, indent=1, ensure_ascii=False, default=str)
                )
            console.print(Text.assemble((plain(step_id), "bold"), ": ", plain(text)))
        if result.synthesis:
            console.print(f"\n{result.synthesis}")
    else:
        style = "red" if result.status.value == "compensation_failed" else "yellow"
        console.print(Text.assemble((result.status.value, style), f": {result.reason}"))


def cell_width(text: str) -> int:
    """Columns `text` takes on a terminal (a CJK character or an emoji takes two)."""
    return cell_len(text)


def readable(value: Any) -> str:
    """A value for people: text as it is, anything else as indented JSON with its own letters
    (Zoë, not Zo\\u00eb)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def transcript_text(messages: list[Any]) -> str:
    """An executor's conversation for people: one block per message, headed by who spoke, with
    the tools an assistant turn called and whether a tool's answer was an error."""
    blocks = []
    for number, message in enumerate(messages, 1):
        if not isinstance(message, dict):
            blocks.append(f"── {number} ──\n{readable(message)}")
            continue
        head = f"── {number}. {message.get('role') or '?'}"
        if message.get("tool_call_id"):
            head += f" (answers {message['tool_call_id']})"
        if message.get("is_error"):
            head += " · error"
        lines = [head + " ──"]
        if message.get("content"):
            lines.append(str(message["content"]))
        for call in message.get("tool_calls") or []:
            if not isinstance(call, dict):
                continue
            arguments = call.get("arguments")
            shown = (
                json.dumps(arguments, ensure_ascii=False, default=str)
                if arguments is not None
                else call.get("raw_arguments", "")
            )
            lines.append(f"→ calls {call.get('name')}({shown})  [{call.get('id')}]")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def emit_json(data: Any) -> None:
    """Machine output: one JSON document on stdout, nothing else."""
    print(json.dumps(data, default=str, sort_keys=True))


def note(message: str, *, json_mode: bool = False) -> None:
    """Human-facing remarks; in --json mode they go to stderr so stdout stays one JSON document."""
    (errors if json_mode else console).print(message)
