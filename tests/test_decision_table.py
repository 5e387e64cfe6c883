"""The run workflow receives exactly the decisions of the table of kinds (stratagem.domain.decisions.kinds),
under the table's update and signal names and with its input models, so the client, which sends
by the same table, and the run cannot disagree."""

from __future__ import annotations

import pytest
from temporalio import workflow

from stratagem.domain.decisions import KINDS
from workflows.messages import DECISIONS
from workflows.stratagem_run import StratagemRun

pytestmark = pytest.mark.unit


def test_the_workflow_has_one_row_per_kind_of_the_table():
    assert [row.kind for row in DECISIONS if row.kind not in KINDS] == []
    assert sorted(row.kind.name for row in DECISIONS) == sorted(kind.name for kind in KINDS)


def test_each_kinds_update_and_signal_take_its_input_on_the_workflow():
    # The SDK's own reading of the class: what a worker registers, and a client's payload is converted to.
    definition = workflow._Definition.must_from_class(StratagemRun)
    for kind in KINDS:
        update, signal = definition.updates[kind.update], definition.signals[kind.signal]
        assert update.arg_types == [kind.input] and update.validator is not None, kind.name
        assert signal.arg_types == [kind.input], kind.name
