"""What people see and use of #41 outside the engine, without a server: the console's in-doubt
form and its repair's compensate button read into the decisions they send, the run page's
compensation panel and in-doubt card, the terminal's questions and replies, the hints and exit
statuses of the CLI, the Python handle's two methods and the Slack message. What they do to real
runs is tests/test_effects_runs.py's."""

from __future__ import annotations

import argparse
import io
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from stratagem.cli import parser, prompting, render
from stratagem.cli.errors import EFFECTS_REMAIN, FAILED, run_exit_status
from stratagem.console import decisions
from stratagem.console.access import FormPost
from stratagem.console.views import compensation_view, decision_view, page_templates
from stratagem.domain.decisions import kinds
from stratagem.domain.ledger import Ledger, StepRecord, StepStatus
from stratagem.domain.plan import Author, AuthorKind, Plan
from stratagem.domain.run_reports import StepCounts, undo_steps
from stratagem.domain.run_types import (
    Compensating,
    DecisionInput,
    DecisionKind,
    DecisionOutcome,
    PendingDecision,
    Phase,
    RepairAction,
    RepairInput,
    ResolveInput,
    RunStatus,
)
from stratagem.effect_decisions import EffectDecisions
from stratagem.io.slack_blocks import notification

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 27, 21, 0, tzinfo=UTC)


def plan_of(steps: list[dict[str, Any]], revision: int) -> Plan:
    author = Author(kind=AuthorKind.human, name="ann")
    return Plan.model_validate({"goal": "onboard acme", "steps": steps, "revision": revision, "author": author})


CREATE = {"id": "create", "title": "Create the vendor", "tool": "create_vendor", "args": {"name": "acme"}}
PAY = {"id": "pay", "title": "Pay", "tool": "pay", "args": {"amount": 1200}, "depends_on": ["create"]}
MAIL = {"id": "mail", "title": "Mail them", "tool": "send_mail", "args": {"to": "acme"}}
UNDO = {
    "id": "undo_create",
    "title": "Remove the vendor",
    "tool": "delete_vendor",
    "args": {"name": "acme"},
    "depends_on": ["create"],
}


def compensating_ledger() -> tuple[Ledger, Compensating]:
    """Revision 1 created a vendor, mailed it and failed to pay; revision 2 keeps what ran (the
    failed step leaves it) and adds the undo, after the step it undoes."""
    ledger = Ledger(run_id="r1")
    ledger.add_revision(plan_of([CREATE, PAY, MAIL], 1))
    ledger.add_revision(plan_of([CREATE, MAIL, UNDO], 2))
    ledger.steps["undo_create"] = StepRecord(step_id="undo_create", status=StepStatus.failed, error="vendor locked")
    return ledger, Compensating(reason="step 'pay' failed: card declined", revision=2, cannot_undo=["mail"])


def doubt(step: str = "pay") -> PendingDecision:
    return PendingDecision(
        kind=DecisionKind.in_doubt, revision=1, since=NOW, step_id=step, prompt="the worker was lost during 'pay'"
    )


def posted(form: dict[str, Any]) -> decisions.Posted:
    return decisions.Posted.of(FormPost("dana", {"kind": "in_doubt", "step_id": "pay", **form}))


# ---------------------------------------------------------------------------- the console's forms


async def test_an_in_doubt_form_sends_a_resolve_as_the_signed_in_person():
    kind, said = await decisions.resolve(None, posted({"happened": "yes", "output": '{"id": "tx-9"}'}))  # type: ignore[arg-type]
    assert kind is kinds.RESOLVE
    assert said == ResolveInput(by="dana", step_id="pay", happened=True, output={"id": "tx-9"})
    _, not_said = await decisions.resolve(None, posted({"happened": "no", "comment": "no charge in the bank"}))  # type: ignore[arg-type]
    assert not_said == ResolveInput(by="dana", step_id="pay", happened=False, reason="no charge in the bank")


@pytest.mark.parametrize(
    ("form", "problem"),
    [
        ({}, "say whether the step's effect happened"),  # nothing chosen for the person
        ({"happened": "maybe"}, "say whether the step's effect happened"),
        ({"happened": "no", "output": '{"id": 1}'}, "an output goes with 'It happened'"),
        ({"happened": "yes", "output": "{tx"}, "the output is not JSON"),
    ],
)
async def test_an_in_doubt_form_that_says_neither_or_says_it_wrong_is_refused(form, problem):
    with pytest.raises(ValueError, match=problem):
        await decisions.resolve(None, posted(form))  # type: ignore[arg-type]


async def test_a_repairs_compensate_button_gives_up_on_the_run_not_the_step():
    form = FormPost("dana", {"kind": "repair", "step_id": "pay", "action": "compensate", "comment": "declined"})
    kind, decision = await decisions.repair(None, decisions.Posted.of(form))  # type: ignore[arg-type]
    assert kind is kinds.REPAIR
    assert decision == RepairInput(by="dana", action=RepairAction.compensate, reason="declined")


def test_the_resolve_endpoint_takes_its_body_with_no_name_in_it():
    [endpoint] = [e for e in decisions.ENDPOINTS if e.kind is kinds.RESOLVE]
    body = endpoint.body.model_validate({"step_id": "pay", "happened": True, "output": {"id": "tx-9"}})
    made = endpoint.read(kinds.RESOLVE, "dana", body)
    assert made == ResolveInput(by="dana", step_id="pay", happened=True, output={"id": "tx-9"})
    assert "by" not in endpoint.body.model_fields  # who decides is the signed-in person


# ---------------------------------------------------------------------------- the run page


def test_the_undo_steps_are_those_the_compensation_revision_added():
    ledger, compensation = compensating_ledger()
    assert [(step.id, undoes) for step, undoes in undo_steps(ledger, compensation)] == [("undo_create", ["create"])]
    view = compensation_view(compensation, ledger)
    assert view is not None
    assert [(u["step"].id, u["status"], u["error"]) for u in view["undo"]] == [
        ("undo_create", "failed", "vendor locked")
    ]
    assert view["cannot_undo"] == ["mail"] and compensation_view(None, ledger) is None


def run_page(status: RunStatus, ledger: Ledger) -> str:
    plan = ledger.revisions[-1]
    context = {
        "who": "dana",
        "csrf": "token-1",
        "status": status,
        "ledger": ledger,
        "plan": plan,
        "columns": [],
        "graph": "",
        "result": None,
        "compensation": compensation_view(status.compensation, ledger),
        "risks": {},
        "diff": [],
        "pending": [decision_view(p, plan) for p in status.pending],
        "plan_yaml": "",
        "plan_problems": [],
        "events": [],
        "process": None,
        "error": "",
        "done": "",
    }
    return page_templates().env.get_template("run.html").render(**context)


def status_of(phase: Phase, pending: list[PendingDecision], compensation: Compensating | None = None) -> RunStatus:
    return RunStatus(
        run_id="r1",
        goal="onboard acme",
        phase=phase,
        revision=2,
        approved_revision=2,
        steps=StepCounts(succeeded=1, in_doubt=1),
        pending=pending,
        replans=0,
        max_replans=3,
        compensation=compensation,
    )


def test_the_run_page_shows_an_in_doubt_form_with_the_call_and_two_choices():
    ledger = Ledger(run_id="r1")
    ledger.add_revision(plan_of([CREATE, PAY], 1))
    page = run_page(status_of(Phase.running, [doubt()]), ledger)
    assert 'data-kind="in_doubt"' in page
    assert "word on whether step pay&#39;s effect happened" in page
    assert "pay(amount=1200)" in page  # the call whose effect is in doubt
    assert '<input type="hidden" name="csrf" value="token-1">' in page
    assert 'name="happened" value="yes"' in page and 'name="happened" value="no"' in page
    assert 'name="output"' in page and "checked" not in page  # nothing is chosen for the person


def test_the_run_page_shows_the_compensation_its_undo_steps_and_what_stays():
    ledger, compensation = compensating_ledger()
    repair = PendingDecision(kind=DecisionKind.repair, revision=2, since=NOW, step_id="undo_create", prompt="undo")
    page = run_page(status_of(Phase.awaiting_repair, [repair], compensation), ledger)
    assert 'id="compensation"' in page and "card declined" in page
    assert 'id="undo-undo_create"' in page and "delete_vendor(name=&#34;acme&#34;)" in page
    assert "<b>undo_create</b> undoes create" in page
    assert "vendor locked" in page
    assert "These steps ran and nothing undoes them: mail" in page
    assert 'name="action" value="compensate"' in page  # a repair offers to give up and undo
    ended = run_page(status_of(Phase.compensation_failed, [], compensation), ledger)
    assert 'class="phase phase-compensation_failed"' in ended


def test_the_console_styles_the_new_phases_and_the_in_doubt_status():
    css = (Path(__file__).parent.parent / "stratagem" / "console" / "static" / "console.css").read_text()
    for rule in (".phase-compensated", ".phase-compensation_failed", ".status-in_doubt"):
        assert rule in css


# ---------------------------------------------------------------------------- the terminal


def test_the_terminal_asks_an_in_doubt_step_and_offers_compensate_at_a_repair():
    asked = prompting.question(doubt())
    assert "[h]appened" in asked and "did [n]ot happen (it runs again)" in asked and "[l]ater" in asked
    repair = PendingDecision(kind=DecisionKind.repair, revision=1, since=NOW, step_id="pay", prompt="pay failed")
    assert "[c]ompensate (undo what ran)" in prompting.question(repair)
    stopped = PendingDecision(kind=DecisionKind.repair, revision=1, since=NOW, prompt="no replan left")
    assert "[c]ompensate" in prompting.question(stopped)


class Sent(EffectDecisions):
    """A handle that records what it is asked to send (the terminal and the Python API call these)."""

    def __init__(self) -> None:
        self.sent: list[tuple[kinds.Kind, DecisionInput]] = []

    async def decide(self, kind: kinds.Kind, decision: DecisionInput) -> DecisionOutcome:
        self.sent.append((kind, decision))
        return DecisionOutcome(message="taken", revision=1, phase=Phase.running)

    async def repair(self, decision: RepairInput) -> DecisionOutcome:
        return await self.decide(kinds.REPAIR, decision)


class Typed(prompting.Prompter):
    """The lines a person types, in order."""

    def __init__(self, *lines: str) -> None:
        super().__init__()
        self.lines = list(lines)

    async def line(self, timeout: float | None) -> str | None:
        return self.lines.pop(0) if self.lines else None


async def test_at_the_terminal_happened_asks_for_the_output_again_until_it_is_json(capsys):
    run = Sent()
    reply = await prompting.respond(run, doubt(), "h", "dana", Typed("{tx", '{"id": "tx-9"}'), {})  # type: ignore[arg-type]
    assert reply == "done"
    assert run.sent == [(kinds.RESOLVE, ResolveInput(by="dana", step_id="pay", happened=True, output={"id": "tx-9"}))]
    assert "not valid JSON" in capsys.readouterr().err


async def test_at_the_terminal_only_h_or_n_decides_an_in_doubt_step():
    run = Sent()
    assert await prompting.respond(run, doubt(), "n", "dana", Typed(), {}) == "done"  # type: ignore[arg-type]
    assert await prompting.respond(run, doubt(), "yes", "dana", Typed(), {}) == "done"  # type: ignore[arg-type]
    assert await prompting.respond(run, doubt(), "", "dana", Typed(), {}) == "later"  # type: ignore[arg-type]
    assert run.sent == [(kinds.RESOLVE, ResolveInput(by="dana", step_id="pay", happened=False))]


async def test_at_the_terminal_c_compensates_with_the_reason_typed():
    run = Sent()
    repair = PendingDecision(kind=DecisionKind.repair, revision=1, since=NOW, step_id="pay", prompt="pay failed")
    assert await prompting.respond(run, repair, "c", "dana", Typed("card declined"), {}) == "done"  # type: ignore[arg-type]
    assert run.sent == [(kinds.REPAIR, RepairInput(by="dana", action=RepairAction.compensate, reason="card declined"))]


async def test_the_python_handle_resolves_and_compensates_through_decide():
    run = Sent()
    await run.resolve(ResolveInput(by="dana", step_id="pay", happened=False))
    await run.compensate(by="dana", reason="card declined")
    assert [kind for kind, _ in run.sent] == [kinds.RESOLVE, kinds.REPAIR]
    assert run.sent[1][1] == RepairInput(by="dana", action=RepairAction.compensate, reason="card declined")


def printed(show: Any) -> str:
    out = io.StringIO()
    saved = render.console
    render.console = render.PlainConsole(file=out, width=200)  # type: ignore[misc]
    try:
        show()
    finally:
        render.console = saved  # type: ignore[misc]
    return out.getvalue()


def test_status_shows_the_in_doubt_step_the_compensation_and_the_commands():
    ledger, compensation = compensating_ledger()
    text = printed(lambda: render.status_view(status_of(Phase.running, [doubt()], compensation), ledger, None))
    assert "1 in doubt" in text
    assert "compensation (revision 2): step 'pay' failed: card declined" in text
    assert 'undo undo_create (undoes create): delete_vendor(name="acme") — failed' in text
    assert "effects that stay (nothing undoes them): mail" in text
    assert "stratagem resolve r1 pay --happened [--output JSON]" in text
    assert "stratagem resolve r1 pay --not-happened" in text


def test_a_repair_hint_names_compensate_and_a_plan_table_shows_in_doubt():
    repair = PendingDecision(kind=DecisionKind.repair, revision=1, since=NOW, step_id="pay", prompt="pay failed")
    assert "stratagem compensate r1 --reason TEXT" in render.decision_hint("r1", repair)
    ledger = Ledger(run_id="r1")
    ledger.add_revision(plan_of([CREATE, PAY], 1))
    ledger.steps["pay"] = StepRecord(step_id="pay", status=StepStatus.in_doubt, attempts=1)
    out = io.StringIO()
    Console(file=out, width=200).print(render.plan_table(ledger.revisions[-1], ledger))
    assert "in_doubt" in out.getvalue()


def test_a_compensated_run_exits_1_and_one_whose_compensation_failed_exits_3():
    assert run_exit_status(Phase.succeeded) == 0
    assert run_exit_status(Phase.compensated) == FAILED == run_exit_status(Phase.rejected)
    assert run_exit_status(Phase.compensation_failed) == EFFECTS_REMAIN == 3


def test_on_failure_compensate_is_accepted_and_resolve_takes_one_of_its_two_words(capsys):
    args = parser().parse_args(["run", "--plan", "p.yaml", "--on-failure", "compensate"])
    assert args.on_failure == "compensate"
    with pytest.raises(SystemExit):
        parser().parse_args(["resolve", "r1", "pay", "--happened", "--not-happened"])
    with pytest.raises(SystemExit):
        parser().parse_args(["resolve", "r1", "pay"])  # neither: nothing is assumed
    assert "one of the arguments --happened --not-happened is required" in capsys.readouterr().err


def test_resolve_refuses_an_output_without_happened_and_bad_json_in_one_line(capsys):
    from stratagem.cli import main

    assert main(["resolve", "r1", "pay", "--not-happened", "--output", "{}", "--by", "dana"]) == 2
    assert main(["resolve", "r1", "pay", "--happened", "--output", "{tx", "--by", "dana"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[-2] == "error: --output goes with --happened: a step whose effect did not happen runs again"
    assert lines[-1].startswith("error: --output: not JSON:")


def test_the_inbox_filters_by_the_in_doubt_wait():
    listed = parser().parse_args(["list", "--status", "awaiting-approval", "--waiting", "in_doubt"])
    assert isinstance(listed, argparse.Namespace) and listed.waiting == ["in_doubt"]


# ---------------------------------------------------------------------------- Slack


def test_an_in_doubt_step_in_slack_has_no_button_but_the_consoles_and_says_why():
    message = notification(
        text="Run r1 waits",
        run_id="r1",
        goal="onboard acme",
        key="r1/e/k",
        waiting="word on whether step pay's effect happened",
        kind="in_doubt",
        step_id="pay",
        revision=1,
        prompt="the worker was lost during 'pay'",
        link="https://review.example.com/runs/r1",
        shows=[],
    )
    actions = [b for b in message["blocks"] if b["type"] == "actions"]
    assert [e["action_id"] for e in actions[0]["elements"]] == ["stratagem_open"]
    assert any("Nothing is retried until a person says" in str(b) for b in message["blocks"])
