"""Deciding: the forms a run page posts, and one REST endpoint per decision.

A decision goes through the run's update validators: a stale or refused one is an HTTP 409 with
the run's message (a form goes back to the run page with it), never a half-applied change. Who
decided is the person the console signed in (`CheckedForm`, `Decider`), never a name the request
carries; the console signs what it forwards with its issuer key (`ConsoleState.run`).

Every decision is sent as its kind from the table (stratagem.domain.decisions.kinds) through
`RunHandle.decide`. What is the console's own is here, keyed by the table: how a form answering
each wait is read (`FORMS`), and each kind's endpoint, its body and what /openapi.json says of it
(`ENDPOINTS`), from which the routes are made.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any
from urllib.parse import urlencode

import yaml
from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import RedirectResponse, Response
from pydantic import BaseModel, Field, ValidationError, field_validator

from stratagem.client import RunHandle
from stratagem.common.errors import DecisionRefusedError, PlanFileError, StratagemError
from stratagem.console.access import CheckedForm, Decider, FormPost
from stratagem.console.answer_form import answer_form
from stratagem.console.runs import render_run
from stratagem.console.state import Console
from stratagem.console.views import (
    answer_from,
    answer_schema,
    changed_arguments,
    one_line,
    parse_json,
    typed_arguments,
)
from stratagem.domain.decision_inputs import ARGS_LIMIT
from stratagem.domain.decisions import Kind, kinds
from stratagem.domain.run_types import (
    AnswerInput,
    ApproveInput,
    BudgetInput,
    DecisionInput,
    DecisionKind,
    RejectInput,
    RepairAction,
    RepairInput,
    ResolveInput,
    ReviseInput,
)
from stratagem.io.plan_files import parse_plan_data

router = APIRouter()


# ------------------------------------------------------------------ REST bodies (no `by`: identity decides)


class ApproveBody(BaseModel):
    revision: int | None = None
    step_id: str | None = None
    call_id: str | None = None
    digest: str | None = Field(
        default=None,
        max_length=64,
        description="A call's: the digest of its arguments shown; a gated step's: the digest of what it will run.",
    )
    comment: str = Field(default="", max_length=4000)
    args: dict[str, Any] | None = Field(
        default=None,
        description="A gated tool step's changed arguments, merged into those shown (needs `digest`): a new "
        "revision by you, approved with the step.",
    )

    @field_validator("args")
    @classmethod
    def _bounded(cls, args: dict[str, Any] | None) -> dict[str, Any] | None:
        if args is not None and len(json.dumps(args, default=str)) > ARGS_LIMIT:
            raise ValueError(f"the changed arguments take more than {ARGS_LIMIT:,} characters of JSON")
        return args


class RejectBody(BaseModel):
    reason: str = Field(min_length=1, max_length=4000)
    revision: int | None = None
    step_id: str | None = None
    call_id: str | None = None


class AnswerBody(BaseModel):
    step_id: str
    answer: Any


class ReviseBody(BaseModel):
    plan: dict[str, Any]
    reason: str = Field(default="", max_length=4000)
    revision: int | None = None


class RepairBody(BaseModel):
    action: RepairAction
    step_id: str | None = None
    args: dict[str, Any] | None = None
    output: Any = None
    reason: str = Field(default="", max_length=4000)


class ResolveBody(BaseModel):
    step_id: str
    happened: bool = Field(description="true: its effect happened and the step succeeds; false: it runs again.")
    output: Any = Field(default=None, description="With happened: the step's output, if known.")
    reason: str = Field(default="", max_length=4000)


class BudgetBody(BaseModel):
    tokens: int | None = Field(default=None, ge=1)
    cost_usd: float | None = Field(default=None, gt=0)
    model_calls: int | None = Field(default=None, ge=1)
    wall_clock_seconds: float | None = Field(default=None, gt=0)
    stop: bool = False
    reason: str = Field(default="", max_length=4000)


# ------------------------------------------------------------------ sending, through the table of kinds


async def decide(run: RunHandle, kind: Kind, decision: DecisionInput) -> dict[str, Any]:
    """Send `decision` as `kind` (stratagem.domain.decisions.kinds): a refusal is a 409 with the run's
    reason, a run nobody serves a 503."""
    try:
        outcome = await run.decide(kind, decision)
    except DecisionRefusedError as exc:
        text = str(exc)
        raise HTTPException(409, text.split(": ", 1)[-1] if "refused the decision" in text else text) from None
    except StratagemError as exc:
        raise HTTPException(503, str(exc)) from None
    return {"run_id": run.id, **outcome.model_dump(mode="json")}


# ------------------------------------------------------------------ decisions from forms


def back(run_id: str, *, error: str = "", done: str = "") -> Response:
    query = urlencode({k: v for k, v in {"error": error, "done": done}.items() if v})
    return RedirectResponse(f"/runs/{run_id}" + (f"?{query}" if query else ""), status_code=303)


async def form_decision(run_id: str, make: Callable[[], Awaitable[Any]]) -> Response:
    try:
        outcome = await make()
    except HTTPException as exc:
        return back(run_id, error=str(exc.detail))
    except (ValidationError, ValueError) as exc:
        return back(run_id, error=one_line(exc))
    except StratagemError as exc:
        return back(run_id, error=str(exc))
    return back(run_id, done=outcome["message"])


@dataclass(frozen=True)
class Posted:
    """A run page's decision form: who posted it, and the fields every such form may carry."""

    who: str
    form: dict[str, Any]
    verdict: str
    step: str | None
    call: str | None
    revision: int | None
    comment: str

    @classmethod
    def of(cls, post: FormPost) -> Posted:
        form = post.form
        revision = int(form["revision"]) if str(form.get("revision") or "").isdigit() else None
        return cls(
            who=post.who,
            form=form,
            verdict=str(form.get("verdict", "approve")),
            step=str(form.get("step_id") or "") or None,
            call=str(form.get("call_id") or "") or None,
            revision=revision,
            comment=str(form.get("comment", "")),
        )


async def approval(_run: RunHandle, posted: Posted) -> tuple[Kind, DecisionInput]:
    # The buttons' verdicts are the kinds' verbs; any verdict but reject's approves, as it always has.
    if kinds.BY_VERB.get(posted.verdict) is kinds.REJECT:
        reason = posted.comment or "rejected in the console"
        rejection = RejectInput(
            by=posted.who, reason=reason, revision=posted.revision, step_id=posted.step, call_id=posted.call
        )
        return kinds.REJECT, rejection
    digest = str(posted.form.get("digest") or "") or None  # the arguments the page showed
    # A gated tool step's form has its arguments filled in: those changed are approved changed.
    args = changed_arguments(posted.form) if posted.step is not None and posted.call is None else None
    approve = ApproveInput(
        by=posted.who,
        revision=posted.revision,
        step_id=posted.step,
        call_id=posted.call,
        digest=digest,
        comment=posted.comment,
        args=args,
    )
    return kinds.APPROVE, approve


async def answer(run: RunHandle, posted: Posted) -> tuple[Kind, DecisionInput]:
    schema = answer_schema(await run.plan(), posted.step)
    given = answer_from(posted.form, schema)
    return kinds.ANSWER, AnswerInput(step_id=posted.step or "", answer=given, by=posted.who)


async def repair(_run: RunHandle, posted: Posted) -> tuple[Kind, DecisionInput]:
    form = posted.form
    # Asking a human step again names that step, not the failed one the form is about.
    asked = str(form.get("ask") or "") or None
    action = RepairAction.ask_again if asked else RepairAction(str(form.get("action", "retry")))
    # The arguments box starts filled (for a retry): a skip, a stop or asking again leave it out.
    retry = action is RepairAction.retry
    args = parse_json(form.get("args"), "arguments") if form.get("args") and retry else None
    if args is not None and form.get("args_shown") and args == parse_json(form.get("args_shown"), "arguments"):
        args = None  # the form starts filled with the step's arguments: sent back as shown, a plain retry
    out = parse_json(form.get("output"), "output") if action is RepairAction.skip else None
    # Compensating gives up on the whole goal: it is about the run, not the step the form shows.
    target = None if action is RepairAction.compensate else asked or posted.step
    return kinds.REPAIR, RepairInput(
        by=posted.who, action=action, step_id=target, args=args, output=out, reason=posted.comment
    )


async def budget(_run: RunHandle, posted: Posted) -> tuple[Kind, DecisionInput]:
    # The budget form's stop button sets BudgetInput.stop; it is not the repair verb `stop`.
    if posted.verdict == "stop":
        return kinds.BUDGET, BudgetInput(by=posted.who, stop=True, reason=posted.comment)
    form = posted.form
    limits = {k: form[k] for k in ("tokens", "cost_usd", "model_calls", "wall_clock_seconds") if form.get(k)}
    return kinds.BUDGET, BudgetInput.model_validate({"by": posted.who, "reason": posted.comment, **limits})


HAPPENED = {"yes": True, "no": False}
"""An in-doubt step's form: its two buttons (`happened`), it did or it did not happen."""


async def resolve(_run: RunHandle, posted: Posted) -> tuple[Kind, DecisionInput]:
    # Nothing is assumed for the person: either answer has an effect (the step counts as done, or
    # it runs again), so a form that says neither is refused.
    said = HAPPENED.get(str(posted.form.get("happened") or ""))
    if said is None:
        raise ValueError("say whether the step's effect happened: 'It happened' or 'It did not happen'")
    text = str(posted.form.get("output") or "").strip()
    if text and not said:
        raise ValueError("an output goes with 'It happened': a step whose effect did not happen runs again")
    try:
        output = json.loads(text) if text else None
    except json.JSONDecodeError as exc:
        raise ValueError(f"the output is not JSON: {exc.msg} at column {exc.colno}") from None
    reason = posted.comment
    return kinds.RESOLVE, ResolveInput(
        by=posted.who, step_id=posted.step or "", happened=said, output=output, reason=reason
    )


FormReading = Callable[[RunHandle, Posted], Awaitable[tuple[Kind, DecisionInput]]]
# How a form answering each wait (the PendingDecision's kind, which the form posts as `kind`) is
# read into the kind of decision it sends and that decision's input.
FORMS: dict[DecisionKind, FormReading] = {
    DecisionKind.plan_approval: approval,
    DecisionKind.step_approval: approval,
    DecisionKind.tool_call_approval: approval,
    DecisionKind.human_answer: answer,
    DecisionKind.repair: repair,
    DecisionKind.budget: budget,
    DecisionKind.in_doubt: resolve,
}


async def decide_posted(run: RunHandle, post: FormPost) -> dict[str, Any]:
    """The decision a run page's form posts, sent to the run. The one place the console reads a
    wait from a string (the form's `kind`, a PendingDecision's kind)."""
    waiting = str(post.form.get("kind", ""))
    try:
        read = FORMS[DecisionKind(waiting)]
    except ValueError:
        raise HTTPException(400, f"unknown decision kind '{waiting[:40]}'") from None
    kind, decision = await read(run, Posted.of(post))
    return await decide(run, kind, decision)


@router.post("/runs/{run_id}/decide", include_in_schema=False)
async def decide_form(request: Request, post: CheckedForm, console: Console, run_id: str) -> Response:
    run = console.run(run_id)
    form = post.form
    if form.get("kind") == DecisionKind.human_answer.value:  # refused, it comes back as typed
        taken = await answer_form(request, console, post.who, run_id, form, partial(decide, run, kinds.ANSWER))
        return back(run_id, done=taken) if isinstance(taken, str) else taken
    edits = (
        form.get("kind") == DecisionKind.step_approval.value
        and kinds.BY_VERB.get(str(form.get("verdict", "approve"))) is not kinds.REJECT
    )
    if not edits or not any(key.startswith("arg.") for key in form):
        return await form_decision(run_id, lambda: decide_posted(run, post))
    try:
        outcome = await decide_posted(run, post)
    except (HTTPException, ValidationError, ValueError, StratagemError) as exc:
        # Refused at the form, with the arguments as typed: nothing the person changed is lost.
        problem = str(exc.detail) if isinstance(exc, HTTPException) else one_line(exc)
        step = str(form.get("step_id") or "")
        typed, refused = {step: typed_arguments(form)}, {step: problem}
        return await render_run(request, console, post.who, run_id, typed=typed, refused=refused, status_code=409)
    return back(run_id, done=outcome["message"])


@router.post("/runs/{run_id}/revise", include_in_schema=False)
async def revise_form(request: Request, post: CheckedForm, console: Console, run_id: str) -> Response:
    who, form = post.who, post.form
    run = console.run(run_id)
    text = str(form.get("plan", ""))
    revision = int(form["revision"]) if str(form.get("revision") or "").isdigit() else None
    try:
        draft = parse_plan_data(yaml.safe_load(text), source="the edited plan")
        reason = str(form.get("reason", ""))
        outcome = await decide(run, kinds.REVISE, ReviseInput(by=who, plan=draft, revision=revision, reason=reason))
    except (yaml.YAMLError, PlanFileError, HTTPException) as exc:
        if isinstance(exc, yaml.YAMLError):
            problem = f"the plan is not YAML: {one_line(exc)}"
        else:
            problem = str(exc.detail) if isinstance(exc, HTTPException) else str(exc)
        # Nothing is lost: the edit comes back with the problem beside it.
        return await render_run(request, console, who, run_id, edit=text, problems=[problem], status_code=422)
    return back(run_id, done=outcome["message"])


# ------------------------------------------------------------------ REST: one endpoint per kind


def same_fields(kind: Kind, who: str, body: BaseModel) -> DecisionInput:
    """The kind's input from a body with its fields (the identity adds `by`)."""
    return kind.input(by=who, **body.model_dump())


def revision_of(_kind: Kind, who: str, body: ReviseBody) -> DecisionInput:
    try:
        draft = parse_plan_data(body.plan, source="the plan")
    except PlanFileError as exc:
        raise HTTPException(422, str(exc)) from None
    return ReviseInput(by=who, plan=draft, reason=body.reason, revision=body.revision)


@dataclass(frozen=True)
class Endpoint:
    """A kind's endpoint, POST /api/runs/{run_id}/<kind's name>: the body it takes, what
    /openapi.json says of it, and how the body becomes the kind's input."""

    kind: Kind
    body: type[BaseModel]
    description: str
    read: Callable[[Kind, str, Any], DecisionInput] = same_fields


# In the order /openapi.json has always listed them.
ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint(kinds.APPROVE, ApproveBody, "Approve the plan under review, a gated step, or one tool call of a step."),
    Endpoint(kinds.REJECT, RejectBody, "Reject the plan (ending the run), a gated step, or a tool call."),
    Endpoint(kinds.ANSWER, AnswerBody, "Answer a human step (checked against its answer schema)."),
    Endpoint(
        kinds.REVISE,
        ReviseBody,
        "Replace the plan with an edited one (under review, while it runs, or as a repair).",
        revision_of,
    ),
    Endpoint(
        kinds.REPAIR,
        RepairBody,
        "Retry a failed step (with new arguments), skip it with an output, stop the run, or compensate: give up on "
        "the goal and undo the effects that ran.",
    ),
    Endpoint(kinds.BUDGET, BudgetBody, "Raise a run's budget, or stop a run waiting on it."),
    Endpoint(
        kinds.RESOLVE,
        ResolveBody,
        "Say whether an in-doubt step's effect happened: it did (with its output, if known) and the step succeeds, "
        "or it did not and the step runs again.",
    ),
)


def add_endpoint(endpoint: Endpoint) -> None:
    kind, read = endpoint.kind, endpoint.read

    async def send(who: Decider, console: Console, run_id: str, body: BaseModel) -> dict[str, Any]:
        run = console.run(run_id)
        return await decide(run, kind, read(kind, who, body))

    # FastAPI validates the body against the model its parameter is annotated with: this kind's.
    send.__annotations__["body"] = endpoint.body
    # The name gives /openapi.json each endpoint's summary and operationId, as when each was a function.
    router.add_api_route(
        f"/api/runs/{{run_id}}/{kind.name}",
        send,
        methods=["POST"],
        name=f"api_{kind.name}",
        description=endpoint.description,
        tags=["decisions"],
    )


for _endpoint in ENDPOINTS:
    add_endpoint(_endpoint)


__all__ = ["router"]
