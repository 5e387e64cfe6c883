"""One meaning per value: what a flat payload means is read as a typed value (an approval's
target, a repair's action, a tool step's arguments), while the payload's JSON stays as it was."""

from __future__ import annotations

import pytest

from stratagem.common.errors import DecisionRefusedError
from stratagem.domain.activity_io import ResolvedArgs, TemplateArgs, ToolStepInput
from stratagem.domain.decision_inputs import (
    AskAgainRepair,
    CallTarget,
    PlanTarget,
    RetryRepair,
    SkipRepair,
    StepTarget,
    StopRepair,
)
from stratagem.domain.run_types import ApproveInput, RejectInput, RepairAction, RepairInput

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
