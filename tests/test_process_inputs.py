"""A process's inputs as the command line reads them (stratagem/cli/process_inputs.py) and the ids
bulk runs take (stratagem/process_runs.py): no server."""

from __future__ import annotations

import pytest

from stratagem.cli.errors import CliError
from stratagem.cli.process_inputs import read_rows, single_inputs, single_run
from stratagem.domain.process import ProcessSpec
from stratagem.process_runs import InputsRefusedError, preview, process_run_id

pytestmark = pytest.mark.unit

SPEC = ProcessSpec(
    name="onboard",
    inputs={
        "vendor": {"type": "string"},
        "amount": {"type": "number", "minimum": 0, "default": 100},
        "urgent": {"type": "boolean", "default": False},
        "month": {"type": "string", "default": "${nominal.previous_month}"},
    },
    goal="Onboard ${inputs.vendor}",
    steps=[{"id": "a", "title": "Pay ${inputs.vendor}", "tool": "record", "args": {"label": "${inputs.amount}"}}],
)


def test_csv_rows_keep_their_line_numbers_and_their_own_problems(tmp_path):
    rows = tmp_path / "rows.csv"
    # A BOM, a quoted cell over two lines, a blank line, a short row, an empty cell.
    rows.write_text('\ufeffvendor,amount,urgent\n"ACME\nGmbH",12.5,yes\n\nBeta,abc,no\nGamma,3\nDelta,,\n')
    found = read_rows(SPEC, str(rows))
    assert [(r.line, r.values, r.problems) for r in found] == [
        (2, {"vendor": "ACME\nGmbH", "amount": 12.5, "urgent": True}, []),
        (5, {"vendor": "Beta", "urgent": False}, ["input 'amount': 'abc' is not a number"]),
        (6, {}, ["has 2 cells where the header has 3"]),
        (7, {"vendor": "Delta"}, []),
    ]


def test_a_file_with_a_column_no_input_has_is_refused_whole(tmp_path):
    rows = tmp_path / "rows.csv"
    rows.write_text("vendor,iban\nACME,DE00\n")
    with pytest.raises(CliError, match="column\\(s\\) 'iban' name no input of onboard v1"):
        read_rows(SPEC, str(rows))
    (tmp_path / "empty.csv").write_text("vendor\n")
    with pytest.raises(CliError, match="has no rows"):
        read_rows(SPEC, str(tmp_path / "empty.csv"))


def test_jsonl_rows_are_typed_values_and_a_bad_line_is_its_own(tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"vendor": "ACME", "amount": "7"}\n\n[1]\n{"vendor": \n')
    found = read_rows(SPEC, str(rows))
    assert [(r.line, r.values) for r in found] == [(1, {"vendor": "ACME", "amount": 7}), (3, {}), (4, {})]
    assert "must be a JSON object" in found[1].problems[0] and "is not JSON" in found[2].problems[0]


def test_the_command_line_wins_over_the_file_and_every_problem_is_told_at_once(tmp_path):
    values = tmp_path / "values.yaml"
    values.write_text("vendor: ACME\namount: 5\n")
    given, problems = single_inputs(SPEC, ["amount=9", "urgent=maybe"], str(values))
    assert given == {"vendor": "ACME", "amount": 9} and problems == ["input 'urgent': 'maybe' is not yes or no"]
    with pytest.raises(InputsRefusedError) as refused:
        single_run(SPEC, ["amount=-1", "urgent=maybe", "colour=red"], None, "UTC")
    assert refused.value.problems == [
        "input 'urgent': 'maybe' is not yes or no",
        "onboard has no input 'colour' (its inputs: vendor, amount, urgent, month)",
        "input 'vendor' is required",
        "input 'amount': -1 is less than the minimum of 0",
    ]
    with pytest.raises(InputsRefusedError, match="'Mars/Olympus' is not a time zone"):
        single_run(SPEC, ["vendor=x"], None, "Mars/Olympus")


def test_a_bulk_rows_id_is_the_same_for_the_same_values_and_differs_otherwise():
    values, plan = preview(SPEC, {"vendor": "ACME"})
    assert plan is not None and plan.steps[0].args == {"label": 100} and plan.goal == "Onboard ACME"
    same = process_run_id(SPEC, values)
    assert same == process_run_id(SPEC, dict(reversed(values.items())))
    assert same.startswith("onboard-") and len(same) == len("onboard-") + 12
    assert process_run_id(SPEC, {**values, "vendor": "Beta"}) != same
    assert process_run_id(SPEC.model_copy(update={"version": "2"}), values) != same


def test_an_example_folder_is_a_library_of_its_process_alone(tmp_path):
    """Pointing STRATAGEM_PROCESSES at an example's folder gives its process, and no complaint
    about the inputs, answers and scripted models beside it (they are not processes)."""
    from pathlib import Path

    from stratagem.io.process_library import ProcessLibrary

    example = Path(__file__).resolve().parent.parent / "examples" / "monthly_report"
    found = ProcessLibrary.from_env({"STRATAGEM_HOME": str(tmp_path)}, extra=[example])
    assert found.names() == ["monthly-report"] and found.problems == []
