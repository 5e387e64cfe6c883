"""The rules of an approval with changed arguments (stratagem.domain.decisions.edit) on a
hand-built RunState: what is refused, with which one line, and what the edited plan and the
ledger's record of the change hold."""

from __future__ import annotations

import pytest
from support.states import NOW

from stratagem.common.errors import DecisionRefusedError
from stratagem.domain import decisions
from stratagem.domain.catalog import ToolCatalog, ToolSpec
from stratagem.domain.ledger import Ledger, StepStatus
from stratagem.domain.plan import Author, AuthorKind, Plan, PlanDraft
from stratagem.domain.run_levels import RUN_LEVEL
from stratagem.domain.run_types import ApproveInput, DecisionKind, PendingDecision, Phase, RunOptions, RunState
from stratagem.domain.step_preview import preview

pytestmark = pytest.mark.unit

KEY = "sk-live" + "1234567890abcdefgh"

PAY = ToolSpec(
    name="pay",
    parameters={
        "type": "object",
        "properties": {"amount": {"type": "integer"}, "to": {"type": "string"}, "headers": {"type": "object"}},
        "required": ["amount", "to"],
        "additionalProperties": False,
    },
)


def gated(level: int = RUN_LEVEL, **extra: object) -> RunState:
    """A running run whose step 'pay' waits for its approval, with what it will run."""
    plan = PlanDraft.model_validate(
        {
            "goal": "g",
            "steps": [
                {"id": "who", "title": "who", "tool": "pay", "args": {"amount": 1, "to": "x"}},
                {
                    "id": "pay",
                    "title": "pay",
                    "tool": "pay",
                    "args": {"amount": 100, "to": "${who.to}", **extra},
                    "depends_on": ["who"],
                },
            ],
        }
    )
    ledger = Ledger(run_id="run-1")
    ledger.add_revision(Plan.from_draft(plan, revision=1, author=Author(kind=AuthorKind.human, name="ann")))
    ledger.steps["who"].status, ledger.steps["who"].output = StepStatus.succeeded, {"to": "acme"}
    state = RunState(
        run_id="run-1",
        execution_id="e",
        goal="g",
        options=RunOptions(),
        phase=Phase.running,
        ledger=ledger,
        catalog=ToolCatalog(tools=[PAY]),
        level=level,
        approved_revision=1,
    )
    shown = preview(ledger.revisions[0].step("pay"), ledger.outputs())
    state.pending = [
        PendingDecision(kind=DecisionKind.step_approval, revision=1, since=NOW, step_id="pay", preview=shown)
    ]
    return state


def edit(state: RunState, **args: object) -> ApproveInput:
    shown = state.pending[0].preview
    assert shown is not None
    return ApproveInput(by="dana", step_id="pay", digest=shown.digest, args=args)


def refusal(state: RunState, decision: ApproveInput) -> str:
    with pytest.raises(DecisionRefusedError) as info:
        decisions.check_approve(state, decision)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_an_edit_of_a_shown_argument_is_taken_and_keeps_the_others_as_written() -> None:
    state = gated()
    decision = edit(state, amount=90)
    decisions.check_approve(state, decision)
    draft = decisions.edited_plan(state, decision)
    assert draft.step("pay").args == {"amount": 90, "to": "${who.to}"}
    assert "dana approved step 'pay' with amount changed" == draft.reason


def test_a_run_below_level_9_refuses_an_edit_instead_of_running_the_step_unedited() -> None:
    assert "started at level 8, before an approval could change arguments" in refusal(
        gated(8), edit(gated(8), amount=9)
    )


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ({"to": "$${who.to}"}, "argument 'to' holds '${': an approval changes values, not references"),
        ({"to": {"nested": "${who}"}}, "argument 'to' holds '${'"),
        ({"amount": float("nan")}, "argument 'amount' holds a number that is not finite"),
        ({"amount": True}, "argument 'amount' of tool 'pay' is invalid"),
        ({"memo": "x"}, "argument \"memo\" is not one of tool 'pay''s (it takes: amount, headers, to)"),
        ({"headers": {"Authorization": "Bearer abc"}}, "header 'Authorization' holds a literal credential"),
        ({"to": "acme"}, "the arguments given are those step 'pay' was shown"),
        ({}, "no argument is changed"),
    ],
)
def test_edits_that_break_a_rule_are_refused_naming_the_argument(args: dict, expected: str) -> None:
    state = gated()
    assert expected in refusal(state, edit(state, **args))


def test_an_edit_must_name_what_was_shown_and_target_a_tool_step_of_the_approved_revision() -> None:
    state = gated()
    assert "must name the digest of what it showed" in refusal(
        state, ApproveInput(by="dana", step_id="pay", args={"amount": 9})
    )
    under_review = gated()
    under_review.approved_revision = None
    assert "revision 1 is not the approved one the run runs" in refusal(under_review, edit(under_review, amount=9))
    review = gated()
    review.phase, review.pending = Phase.awaiting_approval, []
    assert "a plan is changed with revise" in refusal(review, ApproveInput(by="dana", args={"amount": 9}))


def test_the_ledger_keeps_each_change_as_shown_and_as_approved_with_credentials_masked() -> None:
    state = gated(label=f"key {KEY}")
    changes = decisions.argument_edits(state.ledger.revisions[0].step("pay"), state, {"label": f"new {KEY}"})
    assert changes["label"].before == "key [redacted]" and changes["label"].after == "new [redacted]"
    changes = decisions.argument_edits(state.ledger.revisions[0].step("pay"), state, {"to": "globex", "memo": 1})
    assert (changes["to"].before, changes["to"].after) == ("acme", "globex")  # as shown: the reference filled
    assert (changes["memo"].before, changes["memo"].after) == (None, 1)


def test_an_approval_too_large_to_keep_in_a_plan_is_refused_before_it_is_sent() -> None:
    with pytest.raises(ValueError, match="at most 32,000"):
        ApproveInput(by="dana", step_id="pay", digest="0" * 64, args={"memo": "x" * 40_000})


def test_the_console_form_sends_only_what_was_changed_each_read_as_it_was_shown() -> None:
    from stratagem.console.views import argument_fields, changed_arguments, typed_arguments

    state = gated(memo="line one\nline two")
    fields = {f["name"]: f for f in argument_fields(state.pending[0], {})}
    assert (fields["amount"]["value"], fields["amount"]["json"]) == ("100", True)
    assert (fields["to"]["value"], fields["to"]["json"]) == ("acme", False)
    form = {f"was.{name}": f["shown"] for name, f in fields.items()} | {"json.amount": "1"}
    # Untouched (a textarea sends its line ends as CRLF): nothing is sent.
    untouched = form | {"arg.amount": "100", "arg.to": "acme", "arg.memo": "line one\r\nline two"}
    assert changed_arguments(untouched) is None
    assert changed_arguments(untouched | {"arg.amount": " 90 "}) == {"amount": 90}
    assert changed_arguments(untouched | {"arg.to": "42"}) == {"to": "42"}  # text stays text
    with pytest.raises(ValueError, match="amount: not JSON"):
        changed_arguments(untouched | {"arg.amount": "ninety"})
    assert typed_arguments(untouched | {"arg.amount": "ninety"}) == {"amount": "ninety"}
