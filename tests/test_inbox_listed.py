"""What a run's memo lists of each wait, and who the inbox says may decide it
(stratagem.domain.decisions.listed), and the inbox's cursors, without a server."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from stratagem.domain.decisions import listed
from stratagem.inbox import Filter, InboxError, _decode, _encode, _Position

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)


def test_a_memo_written_before_the_new_keys_reads_as_anyone_may_decide():
    old = {"kind": "plan_approval", "step_id": None, "revision": 1, "since": "2026-11-27T11:00:00+00:00"}
    assert listed.may_decide(old, "anyone", NOW)
    assert listed.words(old) == "approval of revision 1"
    assert listed.identity([{**old, "deciders": ["dana"]}]) == listed.identity([old])  # no new memo write


def test_the_lists_four_eyes_and_an_escalation_decide_who_may():
    wait = {"kind": "step_approval", "step_id": "pay", "revision": 2, "since": "2026-11-27T11:00:00+00:00"}
    assert listed.may_decide({**wait, "deciders": ["dana"]}, "dana", NOW)
    assert not listed.may_decide({**wait, "deciders": ["dana"]}, "erin", NOW)
    assert not listed.may_decide({**wait, "deciders": None, "barred": ["Dana"]}, "dana", NOW)  # one person
    ahead = {**wait, "deciders": ["dana"], "escalates": {"at": "2026-11-27T13:00:00+00:00", "people": ["lee"]}}
    assert not listed.may_decide(ahead, "lee", NOW)
    assert listed.may_decide(ahead, "lee", NOW + timedelta(hours=2))  # the deadline passed: the group decides
    assert listed.words({"kind": "tool_call_approval", "step_id": "s"}) == "approval of a tool call by step s"
    assert listed.words({"kind": "nonsense"}) == "nonsense"


def test_a_cursor_goes_on_only_with_the_filter_that_made_it():
    mine = Filter.of(decider="dana")
    cursor = _encode(_Position(NOW, ("run-1",)), mine)
    assert _decode(cursor, mine) == _Position(NOW, ("run-1",))
    with pytest.raises(InboxError, match="another filter"):
        _decode(cursor, Filter())
    for forged in ("!!", "e30", "bm90IGpzb24", cursor[:-3]):
        with pytest.raises(InboxError, match="not one the inbox gave"):
            _decode(forged, mine)
    with pytest.raises(InboxError, match="unknown waiting kind"):
        Filter.of(kinds=["everything"])
