"""The examples in examples/: each plan validates against its own tools, runs end to end on a real
Temporal server with its scripted model and answers, and leaves the expected records behind.
The quickstart script runs each of them as a newcomer would. The goal example (order_shipping)
runs word for word as its README says, at a terminal: planned, failed, replanned, succeeded; so
does vendor onboarding's compensating run: the bank refuses the payment, the record and the letter
are undone, the run ends compensated."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import os
import shlex
import shutil
import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import Harness, cli_environment, harness_for
from temporalio.client import WorkflowFailureError
from temporalio.testing import WorkflowEnvironment

from stratagem.cli.process_inputs import checked, read_rows
from stratagem.client import get_run
from stratagem.common.errors import DecisionRefusedError, ToolError
from stratagem.domain.ledger import EventKind, StepStatus
from stratagem.domain.plan import AuthorKind, PlanDraft, StepKind
from stratagem.domain.run_types import (
    AnswerInput,
    ApproveInput,
    DecisionKind,
    Phase,
    RepairAction,
    RepairInput,
    RunStatus,
)
from stratagem.domain.validation import validate_plan
from stratagem.io.plan_files import is_process_file, load_plan_file, load_process_file
from stratagem.process_runs import preview
from stratagem.tools import ToolContext, ToolRegistry

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
NAMES = ["vendor_onboarding", "monthly_report", "employee_onboarding", "expense_claim"]
GOAL_EXAMPLES = ["order_shipping"]  # planned from a goal by a scripted planner: no plan.yaml
NOT_EXAMPLES = ["evals"]  # the planner eval set for the examples (docs/evals.md; tests/test_eval.py)


class Example:
    def __init__(self, name: str):
        self.name = name
        self.folder = EXAMPLES / name
        self.plan_file = self.folder / "plan.yaml"
        self.tools = self.folder / "tools.py"
        self.models = self.folder / "models.yaml"
        answers = self.folder / "answers.yaml"
        self.answers: dict[str, Any] = yaml.safe_load(answers.read_text()) if answers.exists() else {}
        inputs = self.folder / "inputs.yaml"
        self.inputs: dict[str, Any] = yaml.safe_load(inputs.read_text()) if inputs.exists() else {}

    def plan(self):
        """The plan a run takes: a process's rendered from the inputs beside it, as the quickstart does."""
        if is_process_file(self.plan_file):
            plan = preview(load_process_file(self.plan_file), self.inputs)[1]
            assert plan is not None
            return plan
        return load_plan_file(self.plan_file)

    def registry(self) -> ToolRegistry:
        return ToolRegistry.from_modules([str(self.tools)])

    def module(self) -> Any:
        """The example's tools module, as the registry imported it."""
        registry = self.registry()
        name = next(
            n for n in ("create_vendor_record", "revenue_by_region", "create_directory_account") if n in registry
        )
        return sys.modules[registry.get(name).function.__module__]


# --- The plans -----------------------------------------------------------------------------------


@pytest.mark.unit
def test_every_example_folder_is_covered():
    found = sorted(p.parent.name for p in EXAMPLES.glob("*/plan.yaml"))
    assert found == sorted(NAMES)
    folders = sorted(p.name for p in EXAMPLES.iterdir() if p.is_dir() and not p.name.startswith(("_", ".")))
    assert folders == sorted(NAMES + GOAL_EXAMPLES + NOT_EXAMPLES)
    listed = (ROOT / "README.md").read_text()
    for name in NAMES + GOAL_EXAMPLES:
        assert f"[`{name}`](examples/{name})" in listed, f"the main README's examples list lacks {name}"
    assert not list(EXAMPLES.glob("*.yaml")), "plans live in their example's folder"


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.unit
def test_plan_validates_against_its_tools(name):
    example = Example(name)
    plan = example.plan()
    registry = example.registry()
    validate_plan(plan, registry.catalog())

    # Each example shows off real tools, not only the built-ins, and everything needed to run offline.
    own_tools = {s.tool for s in plan.steps if s.tool} - set(ToolRegistry.from_modules([]).catalog().names)
    assert own_tools, "the plan should use the example's own tools"
    script = yaml.safe_load(example.models.read_text())
    for step in plan.steps:
        if step.kind is StepKind.llm:
            assert step.id in script["executor"], f"no scripted response for llm step '{step.id}'"
        if step.kind is StepKind.human:
            assert step.id in example.answers, f"no answer in answers.yaml for human step '{step.id}'"
    assert (example.folder / "README.md").exists()


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.unit
def test_readme_runs_the_plan_the_way_the_cli_does(name):
    """`run --plan` loads tools.py and models.yaml beside the plan itself; the READMEs once told
    users to pass --tools, while the main README said it was automatic."""
    readme = (EXAMPLES / name / "README.md").read_text()
    if is_process_file(EXAMPLES / name / "plan.yaml"):  # a process: run with its inputs
        assert f"`stratagem run --plan examples/{name}/plan.yaml --inputs examples/{name}/inputs.yaml`" in readme
    else:
        assert f"`stratagem run --plan examples/{name}/plan.yaml`" in readme
    assert "--tools" not in readme


@pytest.mark.unit
def test_the_examples_that_are_processes_take_their_inputs():
    """Issue #40: the monthly report takes its month, vendor onboarding the vendor's fields (and
    ships a CSV file of three vendors, each a run); nothing of one month or one vendor is left in the plans."""
    report = load_process_file(EXAMPLES / "monthly_report" / "plan.yaml")
    assert list(report.inputs) == ["month"] and report.inputs["month"]["default"] == "${nominal.previous_month}"
    assert "2025-10" not in (EXAMPLES / "monthly_report" / "plan.yaml").read_text().split("steps:")[1]
    vendor = load_process_file(EXAMPLES / "vendor_onboarding" / "plan.yaml")
    assert vendor.required == ["vendor", "country", "vat_id", "iban", "contact_email"]
    assert "ACME" not in (EXAMPLES / "vendor_onboarding" / "plan.yaml").read_text().split("steps:")[1]
    rows = read_rows(vendor, str(EXAMPLES / "vendor_onboarding" / "vendors.csv"))
    assert len(rows) == 3
    registry = Example("vendor_onboarding").registry()
    for row in rows:
        values, problems = checked(vendor, row.values, row.problems, "UTC")
        assert problems == [], row
        validate_plan(preview(vendor, values)[1], registry.catalog())
    # Each vendor passes the example's own checks, so each run of the CSV file can succeed.
    tools = Example("vendor_onboarding").module()
    for row in rows:
        v = row.values
        assert tools.check_sanctions(v["vendor"], v["country"])["clear"]
        assert tools.validate_vat(v["vat_id"])["valid"]
        assert tools.verify_bank_details(v["iban"], v["vendor"], v["country"])["verified"]


@pytest.mark.unit
def test_plans_use_parallel_steps_gates_and_people():
    kinds = {}
    for name in NAMES:
        plan = Example(name).plan()
        roots = [s.id for s in plan.steps if not s.depends_on]
        siblings = max(sum(1 for s in plan.steps if s.depends_on == [root]) for root in roots)
        kinds[name] = {
            "parallel": siblings >= 3 or len(roots) >= 3,
            "gated": any(s.needs_step_approval for s in plan.steps),
            "llm": any(s.kind is StepKind.llm for s in plan.steps),
            "human": any(s.kind is StepKind.human for s in plan.steps),
        }
    assert kinds == {
        "vendor_onboarding": {"parallel": True, "gated": True, "llm": True, "human": False},
        "monthly_report": {"parallel": True, "gated": False, "llm": True, "human": True},
        "employee_onboarding": {"parallel": True, "gated": True, "llm": True, "human": True},
        # Its payment is gated by the tool's declared risk, not by the plan (the plan says low).
        "expense_claim": {"parallel": False, "gated": False, "llm": False, "human": True},
    }


# --- Running them ---------------------------------------------------------------------------------


def example_harness(env: WorkflowEnvironment, tmp_path: Path, example: Example):
    """Like the `harness` fixture, with the example's tools module instead of the fixture tools."""
    return harness_for(env, tmp_path, example.registry())


async def drive(
    run, answers: dict[str, Any], timeout: float = 60
) -> tuple[RunStatus, list[tuple[str, str | None, str]]]:
    """Approve the plan and gated steps and answer human steps, as the quickstart does, until the run ends.

    Returns the final status and the decisions made: (kind, step id, prompt)."""
    decisions = []
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        status = await run.status()
        if status.phase.finished:
            return status, decisions
        for pending in status.pending:
            decisions.append((pending.kind.value, pending.step_id, pending.prompt))
            if pending.kind is DecisionKind.plan_approval:
                await run.approve(ApproveInput(by="reviewer", revision=pending.revision))
            elif pending.kind is DecisionKind.step_approval:
                await run.approve(ApproveInput(by="approver", step_id=pending.step_id))
            elif pending.kind is DecisionKind.repair:
                # The quickstart's person gives up on a failed check, saying why.
                await run.repair(RepairInput(by="ops", action=RepairAction.stop, reason=pending.prompt))
            else:
                await run.answer(AnswerInput(step_id=pending.step_id, answer=answers[pending.step_id], by="manager"))
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"the run did not finish; last status: {status.model_dump_json()}")
        await asyncio.sleep(0.05)


async def run_example(harness: Harness, example: Example, plan=None):
    run = await harness.start(plan or example.plan(), by="ops", executor=f"scripted:{example.models}")
    status, decisions = await drive(run, example.answers)
    return run, status, decisions


def started_before_any_finished(ledger, step_ids: set[str]) -> bool:
    """The steps were all running at once: each started before the first of them finished."""
    kinds = [(e.kind, e.step_id) for e in ledger.events if e.step_id in step_ids]
    last_start = max(i for i, (k, _) in enumerate(kinds) if k is EventKind.step_started)
    first_end = min(i for i, (k, _) in enumerate(kinds) if k is EventKind.step_succeeded)
    return last_start < first_end


def read_csv(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8"))))


@pytest.mark.workflow
async def test_vendor_onboarding_end_to_end(time_env, tmp_path):
    example = Example("vendor_onboarding")
    async with example_harness(time_env, tmp_path, example) as harness:
        run, status, decisions = await run_example(harness, example)
        assert status.phase is Phase.succeeded, status.reason
        result = await run.result()
        ledger = await run.ledger()

    # Only the plan and the high-risk payment asked for a decision.
    assert [(kind, step) for kind, step, _ in decisions] == [
        ("plan_approval", None),
        ("step_approval", "first_payment"),
    ]
    assert started_before_any_finished(ledger, {"sanctions_check", "vat_check", "bank_check"})

    ws = harness.workspace
    vendor = json.loads((ws / "vendors" / "V-C0B7E361.json").read_text())
    assert (vendor["vat_id"], vendor["iban"]) == ("DE129273398", "DE89370400440532013000")
    assert vendor["idempotency_key"] == f"{run.id}/{run.handle.first_execution_run_id}/register/r1"

    assert ledger.steps["bank_check"].output["bank"] == "Commerzbank Köln"
    letter = (ws / "letters" / "V-C0B7E361-welcome.txt").read_text()
    written = yaml.safe_load(example.models.read_text())["executor"]["welcome_letter"]
    assert letter == f"To: ACME Supplies GmbH <accounts@acme-supplies.example>, vendor id V-C0B7E361\n\n{written}"

    [payment] = read_csv(ws / "payments" / "ledger.csv")
    assert payment["amount_eur"] == "1200.00"
    assert payment["iban"] == "DE89370400440532013000"
    assert payment["reference"] == "Onboarding V-C0B7E361: first order PO-2025-1042"
    assert payment["idempotency_key"].endswith("/first_payment/r1")
    assert result.outputs == {
        "first_payment": {
            "payment_id": payment["payment_id"],
            "amount_eur": 1200.0,
            "ledger": "payments/ledger.csv",
            "repeated": False,
        }
    }


@pytest.mark.workflow
async def test_vendor_onboarding_stops_before_paying_when_a_check_fails(time_env, tmp_path):
    example = Example("vendor_onboarding")
    data = example.plan().model_dump(mode="json")
    for step in data["steps"]:
        if step["id"] == "vat_check":
            step["args"]["vat_id"] = "DE123456789"  # fails the German check digit
    async with example_harness(time_env, tmp_path, example) as harness:
        run, status, decisions = await run_example(harness, example, plan=data)
        with pytest.raises(WorkflowFailureError):
            await run.result()
        ledger = await run.ledger()

    assert status.phase is Phase.failed
    assert "fails the German check digit (expected 8, found 9)" in status.reason
    assert ledger.steps["vat_check"].status is StepStatus.failed and ledger.steps["vat_check"].attempts == 1
    for later in ("welcome_letter", "file_letter", "first_payment"):
        assert ledger.steps[later].status is not StepStatus.succeeded
    # The run waited for a repair instead of failing; the payment never asked for approval.
    assert [kind for kind, _, _ in decisions] == ["plan_approval", "repair"]
    assert "stopped by ops" in status.reason
    assert not (harness.workspace / "payments").exists()


def closed_account_plan():
    """The vendor whose bank refuses the first payment, as `--inputs closed_account.yaml` renders it."""
    inputs = yaml.safe_load((EXAMPLES / "vendor_onboarding" / "closed_account.yaml").read_text())
    plan = preview(load_process_file(EXAMPLES / "vendor_onboarding" / "plan.yaml"), inputs)[1]
    assert plan is not None
    return plan


@pytest.mark.workflow
async def test_vendor_onboarding_compensates_when_the_bank_refuses_the_payment(time_env, tmp_path):
    example = Example("vendor_onboarding")
    async with example_harness(time_env, tmp_path, example) as harness:
        run = await harness.start(
            closed_account_plan(), by="ops", executor=f"scripted:{example.models}", on_failure="compensate"
        )
        status, decisions = await drive(run, example.answers)
        ledger = await run.ledger()

    assert status.phase is Phase.compensated, status.reason
    # The plan, the payment, then the compensation plan: reviewed like a revision.
    assert [(kind, step) for kind, step, _ in decisions] == [
        ("plan_approval", None),
        ("step_approval", "first_payment"),
        ("plan_approval", None),
    ]
    payment = ledger.steps["first_payment"]
    assert (payment.status, payment.attempts) == (StepStatus.failed, 1)  # the bank's answer is final
    assert "the bank refused the payment to DE47100700000532470611 (AC04: the account is closed)" in payment.error
    # The letter first (it was built on the record), then the record; nothing else had an effect.
    undone = [e.step_id for e in ledger.events if e.kind is EventKind.step_succeeded and e.revision == 2]
    assert undone == ["undo-file_letter", "undo-register"]
    assert ledger.steps["undo-register"].output == {"vendor_id": "V-813BAAB1", "removed": True, "kept_because": None}
    assert ledger.steps["undo-file_letter"].output == {"path": "letters/V-813BAAB1-welcome.txt", "discarded": True}
    kinds = [e.kind for e in ledger.events]
    assert kinds.index(EventKind.step_failed) < kinds.index(EventKind.compensation_planned)
    assert kinds.count(EventKind.run_compensated) == 1

    ws = harness.workspace
    assert not (ws / "vendors" / "V-813BAAB1.json").exists()
    assert not (ws / "letters" / "V-813BAAB1-welcome.txt").exists()
    assert not (ws / "payments").exists()


@pytest.mark.system
async def test_vendor_onboarding_compensates_as_its_readme_says(dev_env, tmp_path):
    """The README's compensating command, word for word, at a terminal, approving as it says."""
    from support.terminal import Terminal, terminal_run_id

    readme = (EXAMPLES / "vendor_onboarding" / "README.md").read_text()
    [command] = [line for line in readme.splitlines() if line.startswith("stratagem run ") and "compensate" in line]
    example = Example("vendor_onboarding")
    async with harness_for(dev_env, tmp_path, example.registry()) as harness:
        env = {**cli_environment(dev_env, harness, tmp_path / "home"), "COLUMNS": "200"}
        for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL"):
            env.pop(name, None)
        terminal = Terminal(shlex.split(command)[1:], env, ROOT)
        try:
            await terminal.expect("approve revision 1?")
            terminal.type("a\n")
            await terminal.expect("approve step 'first_payment'")
            terminal.type("y\n")
            await terminal.expect(
                "the bank refused the payment to DE47100700000532470611 (AC04: the account is closed)"
            )
            await terminal.expect("approve revision 2?")
            review = terminal.text.rsplit("approve revision 1?", 1)[1]
            assert "undo-register" in review and "undo-file_letter" in review
            terminal.type("a\n")
            await terminal.expect("compensated")
            assert await terminal.exit_status() == 1  # the goal was not reached, though nothing stays
            assert "Traceback" not in terminal.text
        finally:
            terminal.close()
        run = get_run(harness.client, terminal_run_id(terminal.text))
        harness.runs.append(run)  # its history is replayed when the harness closes
        status = await run.status()

    assert status.phase is Phase.compensated
    ws = harness.workspace
    assert not (ws / "vendors" / "V-813BAAB1.json").exists()
    assert not (ws / "letters" / "V-813BAAB1-welcome.txt").exists()
    assert not (ws / "payments").exists()


@pytest.mark.workflow
async def test_expense_claim_refuses_a_free_text_answer_and_is_repaired(time_env, tmp_path):
    """The example's README, as a person at the terminal would live it."""
    example = Example("expense_claim")
    async with example_harness(time_env, tmp_path, example) as harness:
        run = await harness.start(example.plan(), by="ops")
        await harness.wait_for(run, lambda s: s.phase is Phase.awaiting_approval)
        await run.approve(ApproveInput(by="reviewer", revision=1))
        await harness.wait_for(run, lambda s: any(p.kind is DecisionKind.human_answer for p in s.pending))
        with pytest.raises(DecisionRefusedError) as refused:
            await run.answer(AnswerInput(step_id="finance_review", answer="ok", by="fin"))
        assert "the answer: 'ok' is not of type 'object'" in str(refused.value)
        with pytest.raises(DecisionRefusedError) as refused:
            await run.answer(AnswerInput(step_id="finance_review", answer={"decision": "approve"}, by="fin"))
        assert "amount_eur" in str(refused.value)
        await run.answer(
            AnswerInput(step_id="finance_review", answer={"decision": "approve", "amount_eur": 184}, by="fin")
        )

        status = await harness.wait_for(run, lambda s: s.phase is Phase.awaiting_repair)
        assert "accounting period 2026-10 is closed" in status.pending[0].prompt
        # An output given by hand is checked against the tool's return type (Posting).
        with pytest.raises(DecisionRefusedError) as refused:
            await run.repair(
                RepairInput(by="fin", action=RepairAction.skip, step_id="post", output={"posting_id": "P"})
            )
        assert "step 'post' refused the output" in str(refused.value) and "the output lacks field" in str(refused.value)
        args = {"claim_id": "EC-7", "amount_eur": "${finance_review.amount_eur}", "period": "2026-11"}
        await run.repair(RepairInput(by="fin", action=RepairAction.retry, step_id="post", args=args))

        status = await harness.wait_for(run, lambda s: any(p.kind is DecisionKind.step_approval for p in s.pending))
        assert status.pending[0].step_id == "pay" and "risk high" in status.pending[0].prompt
        # The approver sees who is paid, how much (finance's answer) and the posting the repair made.
        shown = status.pending[0].preview
        assert shown is not None and shown.tool == "reimburse"
        assert shown.args == {"employee": "Ada Lovelace", "amount_eur": 184, "reference": "P-EC-7-2026-11"}
        assert not (harness.workspace / "payments").exists()  # nothing paid before the approval
        await run.approve(ApproveInput(by="cfo", step_id="pay", digest=shown.digest))
        result = await run.result()

    assert result.status is Phase.succeeded and result.revision == 2
    assert result.outputs == {"pay": "EUR 184 to Ada Lovelace (P-EC-7-2026-11)"}
    rows = (harness.workspace / "payments" / "reimbursements.csv").read_text().splitlines()
    assert len(rows) == 1 and rows[0].startswith("Ada Lovelace,184,P-EC-7-2026-11,")


@pytest.mark.workflow
async def test_monthly_report_end_to_end(time_env, tmp_path):
    example = Example("monthly_report")
    async with example_harness(time_env, tmp_path, example) as harness:
        run, status, decisions = await run_example(harness, example)
        assert status.phase is Phase.succeeded, status.reason
        result = await run.result()
        ledger = await run.ledger()

    # The revenue figure computed here, independently of the tools, from the shipped CSV.
    sales = read_csv(EXAMPLES / "monthly_report" / "data" / "sales.csv")
    october = sum(
        Decimal(r["quantity"]) * Decimal(r["unit_price_eur"]) for r in sales if r["order_date"].startswith("2025-10")
    )
    assert october == Decimal("58225.00")
    assert ledger.steps["revenue"].output["total_display"] == "EUR 58,225.00"
    assert ledger.steps["revenue"].output["change_display"] == "+12.0%"
    assert ledger.steps["sla"].output["breach_rate_pct"] == 23.8
    assert started_before_any_finished(ledger, {"revenue", "customers", "sla"})

    # The finance lead was asked with the KPI figures filled in.
    [(_, _, _), (kind, step_id, prompt)] = decisions
    assert (kind, step_id) == ("human_answer", "finance_review")
    assert "revenue EUR 58,225.00 (16 orders, +12.0% on the previous month)" in prompt
    assert "SLA breach rate 23.8% (5 of 21 tickets)" in prompt
    assert "Revenue reached EUR 58,225.00 in October" in prompt  # the draft commentary
    assert "${" not in prompt
    assert ledger.steps["finance_review"].output == example.answers["finance_review"]

    assert result.outputs == {
        "write_report": {"path": "reports/operations-2025-10.md", "bytes": ledger.steps["write_report"].output["bytes"]}
    }
    report = (harness.workspace / "reports" / "operations-2025-10.md").read_text()
    assert report.startswith("# Operations report, October 2025\n")
    assert "| **Total** | **EUR 58,225.00** | 100.0% |" in report
    assert "| DACH | EUR 25,575.00 | 43.9% |" in report
    assert "| P1 | 4 h | 5 | 1 | 3.6 h |" in report
    assert "Breach rate 23.8% (T-7341, T-7362, T-7377, T-7438, T-7494)" in report
    assert "Support missed its resolution target on 5 of 21 tickets (23.8%)." in report
    assert "- Figures confirmed by Dana Whitfield, Finance lead" in report
    assert "${" not in report


@pytest.mark.workflow
async def test_employee_onboarding_end_to_end(time_env, tmp_path):
    example = Example("employee_onboarding")
    async with example_harness(time_env, tmp_path, example) as harness:
        run, status, decisions = await run_example(harness, example)
        assert status.phase is Phase.succeeded, status.reason
        ledger = await run.ledger()

    asked = sorted((kind, step) for kind, step, _ in decisions)
    assert asked == [("human_answer", "buddy"), ("plan_approval", None), ("step_approval", "equipment")]
    prompt = next(p for kind, _, p in decisions if kind == "human_answer")
    assert prompt.startswith(
        "Zoë Lindqvist (zlindqvist@northwind-logistics.example) joins Platform Engineering on 2025-11-03."
    )
    assert started_before_any_finished(ledger, {"slack", "github", "jira"})

    ws = harness.workspace
    [user] = json.loads((ws / "directory" / "users.json").read_text())
    assert (user["username"], user["employee_id"]) == ("zlindqvist", "E10001")
    for system in ("slack", "github", "jira"):
        [entry] = [json.loads(line) for line in (ws / "provisioning" / f"{system}.jsonl").read_text().splitlines()]
        assert entry["username"] == "zlindqvist"
    [order] = read_csv(ws / "procurement" / "orders.csv")
    assert (order["employee"], order["total_eur"], order["lead_time_days"]) == ("E10001", "3413.00", "5")

    pack = (ws / "onboarding" / "zlindqvist" / "welcome-pack.md").read_text()
    assert "Buddy: Tomás Reyes <t.reyes@northwind-logistics.example>" in pack
    assert "- GitHub (github-" in pack and "northwind/developers, northwind/platform" in pack
    assert f"Order {order['order_id']} (EUR 3,413.00), ready in 5 working days" in pack
    assert "Your onboarding buddy is Tomás Reyes" in pack
    assert "${" not in pack


# --- The tools on their own -------------------------------------------------------------------------


def context(tmp_path: Path, step_id: str = "step", run_id: str = "run-1") -> ToolContext:
    return ToolContext(run_id=run_id, step_id=step_id, revision=1, attempt=1, workspace=tmp_path, execution_id="exec-1")


@pytest.mark.unit
def test_vendor_checks_follow_the_real_rules():
    tools = Example("vendor_onboarding").module()
    assert tools.validate_vat("DE 129.273.398")["vat_id"] == "DE129273398"
    assert tools.validate_vat("NL004495445B01")["checksum_verified"] is False
    with pytest.raises(ToolError, match="check digit"):
        tools.validate_vat("DE123456789")
    with pytest.raises(ToolError, match="format"):
        tools.validate_vat("FR123")
    assert tools.verify_bank_details("DE89 3704 0044 0532 0130 00", "ACME", "DE")["masked_iban"].endswith("3000")
    with pytest.raises(ToolError, match="checksum"):
        tools.verify_bank_details("DE88 3704 0044 0532 0130 00", "ACME", "DE")
    with pytest.raises(ToolError, match="seated in FR"):
        tools.verify_bank_details("DE89370400440532013000", "ACME", "FR")
    assert tools.check_sanctions("ACME Supplies GmbH", "DE")["clear"] is True
    with pytest.raises(ToolError, match="matches sanctioned party 'Kestrel Maritime Logistics'"):
        tools.check_sanctions("KESTREL maritime logistics, Ltd.", "AE")
    with pytest.raises(ToolError, match="embargo"):
        tools.check_sanctions("Anything Ltd", "kp")


@pytest.mark.unit
def test_payments_are_scheduled_once_per_idempotency_key(tmp_path):
    tools = Example("vendor_onboarding").module()
    first = tools.schedule_payment("ACME", 1200, "DE89370400440532013000", ctx=context(tmp_path, "pay"))
    again = tools.schedule_payment("ACME", 1200, "DE89370400440532013000", ctx=context(tmp_path, "pay"))
    other = tools.schedule_payment("ACME", 99.5, "DE89370400440532013000", ctx=context(tmp_path, "pay", run_id="run-2"))
    assert (first["repeated"], again["repeated"], other["repeated"]) == (False, True, False)
    assert again["payment_id"] == first["payment_id"] != other["payment_id"]
    assert [r["amount_eur"] for r in read_csv(tmp_path / "payments" / "ledger.csv")] == ["1200.00", "99.50"]
    with pytest.raises(ToolError, match="outside"):
        tools.schedule_payment("ACME", 0, "DE89370400440532013000", ctx=context(tmp_path, "zero"))


@pytest.mark.unit
def test_the_undos_remove_only_what_this_onboarding_added(tmp_path):
    tools = Example("vendor_onboarding").module()
    registry = Example("vendor_onboarding").registry()
    assert registry.catalog().get("create_vendor_record").compensate == "remove_vendor"  # type: ignore[union-attr]
    args = ("Brightwater Components GmbH", "DE", "DE276814405", "DE47100700000532470611", "ap@b.example")
    created = tools.create_vendor_record(*args, ctx=context(tmp_path, "register"))
    record = tmp_path / created["path"]
    # An earlier onboarding's vendor is not this run's to remove.
    earlier = tools.create_vendor_record(*args, ctx=context(tmp_path, "register", run_id="run-2"))
    assert tools.remove_vendor("DE276814405", earlier, ctx=context(tmp_path, "undo"))["removed"] is False
    assert record.exists()
    # Arguments that name another file than the VAT id's record (a plan can write them) remove nothing.
    for forged in ({**created, "vendor_id": "V-00000000"}, {**created, "vendor_id": "../payments/ledger"}):
        with pytest.raises(ToolError, match="is not the vendor id of VAT id") as refused:
            tools.remove_vendor("DE276814405", forged, ctx=context(tmp_path, "undo"))
        assert refused.value.retryable is False
    assert record.exists()
    removed = tools.remove_vendor("DE 276 814 405", created, ctx=context(tmp_path, "undo"))
    again = tools.remove_vendor("DE276814405", created, ctx=context(tmp_path, "undo"))
    assert (removed["removed"], again["removed"], again["kept_because"]) == (True, False, "already removed")
    assert not record.exists()

    letter = tmp_path / "letters" / "V-813BAAB1-welcome.txt"
    letter.parent.mkdir()
    letter.write_text("Dear new partner")
    with pytest.raises(ToolError, match="is not a welcome letter's path"):
        tools.discard_letter("payments/ledger.csv", ctx=context(tmp_path, "undo"))
    assert tools.discard_letter("letters/V-813BAAB1-welcome.txt", ctx=context(tmp_path, "undo"))["discarded"]
    assert not letter.exists()


@pytest.mark.unit
def test_the_bank_refuses_a_closed_account_for_good_and_nothing_is_paid(tmp_path):
    tools = Example("vendor_onboarding").module()
    inputs = yaml.safe_load((EXAMPLES / "vendor_onboarding" / "closed_account.yaml").read_text())
    # Every check passes: only the bank, when asked to pay, knows the account is closed.
    assert tools.check_sanctions(inputs["vendor"], inputs["country"])["clear"]
    assert tools.validate_vat(inputs["vat_id"])["checksum_verified"]
    assert tools.verify_bank_details(inputs["iban"], inputs["vendor"], inputs["country"])["verified"]
    with pytest.raises(ToolError, match=r"the bank refused the payment .* \(AC04: the account is closed\)") as refused:
        tools.schedule_payment(inputs["vendor"], 3400, inputs["iban"], ctx=context(tmp_path, "pay"))
    assert refused.value.retryable is False
    assert not (tmp_path / "payments" / "ledger.csv").exists()


@pytest.mark.unit
def test_report_kpis_refuse_paths_outside_the_data_folder():
    tools = Example("monthly_report").module()
    with pytest.raises(ToolError, match="outside the data folder"):
        tools.revenue_by_region("2025-10", file="../plan.yaml")
    with pytest.raises(ToolError, match="no orders dated in 2024-01"):
        tools.revenue_by_region("2024-01")
    with pytest.raises(ToolError, match="month must look like"):
        tools.ticket_sla("October")


@pytest.mark.unit
def test_a_new_hire_gets_one_account_however_often_the_step_runs(tmp_path):
    tools = Example("employee_onboarding").module()
    args = ("Zoë Lindqvist", "Engineering", "Platform Engineer", "m@example.com", "2025-11-03")
    first = tools.create_directory_account(*args, ctx=context(tmp_path, "account"))
    retried = tools.create_directory_account(*args, ctx=context(tmp_path, "account"))
    later_run = tools.create_directory_account(*args, ctx=context(tmp_path, "account", run_id="run-2"))
    namesake = tools.create_directory_account(
        "Zoe Lindqvist", "Sales", "Account Executive", "m@example.com", "2026-01-05", ctx=context(tmp_path, "other")
    )
    assert (first["created"], retried["repeated"], later_run["created"]) == (True, True, False)
    assert first["username"] == retried["username"] == later_run["username"] == "zlindqvist"
    assert namesake["username"] == "zlindqvist2"
    with pytest.raises(ToolError, match="over the EUR 5000 limit"):
        tools.order_equipment("E1", ["laptop-16-developer"] * 3, "CC-1", "HQ", ctx=context(tmp_path, "eq"))


# --- The quickstart script ----------------------------------------------------------------------------


def quickstart(plan_file: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "STRATAGEM_WORKSPACE"}
    return subprocess.run(
        [sys.executable, str(EXAMPLES / "quickstart.py"), str(plan_file)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.system
def test_quickstart_runs_the_example(name, tmp_path):
    example = Example(name)
    done = quickstart(example.plan_file, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "(no API key is used)" in out
    assert "-> approving revision 1 as reviewer 'quickstart'" in out
    for step in example.answers:
        assert f"-> answering {step} as 'quickstart' from answers.yaml" in out
    repaired = (example.folder / "repairs.yaml").exists()  # a repair with new arguments is revision 2
    assert f"succeeded (revision {2 if repaired else 1})" in out
    assert "Temporal Server:" not in out  # the server's banner stays out of the run's output
    assert (tmp_path / "workspace").is_dir()


@pytest.mark.system
def test_quickstart_without_an_answer_stops_and_says_what_is_missing(tmp_path):
    folder = tmp_path / "report"
    shutil.copytree(EXAMPLES / "monthly_report", folder, ignore=shutil.ignore_patterns("answers.yaml", "__pycache__"))
    done = quickstart(folder / "plan.yaml", tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "step 'finance_review' needs an answer: add 'finance_review: <answer>' to answers.yaml" in done.stdout
    assert "run ended: cancelled" in done.stdout


# --- Planning from a goal, and replanning after a failure (order_shipping) ---------------------------

SHIPPING = EXAMPLES / "order_shipping"


def shipping_tools() -> Any:
    registry = ToolRegistry.from_modules([str(SHIPPING / "tools.py")])
    return registry, sys.modules[registry.get("quote_freight").function.__module__]


@pytest.mark.unit
def test_the_scripted_planner_s_plans_validate_against_the_example_s_tools():
    registry, _ = shipping_tools()
    script = yaml.safe_load((SHIPPING / "models.yaml").read_text())
    first, revised = (PlanDraft.model_validate(entry["plan"]) for entry in script["planner"])
    for plan in (first, revised):
        validate_plan(plan, registry.catalog())
        for step in plan.steps:
            if step.kind is StepKind.llm:
                assert step.id in script["executor"], f"no scripted response for llm step '{step.id}'"
    # The revision keeps what will have succeeded exactly as it was, so it is carried, not refused.
    kept = {"order", "reserve"}
    assert [s for s in first.steps if s.id in kept] == [s for s in revised.steps if s.id in kept]
    assert {s.id for s in first.steps} - {s.id for s in revised.steps} == {"quote_nordbahn"}


@pytest.mark.unit
def test_carriers_quote_only_where_they_deliver_and_an_order_ships_once(tmp_path):
    _, tools = shipping_tools()
    with pytest.raises(ToolError, match="Nordbahn Cargo does not deliver to AT") as refused:
        tools.quote_freight("nordbahn", "AT", "8020", 3, 690)
    assert refused.value.retryable is False  # another attempt cannot help: the planner must
    quote = tools.quote_freight("alpentrans", "at", "8020", 3, 690)
    assert (quote["carrier_name"], quote["price_eur"]) == ("Alpentrans Logistik", 518.5)  # 3 x 110 + 690 x 0.15 + 85
    first = tools.reserve_stock("SO-1042", 3, ctx=context(tmp_path, "reserve"))
    again = tools.reserve_stock("SO-1042", 3, ctx=context(tmp_path, "reserve"))
    assert (first["repeated"], again["repeated"], again["reservation_id"]) == (False, True, first["reservation_id"])
    booked = tools.book_shipment("SO-1042", quote["quote_id"], first["reservation_id"], ctx=context(tmp_path, "book"))
    twice = tools.book_shipment(
        "SO-1042", quote["quote_id"], first["reservation_id"], ctx=context(tmp_path, "book", run_id="run-2")
    )
    assert (booked["repeated"], twice["repeated"], twice["shipment_id"]) == (False, True, booked["shipment_id"])
    assert (booked["pickup_on"], booked["delivery_on"]) == ("2025-11-10", "2025-11-13")  # Monday + 3 working days


@pytest.mark.system
async def test_order_shipping_is_planned_fails_replans_and_succeeds_as_its_readme_says(dev_env, tmp_path):
    """The README's command, word for word, at a terminal, approving as its README says."""
    from support.terminal import Terminal, terminal_run_id

    readme = (SHIPPING / "README.md").read_text()
    [command] = [line for line in readme.splitlines() if line.startswith("stratagem run ")]
    args = shlex.split(command)[1:]
    registry, _ = shipping_tools()
    async with harness_for(dev_env, tmp_path, registry) as harness:
        env = {**cli_environment(dev_env, harness, tmp_path / "home"), "COLUMNS": "200"}
        for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL"):
            env.pop(name, None)  # no key, no endpoint: it must not need one
        terminal = Terminal(args, env, ROOT)  # from the repository's root, as the README says
        try:
            await terminal.expect("approve revision 1?")
            terminal.type("a\n")
            await terminal.expect("step failed quote_nordbahn — quote_freight: Nordbahn Cargo does not deliver to AT")
            await terminal.expect("approve revision 2?")
            assert "+ quote_alpentrans" in terminal.text and "- quote_nordbahn" in terminal.text
            assert "args.quote_id: ${quote_nordbahn.quote_id} → ${quote_alpentrans.quote_id}" in terminal.text
            terminal.type("a\n")
            await terminal.expect("approve step 'book' (Book the truck), risk high? [y]es / [n]o / [l]ater:")
            terminal.type("y\n")
            await terminal.expect("succeeded (revision 2, 1 replan)")
            assert await terminal.exit_status() == 0
            assert "Traceback" not in terminal.text
        finally:
            terminal.close()
        run = get_run(harness.client, terminal_run_id(terminal.text))
        harness.runs.append(run)  # its history is replayed when the harness closes
        ledger = await run.ledger()
        result = await run.result()

    assert (result.status, result.revision, result.replans) == (Phase.succeeded, 2, 1)
    assert [(p.revision, p.author.kind) for p in ledger.revisions] == [(1, AuthorKind.model), (2, AuthorKind.model)]
    assert [(d.action.value, d.revision, d.step_id) for d in ledger.decisions] == [
        ("approve", 1, None),
        ("approve", 2, None),
        ("approve", 2, "book"),
    ]
    # The failed step is recorded, with its error, after one attempt; the replan says why.
    failed = ledger.steps["quote_nordbahn"]
    assert (failed.status, failed.attempts, failed.revision) == (StepStatus.failed, 1, 1)
    assert "Nordbahn Cargo does not deliver to AT" in failed.error
    [replan] = [e for e in ledger.events if e.kind is EventKind.replan_requested]
    assert replan.message.startswith("step 'quote_nordbahn' failed")
    # What succeeded under revision 1 was kept and never ran again.
    started = [e.step_id for e in ledger.events if e.kind is EventKind.step_started]
    for kept in ("order", "reserve"):
        record = ledger.steps[kept]
        assert (record.status, record.revision, record.attempts, started.count(kept)) == (StepStatus.succeeded, 1, 1, 1)
    for new in ("quote_alpentrans", "book", "notify", "file_notice"):
        assert (ledger.steps[new].status, ledger.steps[new].revision) == (StepStatus.succeeded, 2)

    ws = harness.workspace
    [reservation] = read_csv(ws / "warehouse" / "reservations.csv")
    assert reservation["idempotency_key"].endswith("/reserve/r1")
    shipment = json.loads((ws / "shipments" / "SO-1042.json").read_text())
    assert (shipment["carrier"], shipment["reservation_id"]) == ("alpentrans", reservation["reservation_id"])
    notice = (ws / "outbox" / "SO-1042-dispatch.txt").read_text()
    script = yaml.safe_load((SHIPPING / "models.yaml").read_text())
    assert notice == "To: einkauf@bergblick-hotels.example\n\n" + script["executor"]["notify"]
    assert f"Tracking number: {shipment['tracking_number']}" in notice  # the scripted notice matches the booking
