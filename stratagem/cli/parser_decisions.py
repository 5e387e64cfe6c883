"""Adding the commands that decide for a run, and `cancel` and `keygen`, to the parser.

A deciding command's name and help are its kind's `Verb` (stratagem.domain.decisions.kinds), and the
commands are added in the table's order; what is the CLI's own, its handler and its options, is
the verb's row of `DECIDING` in `stratagem.cli.decisions`, beside the handler, so a new kind's
command is written in that one file.
"""

from __future__ import annotations

from stratagem.cli.arguments import Commands
from stratagem.cli.decisions import DECIDING, cmd_cancel, cmd_keygen
from stratagem.cli.effects import EFFECTS
from stratagem.domain.decisions import KINDS


def add_decisions(commands: Commands) -> None:
    """Every command that sends a decision: deciding the plan and the steps that wait for a
    person, a run's budget, and the repairs, each named and described by its kind's verb."""
    for kind in KINDS:
        for verb in kind.verbs:
            handler, options = DECIDING.get(verb.name) or EFFECTS[verb.name]
            options(commands.add(verb.name, handler, verb.help))


def add_cancel(commands: Commands) -> None:
    cancel = commands.add("cancel", cmd_cancel, "cancel a run", json=False)
    cancel.add_argument("run_id")


def add_keygen(commands: Commands) -> None:
    keygen = commands.add("keygen", cmd_keygen, "make a key pair to sign your decisions with (see SECURITY.md)")
    keygen.add_argument("name", help="the name your decisions carry, e.g. alice")
    keygen.add_argument(
        "--out", metavar="FILE", help="where to write the private key (default: $STRATAGEM_HOME/keys/NAME.key)"
    )
