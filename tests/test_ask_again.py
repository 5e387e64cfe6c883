"""A person's answer that a later step could not use (issue #36 item 4): answers are typed where
later steps read their fields, and a repair can ask the question again."""

from __future__ import annotations

import json
import shlex

import pytest
from support.cli import TOOLS, acli, one_line_error, write_plan
from support.plans import step

from stratagem.common.errors import DecisionRefusedError
from stratagem.domain.ledger import EventKind, StepStatus
from stratagem.domain.run_types import AnswerInput, ApproveInput, DecisionKind, Phase, RepairAction, RepairInput

TYPED = {"type": "object", "properties": {"vendor": {"type": "string"}}, "required": ["vendor"]}


def asked(step_id: str = "ask", **extra) -> dict:
    return {"id": step_id, "title": "Which vendor?", "kind": "human", "instructions": "Name the vendor.", **extra}


async def repair_waits(harness, run):
    return await harness.wait_for(run, lambda s: s.phase is Phase.awaiting_repair)


@pytest.mark.workflow
async def test_a_failed_step_asks_the_person_again_and_runs_with_the_new_answer(harness):
    plan = {
        "goal": "onboard",
        "steps": [
            asked(answer_schema=TYPED),
            step("register", "fails_once", ["ask"], label="${ask.vendor}"),
            step("done", "record", ["register"], label="registered ${register}"),
        ],
    }
    run = await harness.start(plan)
    await harness.wait_for(run, lambda s: bool(s.pending))
    await run.approve(ApproveInput(by="dana", revision=1))
    await harness.wait_for(run, lambda s: any(p.kind is DecisionKind.human_answer for p in s.pending))
    await run.answer(AnswerInput(step_id="ask", answer={"vendor": "ACME Ltd (old name)"}, by="dana"))
    status = await repair_waits(harness, run)
    [repair] = status.pending
    assert repair.step_id == "register" and repair.ask_again == ["ask"]
    assert "ask 'ask' again" in repair.prompt

    # Asking a step that is no human step, or with arguments, is refused in one line.
    for wrong, why in (
        (RepairInput(by="dana", action=RepairAction.ask_again, step_id="register"), "is not a human step"),
        (RepairInput(by="dana", action=RepairAction.ask_again, step_id="ask", args={"x": 1}), "neither arguments"),
    ):
        with pytest.raises(DecisionRefusedError, match=why):
            await run.repair(wrong)

    await run.repair(RepairInput(by="dana", action=RepairAction.ask_again, step_id="ask", reason="wrong name"))
    await harness.wait_for(run, lambda s: any(p.kind is DecisionKind.human_answer for p in s.pending))
    ledger = await run.ledger()
    assert ledger.steps["ask"].status is StepStatus.running and ledger.steps["register"].status is StepStatus.pending
    await run.answer(AnswerInput(step_id="ask", answer={"vendor": "ACME Supplies GmbH"}, by="dana"))
    result = await run.result()
    assert result.status is Phase.succeeded and result.outputs == {"done": "registered ACME Supplies GmbH"}
    labels = [c["label"] for c in harness.calls() if c["tool"] in ("fails_once", "record")]
    assert labels == ["ACME Ltd (old name)", "ACME Supplies GmbH", "registered ACME Supplies GmbH"]
    repaired = [e for e in (await run.ledger()).events if e.kind is EventKind.step_repaired]
    assert [(e.step_id, e.data["action"]) for e in repaired] == [("ask", "ask_again")]


@pytest.mark.workflow
async def test_an_answer_a_succeeded_step_used_is_not_asked_again(harness):
    """Asking again would leave a step that succeeded with the old answer: the plan is revised instead."""
    plan = {
        "goal": "onboard",
        "steps": [
            asked(answer_schema=TYPED),
            step("note", "record", ["ask"], label="noted ${ask.vendor}"),
            step("register", "broken", ["ask"], reason="the registry is down"),
        ],
    }
    run = await harness.start(plan)
    await harness.wait_for(run, lambda s: bool(s.pending))
    await run.approve(ApproveInput(by="dana", revision=1))
    await harness.wait_for(run, lambda s: any(p.kind is DecisionKind.human_answer for p in s.pending))
    await run.answer(AnswerInput(step_id="ask", answer={"vendor": "ACME"}, by="dana"))
    status = await repair_waits(harness, run)
    assert [p.ask_again for p in status.pending] == [[]]
    with pytest.raises(DecisionRefusedError, match="note already used the answer to 'ask' and succeeded"):
        await run.repair(RepairInput(by="dana", action=RepairAction.ask_again, step_id="ask"))
    assert [c["label"] for c in harness.calls() if c["tool"] == "record"] == ["noted ACME"]


@pytest.mark.system
async def test_a_sentence_for_a_typed_question_is_refused_at_the_command_line(cli_env, tmp_path):
    """What the finance lead of the monthly report did: typed a sentence where the report reads
    fields. The plan now says what the answer is, and the sentence is refused before it is taken."""
    env, harness = cli_env
    schema = {
        "type": "object",
        "properties": {"status": {"enum": ["confirmed", "corrected"]}, "reviewer": {"type": "string"}},
        "required": ["status", "reviewer"],
    }
    plan = {
        "goal": "report",
        "steps": [
            asked("finance_review", answer_schema=schema),
            step("write", "record", ["finance_review"], label="${finance_review.status} by ${finance_review.reviewer}"),
        ],
    }
    path = write_plan(tmp_path / "plan.yaml", plan)
    started = await acli("run", *TOOLS, "--plan", path, "--detach", "--id", "typed-review", "--auto-approve", env=env)
    assert started.returncode == 0, started.stderr
    await harness.wait_for(
        _run(harness, "typed-review"), lambda s: any(p.kind is DecisionKind.human_answer for p in s.pending)
    )
    # `status` shows the command that answers it, with the JSON it takes, not "TEXT".
    shown = await acli("status", "typed-review", env={**env, "COLUMNS": "200"})
    hint = next(line for line in shown.stdout.splitlines() if "answer with:" in line)
    assert hint.endswith(
        """stratagem answer typed-review finance_review '{"status": "confirmed", "reviewer": "..."}' --json-value"""
    )
    assert "fields: status: confirmed / corrected; reviewer: string" in shown.stdout
    sentence = await acli("answer", "typed-review", "finance_review", "the numbers look fine to me", env=env)
    one_line_error(sentence, "step 'finance_review' refused the answer")
    # The hinted command, its placeholder filled in as a person would, is taken.
    command = shlex.split(hint.split("answer with: stratagem ", 1)[1].replace("...", "Dana Whitfield, Finance lead"))
    taken = await acli(*command, "--by", "dana", env=env)
    assert taken.returncode == 0, taken.stderr
    waited = await acli("wait", "typed-review", "--json", env=env)
    assert json.loads(waited.stdout)["outputs"] == {"write": "confirmed by Dana Whitfield, Finance lead"}


def _run(harness, run_id: str):
    from stratagem.client import get_run

    return get_run(harness.client, run_id)


@pytest.mark.unit
def test_a_field_of_an_untyped_answer_is_refused_when_the_plan_is_validated():
    from stratagem.domain.plan import PlanDraft
    from stratagem.domain.validation import plan_problems
    from stratagem.tools import ToolRegistry

    catalog = ToolRegistry.from_modules([]).catalog()  # the built-in tools

    def problems(ask: dict, label: str, **rules) -> list[str]:
        plan = PlanDraft.model_validate(
            {
                "goal": "g",
                "steps": [
                    ask,
                    {
                        "id": "use",
                        "title": "use",
                        "tool": "http_request",
                        "depends_on": ["ask"],
                        "args": {"method": "GET", "url": f"https://example.com/{label}"},
                    },
                ],
            }
        )
        return plan_problems(plan, catalog, **rules)

    [problem] = problems(asked(), "${ask.vendor}")
    assert "references ${ask.vendor}, but 'ask' is a human step without an answer_schema" in problem
    assert "give 'ask' an answer_schema with that field" in problem
    assert problems(asked(), "${ask}") == []  # the whole answer, whatever it is, is fine
    assert problems(asked(answer_schema=TYPED), "${ask.vendor}") == []
    assert problems(asked(), "${ask.vendor}", human_fields=False) == []  # runs from before level 7 replay


@pytest.mark.unit
async def test_a_refused_field_is_the_only_one_asked_again(tmp_path):
    """When the run refuses one field of a typed answer (its schema changed by a revision, say),
    the terminal keeps the others and asks only that one."""
    from stratagem.cli.prompting import Prompter, question, respond
    from stratagem.domain.run_types import PendingDecision

    schema = {
        "type": "object",
        "properties": {"status": {"enum": ["ok", "change"]}, "note": {"type": "string"}},
        "required": ["status", "note"],
    }
    pending = PendingDecision(kind=DecisionKind.human_answer, revision=1, since="2026-11-27T00:00:00Z", step_id="terms")

    class Run:  # the run's side of an answer: it refuses `note` once, then takes the answer
        answers: list = []

        async def answer(self, answer: AnswerInput) -> None:
            self.answers.append(answer.answer)
            if len(self.answers) == 1:
                raise DecisionRefusedError("run r refused the decision: field 'note' of the answer: too vague")

    prompter, run = Prompter(), Run()
    typed = iter(["a note"])

    async def line(timeout=None):
        return next(typed)

    prompter.line = line  # type: ignore[method-assign]  # the lines a person types
    assert await respond(run, pending, "ok", "dana", prompter, {}, schema) == "done"
    assert prompter.kept == {"terms": {"status": "ok"}}
    assert "note (string): " in question(pending, schema, prompter.kept["terms"])
    await respond(run, pending, "a better note", "dana", prompter, {}, schema)
    assert run.answers == [{"status": "ok", "note": "a note"}, {"status": "ok", "note": "a better note"}]
