"""The options of the commands that decide for a run, and of `cancel` and `keygen`; what each
command does is in `stratagem.cli.decisions`."""

from __future__ import annotations

from .arguments import Commands, positive
from .decisions import (
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


def add_decisions(commands: Commands) -> None:
    """Deciding the plan and the steps that wait for a person, and a run's budget."""
    approve = commands.add("approve", cmd_approve, "approve the plan awaiting review, or a gated step")
    approve.add_argument("run_id")
    approve.add_argument("--revision", type=int, help="refuse if the plan under review is not this revision")
    approve.add_argument("--step", metavar="STEP_ID", help="approve this gated step instead of the plan")
    approve.add_argument("--call", metavar="CALL_ID", help="with --step: approve this tool call of the llm step")
    approve.add_argument("--by", metavar="NAME")
    approve.add_argument("--comment", default="")

    reject = commands.add("reject", cmd_reject, "reject the plan (ending the run) or a gated step")
    reject.add_argument("run_id")
    reject.add_argument("--reason", required=True)
    reject.add_argument("--revision", type=int)
    reject.add_argument("--step", metavar="STEP_ID")
    reject.add_argument("--call", metavar="CALL_ID", help="with --step: reject this tool call (the step is told)")
    reject.add_argument("--by", metavar="NAME")

    revise = commands.add(
        "revise",
        cmd_revise,
        "replace the plan with an edited plan file: under review, while it runs, or as a repair",
    )
    revise.add_argument("run_id")
    revise.add_argument("plan_file")
    revise.add_argument("--revision", type=int, help="the revision your edit is based on")
    revise.add_argument("--reason", default="")
    revise.add_argument("--by", metavar="NAME")

    answer = commands.add("answer", cmd_answer, "answer a human step")
    answer.add_argument("run_id")
    answer.add_argument("step_id")
    answer.add_argument("text")
    answer.add_argument("--json-value", action="store_true", help="parse TEXT as JSON")
    answer.add_argument("--by", metavar="NAME")

    budget = commands.add("budget", cmd_budget, "raise a run's budget, or stop a run that used it up")
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


def add_repairs(commands: Commands) -> None:
    """Repairing a run that waits after a failed step: run it again, skip it, ask again, or stop."""
    retry = commands.add("retry", cmd_retry, "repair: run a failed step again, with new arguments if given")
    retry.add_argument("run_id")
    retry.add_argument("step_id")
    retry.add_argument("--args", metavar="JSON", help="the tool step's new arguments, a JSON object")
    retry.add_argument("--reason", default="")
    retry.add_argument("--by", metavar="NAME")

    skip = commands.add("skip", cmd_skip, "repair: count a failed step as done, with its output given by hand")
    skip.add_argument("run_id")
    skip.add_argument("step_id")
    skip.add_argument("--output", required=True, metavar="JSON", help="the step's output, as JSON")
    skip.add_argument("--reason", default="")
    skip.add_argument("--by", metavar="NAME")

    again = commands.add(
        "ask-again",
        cmd_ask_again,
        "repair: ask a human step's question again; the failed steps using it rerun",
    )
    again.add_argument("run_id")
    again.add_argument("step_id", help="the human step whose answer a failed step used")
    again.add_argument("--reason", default="")
    again.add_argument("--by", metavar="NAME")

    stop = commands.add("stop", cmd_stop, "repair: end a run that waits for a repair, as failed")
    stop.add_argument("run_id")
    stop.add_argument("--reason", default="")
    stop.add_argument("--by", metavar="NAME")


def add_cancel(commands: Commands) -> None:
    cancel = commands.add("cancel", cmd_cancel, "cancel a run", json=False)
    cancel.add_argument("run_id")


def add_keygen(commands: Commands) -> None:
    keygen = commands.add("keygen", cmd_keygen, "make a key pair to sign your decisions with (see SECURITY.md)")
    keygen.add_argument("name", help="the name your decisions carry, e.g. alice")
    keygen.add_argument(
        "--out", metavar="FILE", help="where to write the private key (default: $STRATAGEM_HOME/keys/NAME.key)"
    )
