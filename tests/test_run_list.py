"""The Runs page's rules without a server (issue #39, item 3): what a person types never becomes
visibility-query syntax, filters outside the known values are refused, a cursor is the console's
own, who may decide is read from the memo, and the plan's drawing escapes what a planner wrote.
tests/test_console_runs.py drives the same against real runs in Chromium."""

from __future__ import annotations

import pytest

from stratagem.console.listing import (
    PHASES,
    WAITING_KINDS,
    FilterError,
    RunFilter,
    _cursor,
    _read_cursor,
    deciders,
    matches,
    may_decide,
    visibility_query,
)
from stratagem.console.plan_graph import plan_svg
from stratagem.console.views import graph_columns
from stratagem.domain.ledger import Ledger
from stratagem.domain.plan import Author, AuthorKind, Plan, PlanDraft

pytestmark = pytest.mark.unit

ATTACKS = [
    "' OR WorkflowId != '",
    "x' OR ExecutionStatus = 'Running",
    "') OR ('a' = 'a",
    '" OR 1=1 --',
    "StratagemStatus = 'awaiting_approval' ORDER BY StartTime",
]


@pytest.mark.parametrize("text", ATTACKS)
@pytest.mark.parametrize("phase", ["", "running", "succeeded", "terminated"])
@pytest.mark.parametrize("waiting", ["", "any", "plan_approval"])
def test_the_visibility_query_is_made_of_constants_whatever_is_typed(text, phase, waiting):
    wanted = RunFilter(phase=phase, waiting=waiting, mine=bool(waiting), text=text).checked()
    for attribute in (True, False):
        query = visibility_query(wanted, status_attribute=attribute)
        assert text not in query and query == visibility_query(
            RunFilter(phase, waiting, bool(waiting)), status_attribute=attribute
        )
        assert query.count("'") % 2 == 0


@pytest.mark.parametrize(
    "field, value",
    [
        ("phase", "running' OR 'a' = 'a"),
        ("phase", "Running"),
        ("waiting", "budget' OR WorkflowId != '"),
        ("waiting", "x"),
    ],
)
def test_a_filter_outside_the_known_values_is_refused_in_one_line(field, value):
    with pytest.raises(FilterError) as refused:
        RunFilter(**{field: value}).checked()
    assert "unknown" in str(refused.value) and "\n" not in str(refused.value)


def test_every_phase_and_waiting_kind_is_a_filter():
    for phase in PHASES:
        RunFilter(phase=phase).checked()
    for kind in WAITING_KINDS:
        RunFilter(waiting=kind).checked()


def test_a_cursor_is_read_back_only_as_the_console_gave_it():
    secret, wanted = b"s" * 32, RunFilter(text="invoice")
    cursor = _cursor(b"visibility-token", 7, wanted, secret)
    assert _read_cursor(cursor, wanted, secret) == (b"visibility-token", 7)
    body, _, signature = cursor.partition(".")
    for bad in (
        "not-a-cursor",
        body,  # unsigned
        body + "." + "0" * len(signature),
        _cursor(b"visibility-token", 7, wanted, b"another console's secret"),
        body[:-2] + "AA." + signature,
    ):
        with pytest.raises(FilterError, match="not one this console gave"):
            _read_cursor(bad, wanted, secret)
    with pytest.raises(FilterError, match="other filters"):
        _read_cursor(cursor, RunFilter(text="payroll"), secret)


def row(**over):
    base = {
        "run_id": "run-Abc",
        "goal": "Pay the ACME invoice",
        "phase": "awaiting_approval",
        "waiting": [],
        "can_decide": False,
    }
    return {**base, **over}


def test_filters_read_the_memo_values():
    waits = [{"kind": "plan_approval"}]
    assert matches(row(), RunFilter(text="acme invoice"))
    assert matches(row(), RunFilter(text="ABC"))  # the run id, any case
    assert not matches(row(), RunFilter(text="' OR WorkflowId != '"))
    assert not matches(row(), RunFilter(phase="running"))
    assert not matches(row(), RunFilter(waiting="any"))
    assert matches(row(waiting=waits), RunFilter(waiting="plan_approval"))
    assert not matches(row(waiting=waits), RunFilter(waiting="budget"))
    assert not matches(row(waiting=waits), RunFilter(mine=True))
    assert matches(row(waiting=waits, can_decide=True), RunFilter(mine=True))


def test_who_may_decide_is_what_the_wait_says_else_the_runs_list_else_anyone():
    assert may_decide("dana", {}, {"kind": "plan_approval"})
    assert may_decide("dana", {"approvers": ["dana"]}, {})
    assert not may_decide("dana", {"approvers": ["lee"]}, {})
    assert not may_decide("dana", {"approvers": []}, {})
    # A wait that says who may decide it (the run writes `deciders`, four eyes and escalation into
    # its memo) is read by the inbox's rule, whatever the run's start said.
    assert not may_decide("dana", {"approvers": ["dana"]}, {"deciders": ["lee"]})
    assert may_decide("lee", {"approvers": ["dana"]}, {"deciders": ["lee"]})
    assert may_decide("lee", {"approvers": ["dana"]}, {"deciders": None})
    assert not may_decide("dana", {}, {"deciders": ["dana", "lee"], "barred": ["dana"]})
    assert deciders({"approvers": ["dana"]}, {"deciders": ["lee"]}) == ["lee"]
    assert deciders({"approvers": ["dana"]}, {"kind": "plan_approval"}) == ["dana"]


def drawn(steps):
    p = Plan.from_draft(
        PlanDraft.model_validate({"goal": "g", "steps": steps}),
        revision=1,
        author=Author(kind=AuthorKind.human, name="ann"),
    )
    return plan_svg(p, graph_columns(p, Ledger(run_id="r")), "run-<1>")


def test_the_plan_is_drawn_with_an_arrow_per_dependency_and_its_titles_escaped():
    evil = "<script>alert(1)</script>\u202egnp.exe"
    svg = drawn(
        [
            {"id": "a", "title": evil, "tool": "record", "args": {"label": "x"}},
            {"id": "b", "title": "b", "tool": "record", "args": {"label": "x"}, "depends_on": ["a"]},
            {"id": "c", "title": "c", "tool": "record", "args": {"label": "x"}, "depends_on": ["a"]},
            {"id": "d", "title": "d", "tool": "record", "args": {"label": "x"}, "depends_on": ["b", "c"]},
        ]
    )
    text = str(svg)
    assert text.count('class="edge"') == 4 and text.count("<rect") == 4
    assert "<script" not in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "\u202e" not in text  # written out, as everywhere on the page
    assert "run-&lt;1&gt;" in text and '<desc id="graph-desc">4 steps and 4 dependencies: a before b;' in text
    assert 'role="img"' in text and 'aria-labelledby="graph-title graph-desc"' in text
    assert 'class="node status-pending"' in text
