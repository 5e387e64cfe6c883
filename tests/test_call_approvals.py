"""Tool calls that wait for a person inside an llm step: the executor pauses before the call,
the activity stores its progress, and a later dispatch with the decision goes on from there."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from stratagem.activities.execution import ExecutionActivities
from stratagem.domain import activity_io
from stratagem.domain.ledger import ToolCallStatus
from stratagem.domain.plan import Risk, Step, StepKind
from stratagem.domain.usage import Allowance
from stratagem.io.executor import AwaitingApproval, Executor, ExecutorProgress
from stratagem.io.store import FileStore, hydrate, is_stored, store_value
from stratagem.models import ScriptedModel
from stratagem.tools import ToolContext, ToolRegistry, tool

pytestmark = pytest.mark.unit

APPROVED = activity_io.CallDecision(approved=True, by="dana")
REJECTED = activity_io.CallDecision(approved=False, by="dana", reason="too expensive")


def registry(effects: list[tuple[str, Any, str]]) -> ToolRegistry:
    """`pay` waits for a person on every call; `note` does not. Both leave an effect in `effects`."""

    @tool(requires_approval=True)
    def pay(amount: int, ctx: ToolContext) -> str:
        """Pay an amount."""
        effects.append(("pay", amount, ctx.idempotency_key))
        return f"paid {amount}"

    @tool
    def note(text: str, ctx: ToolContext) -> str:
        """Write a note."""
        effects.append(("note", text, ctx.idempotency_key))
        return f"noted {text}"

    tools = ToolRegistry()
    for fn in (pay, note):
        tools.register(fn)
    return tools


def script(tmp_path: Path, *turns: Any) -> str:
    path = tmp_path / "script.yaml"
    path.write_text(yaml.safe_dump({"executor": {"work": list(turns)}}))
    return str(path)


def calls(*pairs: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {"calls": [{"tool": name, "args": args} for name, args in pairs]}


def request(
    model: str, decisions: dict[str, activity_io.CallDecision] | None = None, **fields: Any
) -> activity_io.LlmStepInput:
    step = Step(id="work", title="work", kind=StepKind.llm, instructions="do it", tools=["pay", "note"])
    return activity_io.LlmStepInput(
        run_id="r",
        execution_id="e",
        revision=1,
        step=step,
        instructions="do it",
        model=f"scripted:{model}",
        call_decisions=decisions or {},
        **fields,
    )


def executor(
    tmp_path: Path, model: str, progress: ExecutorProgress, effects: list, decisions: dict | None = None
) -> Executor:
    return Executor(
        ScriptedModel(model),
        request(model, decisions),
        registry(effects),
        workspace=tmp_path,
        attempt=1,
        progress=progress,
    )


def shown(call_id: str, tool: str, arguments: str) -> activity_io.AwaitedCall:
    """A paused call as the approver sees it: every argument, and the digest an approval names
    (of the exact arguments, in canonical JSON)."""
    exact = json.dumps(json.loads(arguments), ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(exact.encode()).hexdigest()
    return activity_io.AwaitedCall(call_id=call_id, tool=tool, arguments=arguments, digest=digest)


def tool_results(progress: ExecutorProgress) -> dict[str, str]:
    return {m.tool_call_id or "": m.content for m in progress.messages if m.role == "tool"}


# --- the executor ------------------------------------------------------------------------------


async def test_a_gated_call_without_a_decision_pauses_before_it_runs(tmp_path):
    model = script(tmp_path, calls(("note", {"text": "a"}), ("pay", {"amount": 100}), ("note", {"text": "b"})), "done")
    effects: list = []
    progress = ExecutorProgress()
    with pytest.raises(AwaitingApproval) as paused:
        await executor(tmp_path, model, progress, effects).run()
    assert paused.value.awaited == shown("1", "pay", '{"amount": 100}')
    # The call before it ran and is answered; the paused one and the one after it did not run.
    assert effects == [("note", "a", "r/e/work/r1/c0")]
    assert list(tool_results(progress)) == ["call_0_0"]
    assert [(t.call, t.tool) for t in progress.tool_calls] == [(0, "note")]
    assert progress.rounds == 1


async def test_an_approved_call_runs_once_with_the_key_of_its_position(tmp_path):
    model = script(tmp_path, calls(("note", {"text": "a"}), ("pay", {"amount": 100}), ("note", {"text": "b"})), "done")
    effects: list = []
    progress = ExecutorProgress()
    with pytest.raises(AwaitingApproval):
        await executor(tmp_path, model, progress, effects).run()

    resumed = progress.resumed()
    assert await executor(tmp_path, model, resumed, effects, {"1": APPROVED}).run() == "done"
    assert effects == [
        ("note", "a", "r/e/work/r1/c0"),
        ("pay", 100, "r/e/work/r1/c1"),
        ("note", "b", "r/e/work/r1/c2"),
    ]
    assert tool_results(resumed) == {"call_0_0": "noted a", "call_0_1": "paid 100", "call_0_2": "noted b"}
    assert [(t.call, t.status, t.message) for t in resumed.new_tool_calls] == [
        (1, ToolCallStatus.ok, "approved by dana"),
        (2, ToolCallStatus.ok, ""),
    ]
    assert resumed.rounds == 2 and len(resumed.new_calls) == 1


async def test_a_rejected_call_never_runs_and_the_model_is_told_who_rejected_it(tmp_path):
    model = script(tmp_path, calls(("pay", {"amount": 100}), ("note", {"text": "b"})), "done")
    effects: list = []
    progress = ExecutorProgress()
    with pytest.raises(AwaitingApproval):
        await executor(tmp_path, model, progress, effects).run()

    resumed = progress.resumed()
    assert await executor(tmp_path, model, resumed, effects, {"0": REJECTED}).run() == "done"
    assert effects == [("note", "b", "r/e/work/r1/c1")]  # the rejected call kept position 0
    answer = next(m for m in resumed.messages if m.tool_call_id == "call_0_0")
    assert answer.content == "Rejected by dana: too expensive. The call was not run."
    assert answer.is_error
    record = resumed.tool_calls[0]
    assert (record.call, record.tool, record.status) == (0, "pay", ToolCallStatus.refused)
    assert record.message == "rejected by dana: too expensive"


async def test_each_gated_call_waits_for_its_own_decision(tmp_path):
    model = script(tmp_path, calls(("pay", {"amount": 1})), calls(("pay", {"amount": 2})), "done")
    effects: list = []
    progress = ExecutorProgress()
    with pytest.raises(AwaitingApproval) as first:
        await executor(tmp_path, model, progress, effects).run()
    assert first.value.awaited.call_id == "0"

    progress = progress.resumed()
    with pytest.raises(AwaitingApproval) as second:
        await executor(tmp_path, model, progress, effects, {"0": APPROVED}).run()
    # The decision on call 0 does not carry over to the next call of the same tool.
    assert second.value.awaited == shown("1", "pay", '{"amount": 2}')
    assert effects == [("pay", 1, "r/e/work/r1/c0")]

    progress = progress.resumed()
    decisions = {"0": APPROVED, "1": APPROVED}
    assert await executor(tmp_path, model, progress, effects, decisions).run() == "done"
    assert effects == [("pay", 1, "r/e/work/r1/c0"), ("pay", 2, "r/e/work/r1/c1")]  # the first ran once


async def test_the_plan_and_the_request_cannot_switch_the_gate_off(tmp_path):
    model = script(tmp_path, calls(("pay", {"amount": 5})), "done")
    effects: list = []
    step = Step(
        id="work",
        title="work",
        kind=StepKind.llm,
        instructions="do it",
        tools=["pay"],
        risk=Risk.low,
        requires_approval=False,
    )
    # A decision for some other call, and a step that claims nothing needs approval.
    lenient = request(model, {"7": APPROVED}).model_copy(update={"step": step})
    run = Executor(
        ScriptedModel(model), lenient, registry(effects), workspace=tmp_path, attempt=1, progress=ExecutorProgress()
    )
    with pytest.raises(AwaitingApproval) as paused:
        await run.run()
    assert paused.value.awaited.call_id == "0"
    assert effects == []


# --- the activity ------------------------------------------------------------------------------


class Dispatch:
    """Runs the llm activity as the workflow would dispatch it, with the heartbeats it sends."""

    def __init__(self, tmp_path: Path, effects: list):
        self.store = FileStore(tmp_path / "store")
        self.activities = ExecutionActivities(registry(effects), tmp_path / "ws", store=self.store)
        self.beats: list = []

    async def __call__(
        self, llm: activity_io.LlmStepInput, attempt: int = 1, previous: Any = None
    ) -> activity_io.StepOutput:
        env = ActivityEnvironment()
        env.info = dataclasses.replace(
            env.info, attempt=attempt, heartbeat_details=[previous] if previous is not None else []
        )
        env.on_heartbeat = lambda *details: self.beats.append(details[0] if details else None)
        return await env.run(self.activities.run_llm, llm)


async def test_a_paused_dispatch_stores_its_progress_and_the_next_reports_only_its_own_calls(tmp_path):
    model = script(
        tmp_path,
        {**calls(("note", {"text": "a"}), ("pay", {"amount": 100})), "usage": {"input_tokens": 50, "output_tokens": 5}},
        {"text": "done", "usage": {"input_tokens": 70, "output_tokens": 3}},
    )
    effects: list = []
    dispatch = Dispatch(tmp_path, effects)

    paused = await dispatch(request(model))
    assert paused.output is None and paused.transcript is None
    assert paused.awaiting == shown("1", "pay", '{"amount": 100}')
    assert is_stored(paused.resume)  # always out of history, however small
    assert [c.input_tokens for c in paused.calls] == [50]
    assert [t.tool for t in paused.tool_calls] == ["note"]

    # One model call is all the run has left: enough, as the one before the pause is paid for.
    later = request(model, {"1": APPROVED}, resume=paused.resume, allowance=Allowance(model_calls=1))
    done = await dispatch(later)
    assert done.output == "done" and done.awaiting is None and done.resume is None
    assert [c.input_tokens for c in done.calls] == [70]
    assert [(t.call, t.tool) for t in done.tool_calls] == [(1, "pay")]
    assert [e[:2] for e in effects] == [("note", "a"), ("pay", 100)]
    transcript = hydrate(dispatch.store, done.transcript)
    assert [m["role"] for m in transcript].count("assistant") == 2  # the whole conversation


async def test_a_failure_after_a_resume_reports_only_its_own_calls_and_its_retry_goes_on(tmp_path):
    model = script(
        tmp_path, calls(("note", {"text": "a"}), ("pay", {"amount": 100})), {"fail": "upstream timeout"}, "done"
    )
    effects: list = []
    dispatch = Dispatch(tmp_path, effects)
    paused = await dispatch(request(model))
    later = request(model, {"1": APPROVED}, resume=paused.resume)

    with pytest.raises(ApplicationError) as failed:
        await dispatch(later)
    details = failed.value.details[0]
    assert details["calls"] == []  # the one model call was made, and reported, before the pause
    assert [t["tool"] for t in details["tool_calls"]] == ["pay"]

    done = await dispatch(later, attempt=2, previous=dispatch.beats[-1])
    assert done.output == "done"
    assert len(done.calls) == 1 and [t.tool for t in done.tool_calls] == ["pay"]
    assert [e[:2] for e in effects] == [("note", "a"), ("pay", 100)]  # the retry did not pay again


async def test_a_checkpoint_without_its_conversation_goes_on_from_the_paused_one(tmp_path):
    model = script(tmp_path, calls(("pay", {"amount": 100})), "done")
    effects: list = []
    dispatch = Dispatch(tmp_path, effects)
    paused = await dispatch(request(model))
    later = request(model, {"0": APPROVED}, resume=paused.resume)
    # An attempt that died before the approved call ran, with a conversation too large to checkpoint.
    stored = ExecutorProgress.model_validate(hydrate(dispatch.store, paused.resume)).resumed()
    previous = {**stored.model_dump(mode="json"), "messages": []}

    done = await dispatch(later, attempt=2, previous=previous)
    assert done.output == "done"
    assert [e[:2] for e in effects] == [("pay", 100)]
    assert [(t.call, t.tool) for t in done.tool_calls] == [(0, "pay")]


async def test_decisions_without_the_conversation_they_decide_on_are_ignored(tmp_path):
    # Call 0 of a fresh conversation is not the call 0 a person approved in an earlier one.
    model = script(tmp_path, calls(("pay", {"amount": 100})), "done")
    effects: list = []
    paused = await Dispatch(tmp_path, effects)(request(model, {"0": APPROVED}))
    assert paused.awaiting is not None and paused.awaiting.call_id == "0"
    assert effects == []


async def test_an_unreadable_paused_progress_fails_the_step_for_good(tmp_path):
    model = script(tmp_path, "done")
    dispatch = Dispatch(tmp_path, [])
    garbage = store_value(dispatch.store, "runs/r/work/progress", {"messages": "not a conversation"})
    with pytest.raises(ApplicationError) as failed:
        await dispatch(request(model, resume=garbage))
    assert failed.value.non_retryable
    assert "step 'work' cannot go on from its paused conversation" in failed.value.message

    missing = {**garbage, "$stored": "store:runs/r/work/progress/gone.json"}
    with pytest.raises(ApplicationError) as failed:
        await dispatch(request(model, resume=missing))
    assert failed.value.non_retryable and "is missing from" in failed.value.message


async def test_the_paused_arguments_are_redacted_and_never_cut(tmp_path):
    secret = "sk-" + "a1B2" * 12
    model = script(tmp_path, calls(("pay", {"amount": 1, "memo": f"key {secret} " + "x" * 3000, "to": "Tomás"})))
    # `memo` is not a parameter of pay: the person decides on what the model asked, as it asked it.
    with pytest.raises(AwaitingApproval) as paused:
        await executor(tmp_path, model, ExecutorProgress(), []).run()
    shown = paused.value.awaited.arguments
    assert secret not in shown and "[redacted]" in shown
    # Every argument, the last one too, in its own letters: a person must see all that will run.
    assert json.loads(shown) == {"amount": 1, "memo": "key [redacted] " + "x" * 3000, "to": "Tomás"}
    # The digest is of the call itself, credential included: what runs is what was approved.
    exact = {"amount": 1, "memo": f"key {secret} " + "x" * 3000, "to": "Tomás"}
    canonical = json.dumps(exact, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    assert paused.value.awaited.digest == hashlib.sha256(canonical.encode()).hexdigest()


async def test_a_masked_credential_cannot_hide_the_fields_after_it(tmp_path):
    """A PEM header with no end masked everything after it, the payee included; and two calls
    that looked alike once masked shared one digest."""
    memo = "Settlement per contract, signed copy attached: -----BEGIN PRIVATE KEY-----"
    calls_made = []
    for to, amount in (("mallory", 99999), ("acme", 10)):
        model = script(tmp_path, calls(("pay", {"memo": memo, "to": to, "amount": amount})))
        with pytest.raises(AwaitingApproval) as paused:
            await executor(tmp_path, model, ExecutorProgress(), []).run()
        calls_made.append(paused.value.awaited)
    mallory, acme = calls_made
    assert json.loads(mallory.arguments)["to"] == "mallory" and json.loads(mallory.arguments)["amount"] == 99999
    assert "BEGIN PRIVATE KEY" not in mallory.arguments and "[redacted]" in mallory.arguments
    assert mallory.digest != acme.digest


async def test_an_approval_given_for_other_arguments_does_not_run_the_call(tmp_path):
    """The approval names the digest of the arguments shown; a call at that position with any other
    arguments (a conversation that went another way after a restart, say) is asked about anew."""
    model = script(tmp_path, calls(("pay", {"amount": 100})), "done")
    effects: list = []
    progress = ExecutorProgress()
    with pytest.raises(AwaitingApproval) as paused:
        await executor(tmp_path, model, progress, effects).run()
    other = shown("0", "pay", '{"amount": 1}').digest  # what an approver saw elsewhere
    approved_elsewhere = activity_io.CallDecision(approved=True, by="dana", digest=other)
    with pytest.raises(AwaitingApproval) as again:
        await executor(tmp_path, model, progress.resumed(), effects, {"0": approved_elsewhere}).run()
    assert again.value.awaited == paused.value.awaited and effects == []
    approved = activity_io.CallDecision(approved=True, by="dana", digest=paused.value.awaited.digest)
    assert await executor(tmp_path, model, progress.resumed(), effects, {"0": approved}).run() == "done"
    assert [e[:2] for e in effects] == [("pay", 100)]
