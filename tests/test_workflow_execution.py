"""Execution: parallel branches, human steps, llm steps, failures and replanning, continue-as-new, cancel."""

from __future__ import annotations

import asyncio

import pytest
from support.plans import GREETING, awaiting, diamond, step
from support.signing import send_signed
from temporalio.client import WorkflowFailureError

from stratagem.common.errors import DecisionRefusedError
from stratagem.domain.ledger import EventKind, StepStatus
from stratagem.domain.plan import AuthorKind
from stratagem.domain.run_types import AnswerInput, ApproveInput, Phase


async def failure_of(run) -> str:
    with pytest.raises(WorkflowFailureError) as info:
        await run.result()
    return str(info.value.cause)


@pytest.mark.system
async def test_diamond_branches_overlap_in_time(dev_harness):
    run = await dev_harness.start(diamond(seconds=1.5), auto_approve=True)
    result = await run.result()
    assert result.outputs == {"join": "left+right"}
    slow = {c["label"]: c for c in dev_harness.calls() if c["tool"] == "slow"}
    left, right = slow["left"], slow["right"]
    overlap = min(left["end"], right["end"]) - max(left["start"], right["start"])
    assert overlap > 1.0, f"branches ran one after the other (overlap {overlap:.2f}s)"
    order = [c["label"] for c in dev_harness.calls() if c["tool"] == "record"]
    assert order == ["start", "left+right"]


@pytest.mark.system
async def test_parallelism_is_capped(dev_harness):
    plan = {"goal": "fan out", "steps": [step(f"s{i}", "slow", label=f"s{i}", seconds=0.5) for i in range(4)]}
    run = await dev_harness.start(plan, auto_approve=True, max_parallel=2)
    await run.result()
    spans = [(c["start"], c["end"]) for c in dev_harness.calls()]
    peak = max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)
    assert peak == 2


@pytest.mark.system
async def test_a_ready_step_starts_without_waiting_for_its_wave(dev_harness):
    # quick -> after_quick must not wait for the slow sibling to finish.
    plan = {
        "goal": "no waves",
        "steps": [
            step("slow_one", "slow", label="slow_one", seconds=2),
            step("quick", "slow", label="quick", seconds=0.1),
            step("after_quick", "slow", ["quick"], label="after_quick", seconds=0.1),
        ],
    }
    run = await dev_harness.start(plan, auto_approve=True)
    await run.result()
    calls = {c["label"]: c for c in dev_harness.calls()}
    assert calls["after_quick"]["end"] < calls["slow_one"]["end"]


@pytest.mark.workflow
async def test_human_step_takes_an_answer_by_update_or_signal(harness):
    plan = {
        "goal": "collect approvals",
        "steps": [
            step("profile", "fetch_profile", user="ada"),
            {
                "id": "ask_budget",
                "title": "Ask budget",
                "kind": "human",
                "instructions": "Budget for ${profile.name}?",
                "answer_schema": {
                    "type": "object",
                    "properties": {"amount": {"type": "integer"}},
                    "required": ["amount"],
                },
                "depends_on": ["profile"],
            },
            {
                "id": "ask_owner",
                "title": "Ask owner",
                "kind": "human",
                "instructions": "Who owns it?",
                "depends_on": ["profile"],
            },
            step("done", "record", ["ask_budget", "ask_owner"], label="${ask_budget.amount} by ${ask_owner}"),
        ],
    }
    run = await harness.start(plan, auto_approve=True)
    status = await harness.wait_for(run, lambda s: len(s.pending) == 2)
    prompts = {p.step_id: p.prompt for p in status.pending}
    assert prompts["ask_budget"] == "Budget for Ada?"
    assert status.steps.running == 2  # both human steps are out for an answer

    with pytest.raises(DecisionRefusedError, match="step 'done' is not waiting for an answer"):
        await run.answer(AnswerInput(step_id="done", answer="x", by="zed"))
    await run.answer(AnswerInput(step_id="ask_budget", answer={"amount": 1200}, by="fin"))
    await send_signed(run, "answer_signal", AnswerInput(step_id="ask_owner", answer="Grace", by="ops"))
    result = await run.result()
    assert result.outputs == {"done": "1200 by Grace"}
    ledger = await run.ledger()
    assert ledger.steps["ask_budget"].output == {"amount": 1200}
    answered = [(e.step_id, e.actor) for e in ledger.events if e.kind is EventKind.answer_received]
    assert sorted(answered) == [("ask_budget", "fin"), ("ask_owner", "ops")]


@pytest.mark.workflow
async def test_a_wrong_typed_answer_is_refused_and_the_step_keeps_waiting(harness):
    terms = {"type": "object", "properties": {"status": {"enum": ["ok", "change"]}}, "required": ["status"]}
    plan = {
        "goal": "agree terms",
        "steps": [
            {"id": "review", "title": "Review", "kind": "human", "instructions": "Terms?", "answer_schema": terms},
            step("file", "record", ["review"], label="terms ${review.status}"),
        ],
    }
    run = await harness.start(plan, auto_approve=True)
    await harness.wait_for(run, lambda s: len(s.pending) == 1)
    with pytest.raises(DecisionRefusedError, match=r"refused the answer: the answer: 'ok' is not of type 'object'"):
        await run.answer(AnswerInput(step_id="review", answer="ok", by="fin"))
    # A signal cannot be refused: it is recorded as ignored, and nothing else happens.
    await send_signed(run, "answer_signal", AnswerInput(step_id="review", answer={"status": "maybe"}, by="ops"))
    for _ in range(100):  # the signal is taken in the workflow's next task
        ledger = await run.ledger()
        ignored = [e.message for e in ledger.events if e.kind is EventKind.signal_ignored]
        if ignored:
            break
        await asyncio.sleep(0.05)
    status = await run.status()
    assert ignored == [
        "step 'review' refused the answer: field 'status' of the answer: 'maybe' is not one of ['ok', 'change']"
    ]
    assert [p.step_id for p in status.pending] == ["review"] and ledger.steps["review"].output is None
    assert not [e for e in ledger.events if e.kind is EventKind.answer_received]

    await run.answer(AnswerInput(step_id="review", answer={"status": "ok"}, by="fin"))
    assert (await run.result()).outputs == {"file": "terms ok"}


@pytest.mark.workflow
async def test_llm_steps_and_synthesis_use_the_scripted_models(harness):
    model = harness.script(
        "models.yaml",
        {
            "executor": {"draft": "Dear Ada, welcome aboard.", "classify": {"json": {"segment": "enterprise"}}},
            "synthesis": "Ada was welcomed and classified as enterprise.",
        },
    )
    plan = {
        "goal": "welcome",
        "steps": [
            step("profile", "fetch_profile", user="ada"),
            {
                "id": "draft",
                "title": "Draft",
                "kind": "llm",
                "instructions": "Write to ${profile.name}",
                "depends_on": ["profile"],
            },
            {
                "id": "classify",
                "title": "Classify",
                "kind": "llm",
                "instructions": "Segment?",
                "output_format": "json",
                "depends_on": ["profile"],
            },
        ],
    }
    run = await harness.start(plan, auto_approve=True, executor=model, synthesizer=model)
    result = await run.result()
    assert result.outputs == {"draft": "Dear Ada, welcome aboard.", "classify": {"segment": "enterprise"}}
    assert result.synthesis == "Ada was welcomed and classified as enterprise."


@pytest.mark.workflow
async def test_llm_step_without_executor_is_refused(harness):
    plan = {"goal": "x", "steps": [{"id": "think", "title": "Think", "kind": "llm", "instructions": "think"}]}
    run = await harness.start(plan, auto_approve=True)
    assert "the run has no executor model" in await failure_of(run)


@pytest.mark.workflow
async def test_transient_failures_are_retried_and_counted(harness):
    plan = {"goal": "retry", "steps": [step("wobbly", "flaky", label="ok", failures=2)]}
    run = await harness.start(plan, auto_approve=True, step_max_attempts=3)
    assert (await run.result()).outputs == {"wobbly": "ok"}
    record = (await run.ledger()).steps["wobbly"]
    assert record.attempts == 3 and record.status is StepStatus.succeeded
    keys = {c["key"] for c in harness.calls()}
    assert len(keys) == 1 and keys.pop().endswith("/wobbly/r1")  # one idempotency key for every retry


def replan_script(harness, *revisions):
    return harness.script("planner.yaml", {"planner": [{"plan": r} for r in revisions]})


@pytest.mark.workflow
async def test_failure_then_replan_then_success(harness):
    first = {
        "goal": "onboard",
        "steps": [
            step("profile", "fetch_profile", user="ada"),
            step("charge", "broken", ["profile"], reason="card declined"),
            step("welcome", "record", ["charge"], label="welcome ${profile.name}"),
        ],
        "reason": "first try",
    }
    second = {
        "goal": "onboard",
        "steps": [
            step("invoice", "record", label="invoice instead"),
            step("welcome", "record", ["invoice"], label="welcome after ${invoice}"),
        ],
        "reason": "cards fail; invoice instead",
    }
    planner = replan_script(harness, first, second)
    run = await harness.start(goal="onboard ada", planner=planner)
    await harness.wait_for(run, awaiting)
    await run.approve(ApproveInput(by="bob", revision=1))
    status = await harness.wait_for(run, lambda s: awaiting(s) and s.revision == 2)
    assert status.replans == 1
    plan = await run.plan()
    assert plan is not None and plan.author.kind is AuthorKind.model and plan.reason == "cards fail; invoice instead"
    assert plan.step_ids == ["profile", "invoice", "welcome"]  # the succeeded step is carried
    await run.approve(ApproveInput(by="bob", revision=2))
    result = await run.result()
    assert result.status is Phase.succeeded and result.replans == 1
    # The carried profile step is a sink of revision 2 (nothing there depends on it).
    assert result.outputs == {
        "profile": {"name": "Ada", "email": "ada@example.com", "tags": ["new", "vip"]},
        "welcome": "welcome after invoice instead",
    }

    ledger = await run.ledger()
    # Dropped by revision 2, the failed step keeps its status and error: the ledger remembers why.
    assert ledger.steps["charge"].status is StepStatus.failed and ledger.steps["charge"].error == "card declined"
    assert ledger.steps["charge"].attempts == 1  # non-retryable: one attempt only
    assert ledger.steps["profile"].revision == 1  # ran once, under revision 1, never again
    assert [c["label"] for c in harness.calls() if c["tool"] == "record"] == [
        "invoice instead",
        "welcome after invoice instead",
    ]
    kinds = [e.kind for e in ledger.events]
    assert (
        kinds.index(EventKind.step_failed)
        < kinds.index(EventKind.replan_requested)
        < kinds.index(EventKind.plan_approved, kinds.index(EventKind.replan_requested))
    )


@pytest.mark.workflow
async def test_replan_keeps_a_failed_step_and_runs_it_again_under_the_new_revision(harness):
    plan = {"goal": "retry later", "steps": [step("wobbly", "flaky", label="ok", failures=1)]}
    again = {"goal": "retry later", "steps": [{**step("wobbly", "flaky", label="ok", failures=1), "max_attempts": 2}]}
    run = await harness.start(
        plan,
        auto_approve=True,
        step_max_attempts=1,
        planner=replan_script(harness, again),
        replan_requires_approval=False,
    )
    assert (await run.result()).outputs == {"wobbly": "ok"}
    revisions = [c["revision"] for c in harness.calls()]
    assert revisions == [1, 2, 2]
    record = (await run.ledger()).steps["wobbly"]
    assert (record.revision, record.attempts) == (2, 3)


@pytest.mark.workflow
async def test_replan_cap_ends_the_run(harness):
    failing = {"goal": "doomed", "steps": [step("charge", "broken", reason="card declined")]}
    run = await harness.start(failing, auto_approve=True, max_replans=1, planner=replan_script(harness, failing))
    message = await failure_of(run)
    assert "step 'charge' failed: card declined; the replan limit (1) is reached" in message
    ledger = await run.ledger()
    assert ledger.replans == 1
    assert [e.kind for e in ledger.events].count(EventKind.replan_cap_reached) == 1
    assert len([c for c in harness.calls() if c["tool"] == "broken"]) == 2


@pytest.mark.workflow
async def test_planner_output_is_repaired_then_bounded(harness):
    good = {"goal": "g", "steps": [step("only", "record", label="fixed")]}
    planner = harness.script("p.yaml", {"planner": [{"text": "I think we should..."}, {"plan": good}]})
    run = await harness.start(goal="g", planner=planner, auto_approve=True)
    assert (await run.result()).outputs == {"only": "fixed"}
    invalid = [e for e in (await run.ledger()).events if e.kind is EventKind.planning_attempt_invalid]
    assert len(invalid) == 1 and "must be a JSON object with 'goal' and 'steps'" in invalid[0].data["problems"][0]

    hopeless = harness.script("q.yaml", {"planner": [{"plan": {"goal": "g", "steps": [step("a", "nope")]}}] * 3})
    run = await harness.start(goal="g", planner=hopeless, auto_approve=True, max_plan_repairs=2)
    message = await failure_of(run)
    assert "the planner gave no valid plan in 3 attempt(s)" in message and "unknown tool 'nope'" in message


@pytest.mark.workflow
async def test_continue_as_new_keeps_the_run_correct(harness):
    steps = [step("s0", "add", a=0, b=1)]
    for i in range(1, 24):
        steps.append(step(f"s{i}", "add", [f"s{i - 1}"], a=f"${{s{i - 1}}}", b=1))
    run = await harness.start({"goal": "count", "steps": steps}, auto_approve=True, continue_as_new_after_events=40)
    result = await run.result()
    assert result.outputs == {"s23": 24}
    ledger = await run.ledger()
    assert all(r.status is StepStatus.succeeded and r.attempts == 1 for r in ledger.steps.values())
    cycles = [e for e in ledger.events if e.kind is EventKind.continued_as_new]
    assert len(cycles) >= 2
    assert (await run.status()).continued == len(cycles)
    assert len([e for e in ledger.events if e.kind is EventKind.step_succeeded]) == 24  # no step ran twice


@pytest.mark.system
async def test_continue_as_new_carries_a_pending_human_step(dev_harness):
    # On the dev server: this polls the status while the run continues as new, and the
    # time-skipping test server can lose a query that races a continue-as-new, leaving its
    # clock locked for every later test of the session.
    steps = [step(f"s{i}", "add", a=i, b=1) for i in range(6)]
    steps.append({"id": "ask", "title": "Ask", "kind": "human", "instructions": "ok?", "depends_on": ["s0"]})
    run = await dev_harness.start(
        {"goal": "wait", "steps": steps}, auto_approve=True, continue_as_new_after_events=30, max_parallel=1
    )
    await dev_harness.wait_for(run, lambda s: s.continued >= 1 and any(p.step_id == "ask" for p in s.pending))
    await run.answer(AnswerInput(step_id="ask", answer="yes", by="ops"))
    result = await run.result()
    assert result.outputs["ask"] == "yes"


@pytest.mark.system
async def test_cancel_leaves_the_ledger_consistent(dev_harness):
    plan = {
        "goal": "long",
        "steps": [
            step("quick", "record", label="q"),
            step("long", "slow", ["quick"], label="long", seconds=60),
            step("after", "record", ["long"], label="a"),
        ],
    }
    run = await dev_harness.start(plan, auto_approve=True)
    await dev_harness.wait_for(run, lambda s: s.steps.running == 1 and s.steps.succeeded == 1)
    await run.cancel()
    with pytest.raises(WorkflowFailureError):
        await run.result()
    ledger = await run.ledger()
    statuses = {sid: r.status for sid, r in ledger.steps.items()}
    assert statuses == {"quick": StepStatus.succeeded, "long": StepStatus.cancelled, "after": StepStatus.cancelled}
    assert ledger.events[-1].kind is EventKind.run_cancelled
    assert all(r.ended_at is not None for r in ledger.steps.values())


@pytest.mark.workflow
async def test_a_raising_tool_fails_its_step_not_the_worker(harness):
    plan = {"goal": "x", "steps": [step("bad", "unserializable")]}
    run = await harness.start(plan, auto_approve=True)
    message = await failure_of(run)
    assert "not JSON-serializable" in message and "no planner model is configured" in message
    # The same worker still runs the next run.
    run = await harness.start(GREETING, auto_approve=True)
    assert (await run.result()).status is Phase.succeeded


@pytest.mark.workflow
async def test_local_tools_take_the_fast_path_with_the_same_guarantees(harness):
    from temporalio.api.enums.v1 import EventType

    plan = {
        "goal": "fast",
        "steps": [
            step("a", "quick", label="fail once"),
            step("b", "quick", ["a"], label="${a} then b"),
            step("c", "record", ["b"], label="${b}"),
        ],
    }
    run = await harness.start(plan, auto_approve=True)
    assert (await run.result()).outputs == {"c": "FAIL ONCE THEN B"}
    quick = [c for c in harness.calls() if c["tool"] == "quick"]
    assert [(c["label"], c["attempt"]) for c in quick] == [("fail once", 1), ("fail once", 2), ("FAIL ONCE then b", 1)]
    assert quick[0]["key"] == quick[1]["key"]  # one idempotency key across the local retry
    ledger = await run.ledger()
    assert (ledger.steps["a"].attempts, ledger.steps["b"].attempts) == (2, 1)
    # Local steps leave markers, not scheduled activities, in history; the ordinary tool still schedules one.
    scheduled = markers = 0
    async for event in run.handle.fetch_history_events():
        scheduled += event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        markers += event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
    assert markers >= 3 and scheduled == 1  # the catalogue, a and b; step c


# ------------------------------------------------------------------ each run's own workspace


def write_plan(path: str, content: str) -> dict:
    return {"goal": "g", "steps": [step("w", "write_file", path=path, content=content)]}


@pytest.mark.workflow
async def test_each_run_writes_into_its_own_workspace(harness, tmp_path, monkeypatch):
    one, two = tmp_path / "folder-one" / "workspace", tmp_path / "folder-two" / "workspace"
    monkeypatch.setenv("STRATAGEM_WORKSPACE_ROOTS", f"{tmp_path / 'folder-one'}:{tmp_path / 'folder-two'}")
    first = await harness.start(write_plan("memo.txt", "first"), workspace=str(one))
    await harness.wait_for(first, awaiting)
    second = await harness.start(
        write_plan("memo.txt", "second"), workspace=str(two), auto_approve=True
    )  # started later, elsewhere
    # Polled, not awaited: awaiting a result lets the time-skipping server skip time while the
    # first run idles at its review, and under load the first run was then found timed out.
    await harness.wait_for(second, lambda s: s.phase is Phase.succeeded)
    await first.approve(ApproveInput(by="bob", revision=1))
    await first.result()
    assert (one / "memo.txt").read_text() == "first" and (two / "memo.txt").read_text() == "second"
    assert (await first.status()).workspace == str(one)


@pytest.mark.workflow
async def test_a_run_cannot_choose_a_workspace_the_worker_does_not_allow(harness, tmp_path, monkeypatch):
    monkeypatch.setenv("STRATAGEM_WORKSPACE_ROOTS", str(tmp_path / "allowed"))
    target = tmp_path / "elsewhere"
    run = await harness.start(write_plan("x.txt", "x"), workspace=str(target), auto_approve=True, max_replans=0)
    with pytest.raises(WorkflowFailureError):
        await run.result()
    error = (await run.ledger()).steps["w"].error or ""
    assert "does not allow" in error and "STRATAGEM_WORKSPACE_ROOTS" in error
    assert not target.exists()
