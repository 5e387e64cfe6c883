"""Answer forms at the terminal (issue #38 item 4), in a real pseudo-terminal: a field is asked by
its schema's title and description, a choice is never made for the person (one left empty is asked
again, saying so), and a value refused at one field asks that field again, keeping the others.
"""

from __future__ import annotations

import pytest
from support.cli import TOOLS, write_plan
from support.plans import step
from support.terminal import Terminal

from stratagem.client import get_run

pytestmark = pytest.mark.system

SCHEMA = {
    "type": "object",
    "properties": {
        "days": {"type": "integer", "minimum": 1, "title": "Payment term", "description": "days until it is due"},
        "decision": {"enum": ["approve", "reject"], "title": "Decision"},
        "note": {"type": "string"},
    },
    "required": ["days", "decision"],
}


async def test_a_choice_left_empty_is_asked_again_and_typed_fields_are_kept(cli_env, tmp_path):
    env, harness = cli_env
    plan = {
        "goal": "agree the terms",
        "steps": [
            {"id": "terms", "title": "Terms", "kind": "human", "instructions": "The terms?", "answer_schema": SCHEMA},
            step("log", "record", ["terms"], label="${terms.decision} in ${terms.days} days"),
        ],
    }
    path = write_plan(tmp_path / "plan.yaml", plan)
    terminal = Terminal(
        ["run", *TOOLS, "--plan", path, "--auto-approve", "--id", "tty-terms"], {**env, "COLUMNS": "200"}, tmp_path
    )
    try:
        await terminal.expect("Payment term [days] (integer) — days until it is due: ")
        terminal.type("0\n")
        await terminal.expect("error: 'Payment term': 0 is less than the minimum of 1; try again")
        terminal.type("45\n")
        await terminal.expect("Decision [decision] (approve / reject): ")
        terminal.type("\n")  # nothing chosen: no default is taken for the person
        await terminal.expect("error: Decision: choose one of approve / reject")
        await terminal.expect("Decision [decision] (approve / reject): ", times=2)
        terminal.type("approve\n")
        await terminal.expect("note (string, optional): ")
        terminal.type("\n")
        await terminal.expect("log: approve in 45 days")
        assert await terminal.exit_status() == 0
        # The days typed before the empty choice were kept: not asked a third time.
        assert terminal.text.count("Payment term [days]") == 2
        assert "Traceback" not in terminal.text
    finally:
        terminal.close()
    ledger = await get_run(harness.client, "tty-terms").ledger()
    assert ledger.steps["terms"].output == {"days": 45, "decision": "approve"}
