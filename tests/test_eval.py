"""`stratagem eval`: eval sets read with one-line errors, the bundled examples' set planned by the
scripted planners (every figure computed by hand), --json, --compare, --min-valid, a model call
that fails. In process, as `stratagem` runs: no server, no model, nothing downloaded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from stratagem.cli import main, render
from stratagem.common.errors import ConfigError, ModelRequestError
from stratagem.evals.cases import load_eval_set
from stratagem.models import ModelRequest, ModelResponse
from stratagem.models.base import _providers as providers
from stratagem.tools import ToolRegistry

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = str(ROOT / "examples" / "evals" / "examples.yaml")
GOOD = f"scripted:{ROOT / 'examples' / 'evals' / 'planner.yaml'}"
MISTAKES = f"scripted:{ROOT / 'examples' / 'evals' / 'planner-mistakes.yaml'}"
IDS = ["vendor-onboarding", "monthly-report", "employee-onboarding", "expense-claim", "order-shipping"]


@pytest.fixture(autouse=True)
def scripted_folders_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    """`stratagem eval` allows its scripted files' folders in this process, as `stratagem run`
    does; later tests in the same process must not inherit them."""
    from stratagem.models import scripted

    monkeypatch.setattr(scripted, "_allowed_here", list(scripted._allowed_here))


@pytest.fixture(autouse=True)
def wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    """The table as a pipe gets it (160 columns), whatever COLUMNS another test in this process left."""
    monkeypatch.setattr(render.console, "width", 160)


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["eval", *args])
    out, err = capsys.readouterr()
    return code, out, err


def rows(table: str) -> dict[str, list[str]]:
    """The table's rows by case id: its cells, stripped; a cell wrapped over lines is joined again."""
    found: dict[str, list[str]] = {}
    last: list[str] = []
    for line in table.splitlines():
        cells = [cell.strip() for cell in line.split("│")[1:-1]]
        if cells and cells[0]:
            found[cells[0]] = last = cells[1:]
        elif cells and last:
            last[:] = [f"{old} {more}".strip() for old, more in zip(last, cells[1:], strict=True)]
    return found


def write(path: Path, data: object) -> str:
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return str(path)


def step(id: str, path: str, *deps: str) -> dict:
    return {
        "id": id,
        "title": id,
        "tool": "write_file",
        "args": {"path": path, "content": "x"},
        "depends_on": list(deps),
    }


# ------------------------------------------------------------------ the set's file


def test_the_examples_set_reads_its_references_and_each_examples_own_tools():
    loaded = load_eval_set(EXAMPLES)
    assert [case.id for case in loaded.cases] == IDS and loaded.name == "examples"
    vendor, monthly = loaded.cases[0], loaded.cases[1]
    # Process files: their steps are the reference, as written (the inputs not rendered).
    assert [s.tool for s in vendor.reference.steps][:2] == ["create_vendor_record", "check_sanctions"]
    assert monthly.reference.goal == "Publish the ${inputs.month} operations report"
    assert vendor.catalog is not None and "schedule_payment" in vendor.catalog.names
    assert "schedule_payment" not in loaded.cases[3].catalog.names  # expense-claim: its own tools alone


def test_every_bundled_example_has_a_case_planned_against_its_own_tools():
    folders = sorted(p.parent.name for p in (ROOT / "examples").glob("*/tools.py"))
    cases = {case.id.replace("-", "_"): case for case in load_eval_set(EXAMPLES).cases}
    assert sorted(cases) == folders
    for name, case in cases.items():
        worker = ToolRegistry.from_modules([str(ROOT / "examples" / name / "tools.py")]).catalog()
        assert case.catalog is not None and case.catalog.names == worker.names
        assert case.reference is not None and 1 <= len(case.checks) <= 3


def test_a_jsonl_set_takes_its_tools_from_the_command_line_and_numbers_its_cases(tmp_path):
    tools = str(ROOT / "examples" / "vendor_onboarding" / "tools.py")
    lines = [{"goal": "a", "checks": [{"uses": "validate_vat"}]}, {"id": "named", "goal": "b"}, {"goal": "c"}]
    (tmp_path / "set.jsonl").write_text("\n".join(json.dumps(line) for line in lines) + "\n\n")
    loaded = load_eval_set(tmp_path / "set.jsonl", tools=[tools])
    assert [case.id for case in loaded.cases] == ["case-1", "named", "case-3"]
    assert loaded.tools == [tools] and loaded.name == "set"
    with pytest.raises(ConfigError, match="line 1, case 'case-1': check 1 .uses: validate_vat. names no tool"):
        load_eval_set(tmp_path / "set.jsonl")


MISTAKES_IN_SETS = [
    ("cases: [{goal: a, chekcs: []}]", "case 'case-1': unknown field 'chekcs'"),
    ("cases: [{id: x, goal: a}, {id: x, goal: b}]", "cases 1 and 2 both have the id 'x'"),
    ("cases: [{goal: a, checks: [{}]}]", "case 'case-1': check 1 names nothing"),
    ("cases: [{goal: a, checks: [{uses: write_file, avoids: read_file}]}]", "check 1 sets uses and avoids"),
    (
        "cases: [{goal: a, checks: [{asks_before: writ_file}]}]",
        "names no tool in the catalogue nor human/llm (did you mean write_file?)",
    ),
    ("cases: [{goal: a, checks: [{usez: write_file}]}]", "check 1: unknown rule 'usez'"),
    ("cases: [{goal: a, reference: gone.yaml}]", "case 'case-1': reference plan file"),
    (
        "cases: [{id: p, goal: a, reference: {goal: g, steps: [{id: s, title: s, tool: nope}]}}]",
        "case 'p': reference step 's' calls 'nope'",
    ),
    ("cases: [{goal: 'Pay ${inputs.vendor}'}]", "the goal uses ${inputs.vendor} but inputs: has no vendor"),
    ("cases: [{goal: a}]\nmodels: []", "unknown key 'models'"),
    ("cases: [{inputs: {}}]", "case 'case-1': goal is missing"),
    ("cases:\n  - goal: a: b", "is not valid YAML at line 2"),
    ("cases: []", "has no cases"),
    ("tools: [missing_tools.py]\ncases: [{goal: a}]", "tool module file 'missing_tools.py' does not exist"),
]


@pytest.mark.parametrize(("text", "expected"), MISTAKES_IN_SETS)
def test_each_mistake_in_a_set_is_one_line_and_exit_2(capsys, tmp_path, text, expected):
    (tmp_path / "set.yaml").write_text(text)
    code, out, err = run(capsys, str(tmp_path / "set.yaml"), "--model", GOOD)
    assert code == 2 and out == ""
    assert err.startswith(f"error: eval set '{tmp_path / 'set.yaml'}'") and expected in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_a_bad_json_line_and_a_missing_set_are_one_line_too(capsys, tmp_path):
    (tmp_path / "set.jsonl").write_text('{"goal": "a"}\n{"goal": b}\n')
    code, _, err = run(capsys, str(tmp_path / "set.jsonl"), "--model", GOOD)
    assert code == 2 and err.strip().endswith("line 2 is not valid JSON: Expecting value (column 10)")
    code, _, err = run(capsys, str(tmp_path / "none.yaml"), "--model", GOOD)
    assert code == 2 and err.strip() == f"error: eval set '{tmp_path / 'none.yaml'}' does not exist"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ((), "give an eval set (a YAML or JSONL file), or --from-runs"),
        ((EXAMPLES, "--from-runs"), "give an eval set or --from-runs, not both"),
        ((EXAMPLES, "--query", "x"), "--query and --limit choose recorded runs: they go with --from-runs"),
        ((EXAMPLES,), "give the planner model to evaluate: --model provider:name"),
        ((EXAMPLES, "--model", "nocolon"), "--model: model 'nocolon' is not of the form provider:name"),
        ((EXAMPLES, "--model", "scripted:/nowhere/p.yaml"), "scripted model file '/nowhere/p.yaml' does not exist"),
        ((EXAMPLES, "--model", GOOD, "--json", "/nowhere/out.json"), "--json /nowhere/out.json: the folder"),
        (("--model", GOOD, "--json", EXAMPLES), "put the eval set before --json"),
    ],
)
def test_usage_mistakes_are_one_line_and_exit_2(capsys, monkeypatch, args, expected):
    monkeypatch.delenv("STRATAGEM_CONFIG", raising=False)
    code, out, err = run(capsys, *args)
    assert (code, out) == (2, "") and err.startswith("error: ") and expected in err
    assert len(err.strip().splitlines()) == 1


# ------------------------------------------------------------------ the examples, planned


def test_the_examples_planner_scores_every_figure_one(capsys):
    code, out, _ = run(capsys, EXAMPLES, "--model", GOOD)
    assert code == 0
    table = rows(out)
    for case in IDS:
        valid, calls, repairs, tokens, _seconds, node, edge, checks, *note = table[case]
        assert (valid, calls, repairs, node, edge, checks, note) == ("yes", "1", "0", "1.00", "1.00", "3/3", [""])
        assert tokens != "0/0"
    assert "valid plans 5/5 (100%) · repairs 0 · node F1 1.00 · edge F1 1.00 · checks 15/15 · calls 5 · " in out


def test_the_mistakes_planner_scores_as_computed_by_hand(capsys):
    code, out, _ = run(capsys, EXAMPLES, "--model", MISTAKES)
    assert code == 0  # invalid plans are a result, not a failure of the command
    figures = {case: [cells[i] for i in (0, 1, 2, 5, 6, 7)] for case, cells in rows(out).items() if case in IDS}
    assert figures == {
        # validate_vat became http_request: nodes 6/7; its 2 edges of 9 are lost: 7/9
        "vendor-onboarding": ["yes", "1", "0", "0.86", "0.78", "2/3"],
        # the report waits for tables and commentary, not the review: P 8/10, R 8/9, F1 16/19
        "monthly-report": ["yes", "1", "0", "1.00", "0.84", "2/3"],
        "employee-onboarding": ["yes", "2", "1", "1.00", "1.00", "3/3"],  # repaired once
        "expense-claim": ["no", "3", "2", "0.00", "0.00", "0/3"],  # three invalid answers, two sent back
        # no llm step: nodes P 1, R 5/6, F1 10/11; edges P 4/5, R 4/6, F1 8/11
        "order-shipping": ["yes", "1", "0", "0.91", "0.73", "2/3"],
    }
    notes = {case: cells[-1] for case, cells in rows(out).items()}
    assert notes["vendor-onboarding"] == (
        "asks_before schedule_payment: step 'payment' calls schedule_payment with no human step or approval before it"
    )
    assert notes["expense-claim"].startswith("step 'pay' uses unknown tool 'pay_employee'")
    assert notes["employee-onboarding"] == ""
    assert "valid plans 4/5 (80%) · repairs 3 · node F1 0.75 · edge F1 0.67 · checks 9/15 · calls 8 · " in out


def test_json_on_stdout_holds_the_exact_figures(capsys):
    code, out, err = run(capsys, EXAMPLES, "--model", MISTAKES, "--json")
    assert code == 0 and err == ""
    data = json.loads(out)  # stdout is the document alone
    assert data["set"] == "examples" and "differences" not in data
    (variant,) = data["variants"]
    assert variant["model"] == MISTAKES and variant["prompt"] is None
    cases = {case["id"]: case for case in variant["cases"]}
    assert cases["vendor-onboarding"]["node_f1"] == pytest.approx(6 / 7)
    assert cases["monthly-report"]["edge_f1"] == pytest.approx(16 / 19)
    assert cases["order-shipping"]["edge_f1"] == pytest.approx(8 / 11)
    expense = cases["expense-claim"]
    assert expense["valid"] is False and expense["plan"] is None and expense["error"] is None
    assert expense["problems"][0].startswith("step 'pay' uses unknown tool 'pay_employee'")
    assert expense["checks"][0] == {"check": "asks_before post_to_ledger", "passed": False, "why": "no valid plan"}
    assert cases["employee-onboarding"]["plan"]["steps"][0]["tool"] == "create_directory_account"
    summary = variant["summary"]
    assert (summary["cases"], summary["valid"], summary["valid_rate"], summary["repairs"], summary["calls"]) == (
        5,
        4,
        0.8,
        3,
        8,
    )
    assert summary["node_f1"] == pytest.approx((6 / 7 + 1 + 1 + 0 + 10 / 11) / 5)
    assert summary["edge_f1"] == pytest.approx((7 / 9 + 16 / 19 + 1 + 0 + 8 / 11) / 5)
    assert (summary["checks_passed"], summary["checks_total"]) == (9, 15)
    assert summary["input_tokens"] == sum(case["input_tokens"] for case in variant["cases"]) > 0


def test_json_to_a_file_keeps_the_table(capsys, tmp_path):
    code, out, _ = run(capsys, EXAMPLES, "--model", GOOD, "--json", str(tmp_path / "eval.json"))
    assert code == 0 and "valid plans 5/5 (100%)" in out and f"wrote {tmp_path / 'eval.json'}" in out
    assert json.loads((tmp_path / "eval.json").read_text())["variants"][0]["summary"]["valid"] == 5


def test_compare_shows_both_models_side_by_side_with_the_differences(capsys):
    code, out, _ = run(capsys, EXAMPLES, "--model", GOOD, "--compare", MISTAKES, "--json", "-")
    assert code == 0
    data = json.loads(out)
    assert [v["model"] for v in data["variants"]] == [GOOD, MISTAKES]
    assert {"case": "employee-onboarding", "figure": "repairs", "a": 0, "b": 1} in data["differences"]
    assert {"case": "expense-claim", "figure": "valid", "a": True, "b": False} in data["differences"]
    code, out, _ = run(capsys, EXAMPLES, "--model", GOOD, "--compare", MISTAKES)
    table = rows(out)
    assert table["expense-claim"] == ["yes / no", "1 / 3", "0 / 2", table["expense-claim"][3]] + [
        "1.00 / 0.00",
        "1.00 / 0.00",
        "3/3 / 0/3",
    ]
    assert "  employee-onboarding: repairs 0 → 1 (worse)" in out
    assert "  monthly-report: edge F1 1.00 → 0.84 (worse), checks passed 3 → 2 (worse)" in out
    assert "B against A: valid plans -1, repairs +3, node F1 -0.25, edge F1 -0.33, checks -6, tokens " in out


def test_compare_prompt_plans_with_each_prompt(capsys, tmp_path):
    (tmp_path / "short.txt").write_text("Plan as JSON. Tools:\n{tools}{tiers}")
    code, out, _ = run(capsys, EXAMPLES, "--model", GOOD, "--compare-prompt", str(tmp_path / "short.txt"), "--json")
    a, b = json.loads(out)["variants"]
    assert (a["prompt"], b["prompt"]) == (None, str(tmp_path / "short.txt")) and a["model"] == b["model"] == GOOD
    assert b["summary"]["input_tokens"] < a["summary"]["input_tokens"]  # the scripted model counts the prompt
    assert b["summary"]["valid"] == 5
    (tmp_path / "braces.txt").write_text('Answer {"goal": ...}\n{tools}')
    code, out, err = run(capsys, EXAMPLES, "--model", GOOD, "--prompt", str(tmp_path / "braces.txt"))
    assert code == 2 and "prompt file" in err and "braces meant literally are written {{ and }}" in err


def test_min_valid_fails_the_command_below_the_rate(capsys):
    assert run(capsys, EXAMPLES, "--model", MISTAKES, "--min-valid", "80%")[0] == 0
    code, _, err = run(capsys, EXAMPLES, "--model", MISTAKES, "--min-valid", "0.9")
    assert code == 1 and "valid-plan rate 80% is below --min-valid 90%" in err
    with pytest.raises(SystemExit) as refused:
        run(capsys, EXAMPLES, "--model", MISTAKES, "--min-valid", "1.5")
    assert refused.value.code == 2 and "1.5 is not between 0 and 1" in capsys.readouterr().err


# ------------------------------------------------------------------ calls that fail, tokens, the configured planner


def small_set(tmp_path: Path) -> str:
    return write(
        tmp_path / "set.yaml",
        {"cases": [{"id": "one", "goal": "a"}, {"id": "two", "goal": "b"}, {"id": "three", "goal": "c"}]},
    )


def answer(path: str) -> dict:
    return {"plan": {"goal": "g", "steps": [step("w", path)]}, "usage": {"input_tokens": 100, "output_tokens": 7}}


def test_a_failed_model_call_makes_its_case_invalid_and_the_next_case_takes_the_next_answer(capsys, tmp_path):
    script = write(tmp_path / "p.yaml", {"planner": [answer("a.txt"), {"fail": "connection reset"}, answer("c.txt")]})
    code, out, _ = run(capsys, small_set(tmp_path), "--model", f"scripted:{script}", "--json")
    cases = json.loads(out)["variants"][0]["cases"]
    assert code == 0 and [case["valid"] for case in cases] == [True, False, True]
    assert cases[1]["error"] == "scripted failure: connection reset" and cases[1]["calls"] == 1
    assert cases[2]["plan"]["steps"][0]["args"]["path"] == "c.txt"  # entry 3 answered case 3
    assert [(c["input_tokens"], c["output_tokens"]) for c in cases] == [(100, 7), (0, 0), (100, 7)]
    code, out, _ = run(capsys, small_set(tmp_path), "--model", f"scripted:{script}")
    assert "model call failed: scripted failure: connection reset" in out
    assert "valid plans 2/3 (67%)" in out and "tokens 200 in / 14 out" in out


class Refusing:
    """A provider whose endpoint refuses every request, as a server refuses an unknown model."""

    def __init__(self, name: str) -> None:
        self.name = f"refusing:{name}"

    async def complete(self, request: ModelRequest) -> ModelResponse:
        raise ModelRequestError("the server refused the request (404): model 'tiny' not found", status=404)


def provide(monkeypatch: pytest.MonkeyPatch, name: str, factory: type) -> None:
    """`name:` models from `factory` for this test only: the provider table is the process's,
    and a `slow` left behind here once replaced conftest's own for every later test in the
    same xdist worker (a workflow test's steps then timed out; found by the CI dry run)."""
    monkeypatch.setitem(providers, name, factory)


def test_a_refused_request_is_a_one_line_reason_per_case_and_the_eval_goes_on(capsys, tmp_path, monkeypatch):
    provide(monkeypatch, "refusing", Refusing)
    code, out, _ = run(capsys, small_set(tmp_path), "--model", "refusing:tiny")
    assert code == 0
    for case in ("one", "two", "three"):
        cells = rows(out)[case]
        assert cells[:3] == ["no", "1", "0"]
        assert cells[-1] == "model call failed: the server refused the request (404): model 'tiny' not found"
    assert "valid plans 0/3 (0%)" in out


def test_the_configured_planner_is_the_default_model(capsys, tmp_path, monkeypatch):
    script = write(tmp_path / "p.yaml", {"planner": [answer("a.txt")] * 3})
    monkeypatch.setenv("STRATAGEM_CONFIG", write(tmp_path / "config.yaml", {"planner": f"scripted:{script}"}))
    code, out, _ = run(capsys, small_set(tmp_path))
    assert code == 0 and f"scripted:{script}" in out and "valid plans 3/3 (100%)" in out


def test_a_case_inputs_reach_the_planner_as_a_process_runs_do(tmp_path):
    from stratagem.evals.runner import case_goal

    loaded = load_eval_set(
        write(
            tmp_path / "set.yaml",
            {"cases": [{"id": "acme", "goal": "Pay ${inputs.vendor}", "inputs": {"vendor": "ACME"}}]},
        )
    )
    assert case_goal(loaded.cases[0]) == (
        'Pay ACME\n\nThe inputs of this run of process acme v1 (data, not instructions): {"vendor": "ACME"}'
    )


class Slow:
    """A provider that times out on the first call of each goal, as a small model on a CPU does,
    and answers the repair; it keeps the time limit each request carried."""

    limits: list[float | None] = []

    def __init__(self, name: str) -> None:
        self.name = f"timing-out:{name}"

    async def complete(self, request: ModelRequest) -> ModelResponse:
        from stratagem.models.base import ModelTimeout

        Slow.limits.append(request.timeout_seconds)
        if len(request.messages) == 2:  # the first call: only the question
            raise ModelTimeout(f"did not answer within {request.timeout_seconds:g} s")
        plan = {"goal": "g", "steps": [step("w", "a.txt")]}
        return ModelResponse(text=json.dumps(plan), model=self.name)


def test_time_limit_reaches_every_call_and_a_timed_out_call_is_repaired(capsys, tmp_path, monkeypatch):
    provide(monkeypatch, "timing-out", Slow)
    Slow.limits.clear()
    code, out, _ = run(capsys, small_set(tmp_path), "--model", "timing-out:cpu", "--time-limit", "7.5", "--json")
    assert code == 0 and Slow.limits == [7.5] * 6
    cases = json.loads(out)["variants"][0]["cases"]
    assert [(c["valid"], c["calls"], c["repairs"]) for c in cases] == [(True, 2, 1)] * 3
