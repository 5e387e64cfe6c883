"""One meaning per value: what a flat payload means is read as a typed value (an approval's
target, a repair's action, a tool step's arguments), while the payload's JSON stays as it was."""

from __future__ import annotations

import pytest

from activities.execution import _materialized
from stratagem.common.errors import DecisionRefusedError
from stratagem.domain.activity_io import (
    LlmStepInput,
    ResolvedArgs,
    ResolvedInstructions,
    TemplateArgs,
    TemplateInstructions,
    ToolStepInput,
)
from stratagem.domain.decision_inputs import (
    AskAgainRepair,
    CallTarget,
    PlanTarget,
    RetryRepair,
    SkipRepair,
    StepTarget,
    StopRepair,
)
from stratagem.domain.plan import Step
from stratagem.domain.run_types import ApproveInput, RejectInput, RepairAction, RepairInput
from stratagem.io.store import FileStore, externalize

pytestmark = pytest.mark.unit


def test_an_approval_is_read_as_its_target_and_its_json_keeps_the_flat_ids():
    assert ApproveInput(by="a").target == PlanTarget()
    assert ApproveInput(by="a", step_id="s").target == StepTarget("s")
    assert RejectInput(by="a", reason="no", step_id="s", call_id="0").target == CallTarget("s", "0")
    flat = {"by": "a", "step_id": "s", "call_id": "0"}
    assert ApproveInput.model_validate(flat).model_dump(exclude_defaults=True) == flat
    # Accepted as a payload, as ever (the run refuses it, and records a refused signal as ignored).
    unanchored = ApproveInput(by="a", call_id="0")
    with pytest.raises(DecisionRefusedError, match="give --step as well as --call"):
        _ = unanchored.target


def test_a_repair_is_read_as_its_action_with_only_its_own_fields():
    def repair(**fields):
        return RepairInput(by="a", **fields).repair

    assert repair(action=RepairAction.retry, step_id="s", args={"x": 1}) == RetryRepair("s", {"x": 1})
    assert repair(action=RepairAction.skip, step_id="s", output=[1]) == SkipRepair("s", [1])
    assert repair(action=RepairAction.ask_again, step_id="h") == AskAgainRepair("h")
    assert repair(action=RepairAction.stop, step_id="s", args={"x": 1}) == StopRepair()
    with pytest.raises(DecisionRefusedError, match="^skip needs the failed step it applies to$"):
        repair(action=RepairAction.skip)
    with pytest.raises(DecisionRefusedError, match="ask_again needs the human step"):
        repair(action=RepairAction.ask_again)


def test_a_tool_steps_arguments_say_whether_they_are_resolved():
    fields = {"run_id": "r", "execution_id": "e", "step_id": "s", "revision": 1, "tool": "t"}
    assert ToolStepInput(**fields, args={"x": 1}).arguments == ResolvedArgs({"x": 1})
    deferred = ToolStepInput(**fields, args={"x": "${a}"}, references={"a": {"stored": 1}})
    assert deferred.arguments == TemplateArgs({"x": "${a}"}, {"a": {"stored": 1}})


def test_an_llm_steps_instructions_say_whether_they_are_resolved_and_a_template_is_resolved_from_the_store(tmp_path):
    step = Step(id="s", title="Summarise", kind="llm", instructions="Summarise ${a.text}")
    fields = {"run_id": "r", "revision": 1, "step": step, "model": "scripted"}
    resolved = LlmStepInput(**fields, instructions="Summarise the figures")
    assert resolved.instructions_given == ResolvedInstructions("Summarise the figures")
    store = FileStore(tmp_path)
    stored = externalize(store, "runs/r/a", {"text": "x" * 64}, limit=8)
    assert "$stored" in stored  # the output the template names is only in the store
    deferred = LlmStepInput(**fields, instructions="Summarise ${a.text}", references={"a": stored})
    assert deferred.instructions_given == TemplateInstructions("Summarise ${a.text}", {"a": stored})
    ready = _materialized(deferred, store)
    assert (ready.instructions, ready.references) == ("Summarise " + "x" * 64, None)
    assert deferred.model_dump(mode="json")["references"] == {"a": stored}  # the wire stays flat
