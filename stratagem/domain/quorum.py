"""Quorum and four eyes, as rules over names: who may decide on a step, when a quorum is more than
that many people can reach, and when two names are the same person.

What a run does with them (counting approvals, refusing the same person twice or an author) is
`stratagem.domain.decisions.quorum`'s; this is what plan validation checks before a run starts.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Collection, Mapping

from stratagem.domain.plan import Step


def person(name: str) -> str:
    """What tells one person from another: `Dana`, `dana` and `ｄａｎａ ` are one person, so a
    quorum cannot be met by writing one name twice in two spellings (the approver lists compare
    names exactly, and a deployment that lets anyone approve compares nothing else)."""
    return unicodedata.normalize("NFKC", name).casefold().strip()


def same_person(a: str, b: str) -> bool:
    return person(a) == person(b)


def deciders(
    named: Collection[str], run_approvers: Collection[str] | None, groups: Mapping[str, list[str]]
) -> list[str] | None:
    """The people who may decide on something that names `named` (people or groups; empty: nobody
    in particular), within the run's approver list. None: anyone may."""
    people: list[str] = []
    for name in named:
        for someone in groups.get(name, [name]):
            if someone not in people:
                people.append(someone)
    if run_approvers is None:
        return people or None
    if not named:
        return list(run_approvers)
    return [p for p in people if p in run_approvers]


def distinct(people: Collection[str]) -> list[str]:
    """The different people a list of names is, each once (two spellings of one name are one)."""
    seen: dict[str, str] = {}
    for name in people:
        seen.setdefault(person(name), name)
    return list(seen.values())


def quorum_problems(
    step: Step, run_approvers: Collection[str] | None, groups: Mapping[str, list[str]], *, auto_approve: bool = False
) -> list[str]:
    """A quorum nobody could reach waits forever, and a run that approves itself has one signer."""
    quorum = step.quorum or 1
    if auto_approve and (quorum > 1 or step.four_eyes):
        rule = f"a quorum of {quorum}" if quorum > 1 else "four eyes"
        return [
            f"step '{step.id}' needs {rule}, but the run approves itself (auto_approve), which is one signer: "
            "drop auto_approve or the step's rule"
        ]
    people = deciders(step.approvers, run_approvers, groups)
    if quorum > 1 and people is not None and quorum > len(found := distinct(people)):
        return [f"quorum {quorum} but only {len(found)} may approve step '{step.id}' ({', '.join(found)})"]
    return []


def options_problem(
    quorum: int,
    four_eyes: bool,
    auto_approve: bool,
    run_approvers: Collection[str] | None,
    replan_requires_approval: bool = True,
    started_by: str | None = None,
) -> str | None:
    """What is wrong with a run's own quorum and four eyes, for the plan's approval (one line).
    Under four eyes the starter (`started_by`) is not among those who may approve."""
    rule = f"quorum {quorum}" if quorum > 1 else "four eyes"
    if auto_approve and (quorum > 1 or four_eyes):
        return f"{rule} needs people to approve, but auto_approve approves alone (one signer): drop one of them"
    if not replan_requires_approval and (quorum > 1 or four_eyes):
        return f"{rule} needs people to approve every revision, but replan_requires_approval is off: drop one of them"
    if run_approvers is None:
        return None
    found = distinct(run_approvers)
    barred = ""
    if four_eyes and started_by and any(same_person(started_by, p) for p in found):
        found = [p for p in found if not same_person(started_by, p)]
        barred = f"; four eyes bars {started_by}, who starts the run"
    if quorum > len(found) and (quorum > 1 or barred):
        return f"quorum {quorum} but only {len(found)} may approve the plan ({', '.join(found) or 'nobody'}){barred}"
    return None
