"""A human step's answer form in the console: read field by field, checked against the step's
answer schema before it is sent, and, when it or the run refuses it, shown again with what was
typed and each problem beside its field (a redirect to the run page would lose both).

A choice is never preselected: a field with `enum` (or yes/no) starts on "choose one", and one left
there is refused at the field, as a required text left empty is. The run checks the answer again
(its update validator): this only says where the problem is.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import HTTPException, Request
from fastapi.responses import Response

from stratagem.console.runs import render_run
from stratagem.console.state import ConsoleState
from stratagem.console.views import WHOLE, AnswerDraft, answer_schema, field_label, parse_json
from stratagem.domain.answers import answer_fields, answer_problem, coerce
from stratagem.domain.run_types import AnswerInput


def read_answer(step_id: str, form: dict[str, Any], schema: dict[str, Any] | None) -> tuple[Any, AnswerDraft]:
    """The answer a form carries (one input per field of the schema, `field.NAME`, converted as the
    terminal converts them; or one value, JSON or text), and the draft to show again if it is refused."""
    draft = AnswerDraft(step_id)
    fields = answer_fields(schema)
    if not fields:
        text = str(form.get("answer", ""))
        draft.values[WHOLE] = text
        if not text.strip():
            draft.errors[WHOLE] = "type an answer"
            return None, draft
        if text.strip().startswith(("{", "[")):
            try:
                return parse_json(text, "answer"), draft
            except ValueError as exc:
                draft.errors[WHOLE] = str(exc).replace("the answer are", "the answer is")
                return None, draft
        return text, draft
    answer: dict[str, Any] = {}
    for name, sub, required in fields:
        text = str(form.get(f"field.{name}", "")).strip()
        draft.values[name] = text
        if not text:
            if required:
                choice = "enum" in sub or sub.get("type") == "boolean"
                draft.errors[name] = "choose one" if choice else "required: type a value"
            continue
        try:
            value = coerce(text, sub)
        except ValueError as exc:
            draft.errors[name] = str(exc)
            continue
        if problem := answer_problem(value, sub, f"'{field_label(name, sub)}'"):
            draft.errors[name] = problem
            continue
        answer[name] = value
    return answer, draft


_FIELD = re.compile(r"field '([^'.]+)|lacks field (\S+)")


def refused_field(message: str, draft: AnswerDraft) -> str:
    """Which field a refusal is about (the run names it: "field 'days' of the answer: ..."), or WHOLE."""
    found = _FIELD.search(message)
    name = next((g for g in found.groups() if g), None) if found else None
    return name if name is not None and name in draft.values else WHOLE


async def answer_form(
    request: Request,
    console: ConsoleState,
    who: str,
    run_id: str,
    form: dict[str, Any],
    send: Callable[[AnswerInput], Awaitable[dict[str, Any]]],
) -> str | Response:
    """Send the posted answer: what the run said if it took it, else the run page again with the
    draft (HTTP 422)."""
    run = console.run(run_id)
    step_id = str(form.get("step_id") or "")
    schema = answer_schema(await run.plan(), step_id)
    answer, draft = read_answer(step_id, form, schema)
    if not draft.errors:
        try:
            outcome = await send(AnswerInput(step_id=step_id, answer=answer, by=who))
        except HTTPException as exc:
            detail = str(exc.detail)
            draft.errors[refused_field(detail, draft)] = detail
        else:
            return str(outcome["message"])
    return await render_run(request, console, who, run_id, draft=draft, status_code=422)
