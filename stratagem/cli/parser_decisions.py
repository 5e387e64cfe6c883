"""The options of the commands that decide for a run, and of `cancel` and `keygen`; what each
command does is in `stratagem.cli.decisions`.

A deciding command's name and help are its kind's `Verb` (stratagem.domain.decisions.kinds), and the
commands are added in the table's order; what is the CLI's own, its handler and its options, is
`DECIDING` here, by the verb's name.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from stratagem.cli.arguments import Commands, positive
from stratagem.cli.decisions import (
    cmd_answer,
    cmd_approve,
    cmd_ask_again,
    cmd_budget,
    cmd_cancel,
    cmd_keygen,
    cmd_reject,
    cmd_retry,
    cmd_revise,
    cmd_skip,
    cmd_stop,
)
from stratagem.domain.decisions import KINDS


def approve_options(approve: argparse.ArgumentParser) -> None:
    approve.add_argument("run_id")
    approve.add_argument("--revision", type=int, help="refuse if the plan under review is not this revision")
    approve.add_argument("--step", metavar="STEP_ID", help="approve this gated step instead of the plan")
    approve.add_argument("--call", metavar="CALL_ID", help="with --step: approve this tool call of the llm step")
    approve.add_argument("--by", metavar="NAME")
    approve.add_argument("--comment", default="")


def reject_options(reject: argparse.ArgumentParser) -> None:
    reject.add_argument("run_id")
    reject.add_argument("--reason", required=True)
    reject.add_argument("--revision", type=int)
    reject.add_argument("--step", metavar="STEP_ID")
    reject.add_argument("--call", metavar="CALL_ID", help="with --step: reject this tool call (the step is told)")
    reject.add_argument("--by", metavar="NAME")


def revise_options(revise: argparse.ArgumentParser) -> None:
    revise.add_argument("run_id")
    revise.add_argument("plan_file")
    revise.add_argument("--revision", type=int, help="the revision your edit is based on")
    revise.add_argument("--reason", default="")
    revise.add_argument("--by", metavar="NAME")


def answer_options(answer: argparse.ArgumentParser) -> None:
    answer.add_argument("run_id")
    answer.add_argument("step_id")
    answer.add_argument("text")
    answer.add_argument("--json-value", action="store_true", help="parse TEXT as JSON")
    answer.add_argument("--by", metavar="NAME")


def budget_options(budget: argparse.ArgumentParser) -> None:
    budget.add_argument("run_id")
    budget.add_argument("--tokens", type=positive(int), metavar="N", help="new token limit (input + output)")
    budget.add_argument("--cost", type=positive(float), metavar="USD", help="new cost limit in US dollars")
    budget.add_argument("--calls", type=positive(int), metavar="N", help="new limit on model calls")
    budget.add_argument(
        "--seconds", type=positive(float), metavar="N", help="new wall-clock limit, from the run's start"
    )
    budget.add_argument("--stop", action="store_true", help="end the run instead (it must be waiting on its budget)")
    budget.add_argument("--reason", default="")
    budget.add_argument("--by", metavar="NAME")


# The repairs of a run that waits after a failed step: run it again, skip it, ask again, or stop.


def retry_options(retry: argparse.ArgumentParser) -> None:
    retry.add_argument("run_id")
    retry.add_argument("step_id")
    retry.add_argument("--args", metavar="JSON", help="the tool step's new arguments, a JSON object")
    retry.add_argument("--reason", default="")
    retry.add_argument("--by", metavar="NAME")


def skip_options(skip: argparse.ArgumentParser) -> None:
    skip.add_argument("run_id")
    skip.add_argument("step_id")
    skip.add_argument("--output", required=True, metavar="JSON", help="the step's output, as JSON")
    skip.add_argument("--reason", default="")
    skip.add_argument("--by", metavar="NAME")


def ask_again_options(again: argparse.ArgumentParser) -> None:
    again.add_argument("run_id")
    again.add_argument("step_id", help="the human step whose answer a failed step used")
    again.add_argument("--reason", default="")
    again.add_argument("--by", metavar="NAME")


def stop_options(stop: argparse.ArgumentParser) -> None:
    stop.add_argument("run_id")
    stop.add_argument("--reason", default="")
    stop.add_argument("--by", metavar="NAME")


Options = Callable[[argparse.ArgumentParser], None]
# Each deciding command's handler and options, by its verb's name.
DECIDING: dict[str, tuple[Callable[[argparse.Namespace], Any], Options]] = {
    "approve": (cmd_approve, approve_options),
    "reject": (cmd_reject, reject_options),
    "revise": (cmd_revise, revise_options),
    "answer": (cmd_answer, answer_options),
    "budget": (cmd_budget, budget_options),
    "retry": (cmd_retry, retry_options),
    "skip": (cmd_skip, skip_options),
    "ask-again": (cmd_ask_again, ask_again_options),
    "stop": (cmd_stop, stop_options),
}


def add_decisions(commands: Commands) -> None:
    """Every command that sends a decision: deciding the plan and the steps that wait for a
    person, a run's budget, and the repairs, each named and described by its kind's verb."""
    for kind in KINDS:
        for verb in kind.verbs:
            handler, options = DECIDING[verb.name]
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
