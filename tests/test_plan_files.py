"""Plan files written by people: loading YAML and JSON, exact errors, and dumping for editing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from stratagem.common.errors import PlanFileError
from stratagem.domain.plan import Author, AuthorKind, Plan, PlanDraft, Risk, StepKind
from stratagem.io.plan_files import dump_plan, load_plan_file, parse_plan_data

pytestmark = pytest.mark.unit

PLAN_YAML = """\
goal: Welcome a new customer
reason: written by hand
steps:
  - id: fetch
    title: Fetch the profile
    tool: fetch_profile
    args: {user: ada}
  - id: ask
    title: Ask the account manager
    kind: human
    instructions: "Anything special about ${fetch.name}?"
    depends_on: [fetch]
  - id: email
    title: Send the welcome email
    kind: llm
    instructions: "Write to ${fetch.email}, noting ${ask}. Keep $${literal} as is."
    depends_on: [fetch, ask]
    risk: high
    output_format: json
    timeout_seconds: 30
    max_attempts: 3
    success_criteria: [mentions the customer's name]
"""


def test_load_yaml(tmp_path: Path) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text(PLAN_YAML)
    draft = load_plan_file(path)
    assert draft.goal == "Welcome a new customer"
    assert draft.reason == "written by hand"
    assert draft.step_ids == ["fetch", "ask", "email"]
    assert draft.step("fetch").kind is StepKind.tool
    assert draft.step("fetch").args == {"user": "ada"}
    email = draft.step("email")
    assert (email.kind, email.risk, email.timeout_seconds, email.max_attempts) == (StepKind.llm, Risk.high, 30, 3)
    assert email.depends_on == ["fetch", "ask"]
    assert email.needs_step_approval is True


def test_load_yml_and_json_give_the_same_draft(tmp_path: Path) -> None:
    (tmp_path / "plan.yml").write_text(PLAN_YAML)
    (tmp_path / "plan.json").write_text(json.dumps(yaml.safe_load(PLAN_YAML), indent=2))
    from_yaml = load_plan_file(tmp_path / "plan.yml")
    assert load_plan_file(str(tmp_path / "plan.json")) == from_yaml


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nowhere.yaml"
    with pytest.raises(PlanFileError) as caught:
        load_plan_file(path)
    assert str(caught.value) == f"plan file '{path}' does not exist"


def test_unreadable_path(tmp_path: Path) -> None:
    with pytest.raises(PlanFileError, match=r"^cannot read plan file '.*': ") as caught:
        load_plan_file(tmp_path)  # a directory
    assert str(tmp_path) in str(caught.value)


def test_invalid_yaml_reports_the_line(tmp_path: Path) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text("goal: g\nsteps:\n  - id: a\n    title: [unclosed\n")
    with pytest.raises(PlanFileError) as caught:
        load_plan_file(path)
    message = str(caught.value)
    assert message.startswith(f"plan file '{path}' is not valid YAML at line ")
    assert "at line 5, column 1:" in message


def test_invalid_json_reports_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "plan.json"
    path.write_text('{\n  "goal": "g",\n  "steps": [,]\n}')
    with pytest.raises(PlanFileError) as caught:
        load_plan_file(path)
    assert str(caught.value) == f"plan file '{path}' is not valid JSON: Expecting value at line 3, column 13"


@pytest.mark.parametrize(("content", "kind"), [("- a\n- b\n", "list"), ("just words\n", "str"), ("", "NoneType")])
def test_non_mapping_is_refused(tmp_path: Path, content: str, kind: str) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text(content)
    with pytest.raises(PlanFileError) as caught:
        load_plan_file(path)
    assert str(caught.value) == f"plan file '{path}' must hold a mapping with 'goal' and 'steps', not a {kind}"


def test_schema_errors_name_the_step_number_and_field(tmp_path: Path) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text(
        "goal: g\nsteps:\n"
        "  - {id: ok, title: OK}\n"
        "  - {id: 'bad id', title: Bad, kind: robot, max_attempts: 0}\n"
        "extra: 1\n"
    )
    with pytest.raises(PlanFileError) as caught:
        load_plan_file(path)
    message = str(caught.value)
    assert message.startswith(f"plan file '{path}' is invalid: ")
    problems = message.removeprefix(f"plan file '{path}' is invalid: ").split("; ")
    assert problems[0] == "step #2 field 'id': String should match pattern '^[A-Za-z_][A-Za-z0-9_-]{0,63}$'"
    assert problems[1].startswith("step #2 field 'kind': Input should be 'tool', 'llm' or 'human'")
    assert problems[2] == "step #2 field 'max_attempts': Input should be greater than or equal to 1"
    assert problems[3] == "field 'extra': Extra inputs are not permitted"
    assert len(problems) == 4


def test_parse_plan_data_uses_its_source_in_messages() -> None:
    with pytest.raises(PlanFileError) as caught:
        parse_plan_data({"goal": "g"}, source="the revised plan")
    assert str(caught.value) == "the revised plan is invalid: field 'steps': Field required"
    with pytest.raises(PlanFileError, match=r"^plan must hold a mapping"):
        parse_plan_data([1, 2])


def test_dump_plan_loads_back_equal(tmp_path: Path) -> None:
    (tmp_path / "plan.yaml").write_text(PLAN_YAML)
    draft = load_plan_file(tmp_path / "plan.yaml")
    text = dump_plan(draft)
    (tmp_path / "dumped.yaml").write_text(text)
    assert load_plan_file(tmp_path / "dumped.yaml") == draft
    # Defaults are left out so the file stays short, and references stay as written.
    data = yaml.safe_load(text)
    assert "kind" not in data["steps"][0] and "risk" not in data["steps"][0]
    assert data["steps"][2]["instructions"] == "Write to ${fetch.email}, noting ${ask}. Keep $${literal} as is."


def test_dump_plan_keeps_tricky_scalars_as_strings(tmp_path: Path) -> None:
    draft = PlanDraft.model_validate(
        {
            "goal": "Grüße & more: yes",
            "steps": [
                {"id": "a", "title": "no", "tool": "t", "args": {"flag": "yes", "n": "007", "v": 1.5, "none": None}}
            ],
        }
    )
    path = tmp_path / "out.yaml"
    path.write_text(dump_plan(draft), encoding="utf-8")
    assert load_plan_file(path) == draft


def test_dump_of_an_accepted_plan_loads_back_as_its_draft(tmp_path: Path) -> None:
    (tmp_path / "plan.yaml").write_text(PLAN_YAML)
    draft = load_plan_file(tmp_path / "plan.yaml")
    plan = Plan.from_draft(draft, revision=3, author=Author(kind=AuthorKind.human, name="alice"))
    text = dump_plan(plan)
    assert "revision" not in yaml.safe_load(text) and "author" not in yaml.safe_load(text)
    (tmp_path / "edit.yaml").write_text(text)
    assert load_plan_file(tmp_path / "edit.yaml") == plan.draft()
