"""Escalation settings (issue #38 item 6) are checked where they are written: an escalate_to that
names no approver group, or half an escalation, is one clear line before any run starts."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from pydantic import ValidationError
from support.cli import TOOLS, cli, one_line_error, write_plan
from support.plans import SIDE_EFFECT

from stratagem.common.errors import ConfigError
from stratagem.domain.run_types import EscalationTimeoutAction, RunOptions
from stratagem.io.model_config import load_config

pytestmark = pytest.mark.unit

GROUPS = {"finance-leads": ["erin"]}


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        (
            {"escalate_after_seconds": 60, "escalate_to": "finance-lead"},
            "escalate_to names 'finance-lead', which is not an approver group (groups: finance-leads)",
        ),
        ({"escalate_to": "finance-leads"}, "escalation needs both escalate_after (seconds) and escalate_to"),
        ({"escalate_after_seconds": 60}, "escalation needs both"),
        ({"escalation_timeout_seconds": 60}, "escalation_timeout needs escalate_after and escalate_to"),
    ],
)
def test_run_options_refuse_an_escalation_that_reaches_nobody(options: dict, problem: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(problem)):
        RunOptions(approver_groups=GROUPS, **options)
    with pytest.raises(ValidationError, match="a group with nobody in it"):
        RunOptions(approver_groups={"empty": []}, escalate_after_seconds=1, escalate_to="empty")


def test_the_configuration_file_names_an_unknown_group_in_one_line(tmp_path: Path) -> None:
    config = tmp_path / "stratagem.yaml"
    config.write_text("groups: {finance: [dana]}\nescalate_after: 3600\nescalate_to: finance-lead\n")
    with pytest.raises(ConfigError) as caught:
        load_config(config)
    assert str(caught.value) == (
        f"configuration file '{config}': escalate_to: 'finance-lead' is not a group (groups: finance)"
    )
    config.write_text(
        "groups: {finance-leads: [erin]}\nescalate_after: 3600\nescalate_to: finance-leads\n"
        "escalation_timeout: 600\non_escalation_timeout: stop\n"
    )
    loaded = load_config(config)
    assert (loaded.escalate_after, loaded.escalate_to, loaded.escalation_timeout) == (3600, "finance-leads", 600)
    assert loaded.on_escalation_timeout is EscalationTimeoutAction.stop


def test_stratagem_run_refuses_an_unknown_escalation_group_before_starting(tmp_path: Path) -> None:
    plan = write_plan(tmp_path / "plan.yaml", SIDE_EFFECT)
    config = tmp_path / "stratagem.yaml"
    config.write_text("groups: {finance-leads: [erin]}\n")
    env = {**os.environ, "STRATAGEM_HOME": str(tmp_path / "home")}
    wrong = cli(
        "run",
        *TOOLS,
        "--plan",
        plan,
        "--config",
        str(config),
        "--escalate-after",
        "60",
        "--escalate-to",
        "cfo",
        env=env,
    )
    one_line_error(wrong, "escalate_to names 'cfo', which is not an approver group (groups: finance-leads)")
    half = cli("run", *TOOLS, "--plan", plan, "--escalation-timeout", "60", env=env)
    one_line_error(half, "escalation_timeout needs escalate_after and escalate_to")
