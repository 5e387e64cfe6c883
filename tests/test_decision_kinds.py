"""The table of decision kinds (stratagem.domain.decisions.kinds) agrees with everything it drives: the
wire names runs in flight answer to, the client's typed methods, the CLI's commands, and what a
run may wait for."""

from __future__ import annotations

import argparse
import typing

import pytest

from stratagem.cli import decisions as cli_decisions
from stratagem.cli import effects as cli_effects
from stratagem.cli import parser
from stratagem.client import RunHandle
from stratagem.domain import handlers
from stratagem.domain.decisions import KINDS, WAITS, kinds
from stratagem.domain.run_types import DecisionKind

pytestmark = pytest.mark.unit


def test_every_decision_on_the_wire_has_one_kind_with_its_update_and_signal():
    shipped = ["approve", "reject", "revise", "answer", "budget", "repair"]  # runs in flight answer to these
    assert [kind.update for kind in KINDS][: len(shipped)] == shipped
    assert len({kind.update for kind in KINDS}) == len(KINDS)
    for kind in KINDS:
        assert kind.name == kind.update
        assert kind.signal == handlers.signal_name(kind.update) == f"{kind.update}_signal"
        assert kinds.BY_SIGNAL[kind.signal] is kind
    assert kinds.BY_UPDATE["repair"] is kinds.REPAIR
    assert kinds.BY_SIGNAL["approve_signal"] is kinds.APPROVE


def test_the_clients_typed_methods_each_take_their_kinds_input():
    # `RunHandle.decide(kind, decision)` sends every kind; a typed method is a convenience a kind
    # may have (the six that shipped before the table have one), and where it exists it must take
    # that kind's input.
    typed = [kind for kind in KINDS if hasattr(RunHandle, kind.name)]
    assert {"approve", "reject", "revise", "answer", "budget", "repair"} <= {kind.name for kind in typed}  # documented
    for kind in typed:
        hints = typing.get_type_hints(getattr(RunHandle, kind.name))
        [argument] = [name for name in hints if name != "return"]
        assert hints[argument] is kind.input, kind.name
    decide = typing.get_type_hints(RunHandle.decide)
    assert set(decide) - {"return"} == {"kind", "decision"}


def test_each_cli_verb_is_a_command_with_the_kinds_help_and_a_deciding_handler():
    [commands] = [a for a in parser()._actions if isinstance(a, argparse._SubParsersAction)]
    for kind in KINDS:
        for verb in kind.verbs:
            command = commands.choices[verb.name]
            assert command.description == verb.help
            handler = command.get_default("handler")
            module = cli_effects if verb.name in cli_effects.EFFECTS else cli_decisions
            assert handler is getattr(module, "cmd_" + verb.name.replace("-", "_"))
            assert kinds.BY_VERB[verb.name] is kind


def test_every_wait_is_worded_and_answered_by_some_kind():
    assert set(WAITS) == set(DecisionKind)
    for waiting in DecisionKind:
        assert kinds.answered_by(waiting), waiting
    assert [k.name for k in kinds.answered_by(DecisionKind.plan_approval)] == ["approve", "reject", "revise"]
