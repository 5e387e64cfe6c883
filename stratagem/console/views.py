"""What the console's pages show, computed from a run's plan and ledger, without asking the run.

The templates (`page_templates`) get their values from here (the graph's columns, a decision's
form fields, the diff against the approved revision), and a form's fields are read back here
(`answer_from`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib.resources import files
from typing import Any

from fastapi.templating import Jinja2Templates
from markupsafe import Markup

from stratagem.domain.answers import answer_fields, coerce
from stratagem.domain.decisions import quorum, waiting_for
from stratagem.domain.ledger import Ledger
from stratagem.domain.plan import Plan, Step, StepKind
from stratagem.domain.plan_diff import diff_lines, diff_revisions
from stratagem.domain.run_reports import undo_steps
from stratagem.domain.run_types import Compensating, DecisionKind, PendingDecision
from stratagem.domain.visible_text import written_out


def page_templates() -> Jinja2Templates:
    templates = Jinja2Templates(directory=str(files("stratagem.console") / "templates"))
    # Every value a page shows is written out where it would reorder or hide text (bidi controls,
    # C0/C1 controls), as the CLI does: autoescaping stops markup, not a right-to-left override.
    templates.env.finalize = _written_out
    return templates


def _written_out(value: Any) -> Any:
    """A page's value with reordering characters written out; already-escaped markup stays markup."""
    if isinstance(value, Markup):
        return Markup(written_out(str(value)))
    return written_out(value) if isinstance(value, str) else value


def safe_next(target: str) -> str:
    """Only a path on this console: a login must not redirect elsewhere."""
    return target if target.startswith("/") and not target.startswith("//") else "/"


def one_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


def parse_json(raw: Any, what: str) -> Any:
    try:
        return json.loads(str(raw))
    except json.JSONDecodeError as exc:
        raise ValueError(f"the {what} are not JSON: {exc.msg} at column {exc.colno}") from None


def answer_schema(plan: Plan | None, step_id: str | None) -> dict[str, Any] | None:
    try:
        return plan.step(step_id).answer_schema if plan is not None and step_id else None
    except KeyError:
        return None


WHOLE = ""
"""The key of a problem with an answer as a whole (an untyped answer, or one no field names)."""


@dataclass
class AnswerDraft:
    """What a person typed into one step's answer form, and what is wrong with it, by field
    (stratagem.console.answer_form reads it; the run page shows it again)."""

    step_id: str
    values: dict[str, str] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)


def decision_view(
    pending: PendingDecision,
    plan: Plan | None,
    typed: dict[str, str] | None = None,
    errors: dict[str, str] | None = None,
) -> dict[str, Any]:
    """What a pending decision's form needs: for a typed answer, one input per field of its schema,
    labelled by its `title` and helped by its `description`; for a gated tool step, one per
    argument, filled with what it will run. `typed` and `errors` bring back a form that was refused:
    an answer's values and problems at their fields (stratagem.console.answer_form), a step's
    changed arguments and the refusal (under WHOLE)."""
    schema = answer_schema(plan, pending.step_id) if pending.kind is DecisionKind.human_answer else None
    typed, errors = typed or {}, errors or {}
    fields = [
        {
            "name": name,
            "label": field_label(name, sub),
            "type": sub.get("type", "string"),
            "choices": [c for c in sub.get("enum", []) if isinstance(c, str | int | float | bool)],
            "required": required,
            "description": sub.get("description", "") if isinstance(sub.get("description"), str) else "",
            "value": typed.get(name, ""),
            "error": errors.get(name, ""),
        }
        for name, sub, required in answer_fields(schema)
    ]
    args = argument_fields(pending, typed)
    return {
        "pending": pending,
        "what": waiting_for(pending),
        "fields": fields,
        "args": args,
        "repair_args": repair_args(pending, plan),
        "doubt": in_doubt_call(pending, plan),
        "error": errors.get(WHOLE, ""),
        "answer": {"value": typed.get(WHOLE, ""), "error": errors.get(WHOLE, "")},
        "quorum": quorum.progress(pending),
    }


def argument_fields(pending: PendingDecision, typed: dict[str, str]) -> list[dict[str, Any]]:
    """A gated tool step's arguments as the approval form's fields (`arg.NAME`): a string as it
    is, any other value as JSON (`json.NAME`), so a number stays a number; the text shown rides
    along (`was.NAME`), and only what differs from it is sent."""
    if pending.kind is not DecisionKind.step_approval or pending.preview is None or pending.preview.args is None:
        return []
    fields = []
    for name, value in pending.preview.args.items():
        shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        text = typed.get(name, shown)
        fields.append(
            {"name": name, "shown": shown, "value": text, "json": not isinstance(value, str), "long": len(text) > 60}
        )
    return fields


def changed_arguments(form: dict[str, Any]) -> dict[str, Any] | None:
    """The arguments an approval form changed, each read as its field says (JSON or text); None
    if none changed. ValueError, naming the argument, for JSON that does not parse."""
    changed: dict[str, Any] = {}
    for key, raw in form.items():
        if not key.startswith("arg."):
            continue
        name, text = key.removeprefix("arg."), _lines(raw)
        if text == _lines(form.get(f"was.{name}", "")):
            continue
        if form.get(f"json.{name}"):
            try:
                changed[name] = json.loads(text)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{name}: not JSON: {exc.msg} at column {exc.colno}") from None
        else:
            changed[name] = text
    return changed or None


def typed_arguments(form: dict[str, Any]) -> dict[str, str]:
    """What was changed in an approval form's argument fields, to give back with a refusal (a
    field left as it was shows what the step will run then, which may have changed meanwhile)."""
    return {
        name: _lines(raw)
        for key, raw in form.items()
        if key.startswith("arg.") and _lines(raw) != _lines(form.get(f"was.{(name := key.removeprefix('arg.'))}", ""))
    }


def _lines(raw: Any) -> str:
    """A form field's text with a browser's line ends (a textarea sends CRLF) as they were shown."""
    return str(raw).replace("\r\n", "\n")


def repair_args(pending: PendingDecision, plan: Plan | None) -> str:
    """A repair form's arguments start as the failed tool step's current ones, so a person changes
    the one that was wrong; empty for anything else (nothing to retry with)."""
    if pending.kind is not DecisionKind.repair or plan is None or pending.step_id is None:
        return ""
    step = next((s for s in plan.steps if s.id == pending.step_id), None)
    if step is None or step.kind is not StepKind.tool:
        return ""
    return json.dumps(step.args, indent=2, ensure_ascii=False)


def does(step: Step) -> str:
    """What a step does, in full: the tool and its exact arguments, or what a model may call."""
    if step.tool:
        return f"{step.tool}({', '.join(f'{k}={json.dumps(v, ensure_ascii=False)}' for k, v in step.args.items())})"
    return f"{step.kind.value}" + (f" · may call {', '.join(step.tools)}" if step.tools else "")


def in_doubt_call(pending: PendingDecision, plan: Plan | None) -> str:
    """An in-doubt step's form shows the call whose effect is in doubt: what the person checks
    in the world (the payment system, the booking) before saying whether it happened."""
    if pending.kind is not DecisionKind.in_doubt or plan is None or pending.step_id is None:
        return ""
    step = next((s for s in plan.steps if s.id == pending.step_id), None)
    return does(step) if step is not None else ""


def compensation_view(compensation: Compensating | None, ledger: Ledger) -> dict[str, Any] | None:
    """A run that gave up on its goal and undoes its effects: why, the undo steps (ordinary steps
    of its compensation revision, each with its status), and the steps whose effects stay."""
    if compensation is None:
        return None
    undo = []
    for step, undoes in undo_steps(ledger, compensation):
        record = ledger.steps.get(step.id)
        status = (
            record.status.value
            if record is not None and ledger.revisions[-1].revision == compensation.revision
            else "pending"
        )
        undo.append(
            {
                "step": step,
                "undoes": undoes,
                "does": does(step),
                "status": status,
                "error": record.error if record else None,
            }
        )
    return {
        "reason": compensation.reason,
        "revision": compensation.revision,
        "undo": undo,
        "cannot_undo": compensation.cannot_undo,
    }


def field_label(name: str, schema: dict[str, Any]) -> str:
    """A field's label: its schema's `title`, else its name."""
    title = schema.get("title")
    return title.strip() if isinstance(title, str) and title.strip() else name


def answer_from(form: dict[str, Any], schema: dict[str, Any] | None) -> Any:
    """The answer a form carries: one input per field of the step's schema (`field.NAME`, each
    converted as its schema says, as the terminal does), or one value, JSON or text."""
    fields = answer_fields(schema)
    if not fields:
        text = str(form.get("answer", ""))
        return parse_json(text, "answer") if text.strip().startswith(("{", "[")) else text
    answer: dict[str, Any] = {}
    for name, sub, _ in fields:
        text = str(form.get(f"field.{name}", "")).strip()
        if text:
            try:
                answer[name] = coerce(text, sub)
            except ValueError as exc:
                raise ValueError(f"{name}: {exc}") from None
    return answer


def graph_columns(plan: Plan, ledger: Ledger) -> list[list[dict[str, Any]]]:
    """The plan as columns by depth (a step sits right of everything it waits for), each step with its status."""
    depth: dict[str, int] = {}
    by_id = {s.id: s for s in plan.steps}

    def level(step_id: str, seen: frozenset[str] = frozenset()) -> int:
        if step_id in depth:
            return depth[step_id]
        step = by_id.get(step_id)
        if step is None or step_id in seen:
            return 0
        value = 1 + max((level(d, seen | {step_id}) for d in step.depends_on), default=-1)
        depth[step_id] = value
        return value

    columns: dict[int, list[dict[str, Any]]] = {}
    for step in plan.steps:
        record = ledger.steps.get(step.id)
        # What a reviewer approves, in full: the tool and its exact arguments, or what a model may call.
        columns.setdefault(level(step.id), []).append(
            {"step": step, "status": record.status.value if record else "pending", "record": record, "does": does(step)}
        )
    return [columns[k] for k in sorted(columns)]


def diff_text(approved: Plan, plan: Plan) -> list[str]:
    return diff_lines(diff_revisions(approved, plan))


__all__ = [
    "WHOLE",
    "AnswerDraft",
    "argument_fields",
    "changed_arguments",
    "compensation_view",
    "in_doubt_call",
    "typed_arguments",
    "answer_from",
    "answer_schema",
    "decision_view",
    "diff_text",
    "field_label",
    "graph_columns",
    "one_line",
    "page_templates",
    "parse_json",
    "safe_next",
]
