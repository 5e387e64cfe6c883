"""Deciding: the forms a run page posts, and one REST endpoint per decision.

A decision goes through the run's update validators: a stale or refused one is an HTTP 409 with
the run's message (a form goes back to the run page with it), never a half-applied change. Who
decided is the person the console signed in (`CheckedForm`, `Decider`), never a name the request
carries; the console signs what it forwards with its issuer key (`ConsoleState.run`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlencode

import yaml
from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import RedirectResponse, Response
from pydantic import BaseModel, Field, ValidationError

from ..client import RunHandle
from ..errors import DecisionRefusedError, PlanFileError, StratagemError
from ..plan_files import parse_plan_data
from ..run_types import AnswerInput, ApproveInput, BudgetInput, RejectInput, RepairAction, RepairInput, ReviseInput
from .access import CheckedForm, Decider, FormPost
from .runs import render_run
from .state import Console
from .views import answer_from, answer_schema, one_line, parse_json

router = APIRouter()


# ------------------------------------------------------------------ REST bodies (no `by`: identity decides)


class ApproveBody(BaseModel):
    revision: int | None = None
    step_id: str | None = None
    call_id: str | None = None
    digest: str | None = Field(default=None, max_length=64, description="A call's: the digest of its arguments shown.")
    comment: str = Field(default="", max_length=4000)


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


class BudgetBody(BaseModel):
    tokens: int | None = Field(default=None, ge=1)
    cost_usd: float | None = Field(default=None, gt=0)
    model_calls: int | None = Field(default=None, ge=1)
    wall_clock_seconds: float | None = Field(default=None, gt=0)
    stop: bool = False
    reason: str = Field(default="", max_length=4000)


async def decide(run: RunHandle, call: Awaitable[Any]) -> dict[str, Any]:
    try:
        outcome = await call
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


async def decide_posted(run: RunHandle, post: FormPost) -> dict[str, Any]:
    """The decision a run page's form posts, sent to the run. The one place the console reads a
    decision's kind from a string (the form's `kind`, a PendingDecision's kind)."""
    who, form = post.who, post.form
    kind = str(form.get("kind", ""))
    verdict = str(form.get("verdict", "approve"))
    step = str(form.get("step_id") or "") or None
    call = str(form.get("call_id") or "") or None
    revision = int(form["revision"]) if str(form.get("revision") or "").isdigit() else None
    comment = str(form.get("comment", ""))
    if kind in ("plan_approval", "step_approval", "tool_call_approval"):
        if verdict == "reject":
            reason = comment or "rejected in the console"
            return await decide(
                run, run.reject(RejectInput(by=who, reason=reason, revision=revision, step_id=step, call_id=call))
            )
        digest = str(form.get("digest") or "") or None  # the arguments the page showed
        approval = ApproveInput(by=who, revision=revision, step_id=step, call_id=call, digest=digest, comment=comment)
        return await decide(run, run.approve(approval))
    if kind == "human_answer":
        schema = answer_schema(await run.plan(), step)
        answer = answer_from(form, schema)
        return await decide(run, run.answer(AnswerInput(step_id=step or "", answer=answer, by=who)))
    if kind == "repair":
        # Asking a human step again names that step, not the failed one the form is about.
        asked = str(form.get("ask") or "") or None
        action = RepairAction.ask_again if asked else RepairAction(str(form.get("action", "retry")))
        args = parse_json(form.get("args"), "arguments") if form.get("args") and not asked else None
        out = parse_json(form.get("output"), "output") if action is RepairAction.skip else None
        target = asked or step
        repair = RepairInput(by=who, action=action, step_id=target, args=args, output=out, reason=comment)
        return await decide(run, run.repair(repair))
    if kind == "budget":
        if verdict == "stop":
            return await decide(run, run.budget(BudgetInput(by=who, stop=True, reason=comment)))
        limits = {k: form[k] for k in ("tokens", "cost_usd", "model_calls", "wall_clock_seconds") if form.get(k)}
        return await decide(run, run.budget(BudgetInput.model_validate({"by": who, "reason": comment, **limits})))
    raise HTTPException(400, f"unknown decision kind '{kind[:40]}'")


@router.post("/runs/{run_id}/decide", include_in_schema=False)
async def decide_form(post: CheckedForm, console: Console, run_id: str) -> Response:
    run = console.run(run_id)
    return await form_decision(run_id, lambda: decide_posted(run, post))


@router.post("/runs/{run_id}/revise", include_in_schema=False)
async def revise_form(request: Request, post: CheckedForm, console: Console, run_id: str) -> Response:
    who, form = post.who, post.form
    run = console.run(run_id)
    text = str(form.get("plan", ""))
    revision = int(form["revision"]) if str(form.get("revision") or "").isdigit() else None
    try:
        draft = parse_plan_data(yaml.safe_load(text), source="the edited plan")
        reason = str(form.get("reason", ""))
        outcome = await decide(run, run.revise(ReviseInput(by=who, plan=draft, revision=revision, reason=reason)))
    except (yaml.YAMLError, PlanFileError, HTTPException) as exc:
        if isinstance(exc, yaml.YAMLError):
            problem = f"the plan is not YAML: {one_line(exc)}"
        else:
            problem = str(exc.detail) if isinstance(exc, HTTPException) else str(exc)
        # Nothing is lost: the edit comes back with the problem beside it.
        return await render_run(request, console, who, run_id, edit=text, problems=[problem], status_code=422)
    return back(run_id, done=outcome["message"])


# ------------------------------------------------------------------ REST


@router.post("/api/runs/{run_id}/approve", tags=["decisions"])
async def api_approve(who: Decider, console: Console, run_id: str, body: ApproveBody) -> dict[str, Any]:
    """Approve the plan under review, a gated step, or one tool call of a step."""
    run = console.run(run_id)
    return await decide(run, run.approve(ApproveInput(by=who, **body.model_dump())))


@router.post("/api/runs/{run_id}/reject", tags=["decisions"])
async def api_reject(who: Decider, console: Console, run_id: str, body: RejectBody) -> dict[str, Any]:
    """Reject the plan (ending the run), a gated step, or a tool call."""
    run = console.run(run_id)
    return await decide(run, run.reject(RejectInput(by=who, **body.model_dump())))


@router.post("/api/runs/{run_id}/answer", tags=["decisions"])
async def api_answer(who: Decider, console: Console, run_id: str, body: AnswerBody) -> dict[str, Any]:
    """Answer a human step (checked against its answer schema)."""
    run = console.run(run_id)
    return await decide(run, run.answer(AnswerInput(by=who, step_id=body.step_id, answer=body.answer)))


@router.post("/api/runs/{run_id}/revise", tags=["decisions"])
async def api_revise(who: Decider, console: Console, run_id: str, body: ReviseBody) -> dict[str, Any]:
    """Replace the plan with an edited one (under review, while it runs, or as a repair)."""
    run = console.run(run_id)
    try:
        draft = parse_plan_data(body.plan, source="the plan")
    except PlanFileError as exc:
        raise HTTPException(422, str(exc)) from None
    return await decide(run, run.revise(ReviseInput(by=who, plan=draft, reason=body.reason, revision=body.revision)))


@router.post("/api/runs/{run_id}/repair", tags=["decisions"])
async def api_repair(who: Decider, console: Console, run_id: str, body: RepairBody) -> dict[str, Any]:
    """Retry a failed step (with new arguments), skip it with an output, or stop the run."""
    run = console.run(run_id)
    return await decide(run, run.repair(RepairInput(by=who, **body.model_dump())))


@router.post("/api/runs/{run_id}/budget", tags=["decisions"])
async def api_budget(who: Decider, console: Console, run_id: str, body: BudgetBody) -> dict[str, Any]:
    """Raise a run's budget, or stop a run waiting on it."""
    run = console.run(run_id)
    return await decide(run, run.budget(BudgetInput(by=who, **body.model_dump())))


__all__ = ["router"]
