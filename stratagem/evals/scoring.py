"""Scoring a plan: against a reference plan, and against a case's checks. Pure functions.

Node and edge F1 follow TaskBench and WorFBench: a plan is compared with its reference as a
graph whose nodes are labelled by what they do, not by the ids the planner chose. A node's label
is its tool's name for a tool step and its kind (`llm`, `human`) otherwise; an edge is the pair
(label of the dependency, label of the step that depends on it), one for each `depends_on`
entry. Both are multisets (two `provision_access` steps are two nodes), and precision, recall and
F1 are taken over them: the matches are the labels common to both, each counted as often as it
is in both. An empty edge set against an empty one scores 1.0 (a plan of parallel steps whose
reference has no dependencies either is right); against a non-empty one, 0.

A check (stratagem.evals.cases.Check) passes or fails with one line saying why. A step *calls* a
tool when it is a tool step on it or an llm step allowed to call it; a kind (`human`, `llm`)
stands for every step of that kind.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import TypeVar

from pydantic import BaseModel

from stratagem.domain.catalog import ToolCatalog
from stratagem.domain.graph import ancestry
from stratagem.domain.plan import PlanDraft, Step, StepKind
from stratagem.domain.risk import gated_calls, needs_approval
from stratagem.evals.cases import KINDS, Check

Label = TypeVar("Label", str, tuple[str, str])


class F1(BaseModel):
    precision: float
    recall: float
    f1: float


class CheckResult(BaseModel):
    check: str
    """The check as written: `asks_before schedule_payment`."""
    passed: bool
    why: str


def label(step: Step) -> str:
    """What a step does, for scoring: its tool's name, or its kind."""
    return (step.tool or "") if step.kind is StepKind.tool else step.kind.value


def nodes(plan: PlanDraft) -> Counter[str]:
    return Counter(label(step) for step in plan.steps)


def edges(plan: PlanDraft) -> Counter[tuple[str, str]]:
    """(dependency's label, dependent's label), one per `depends_on` entry naming a step of the plan."""
    by_id = {step.id: step for step in plan.steps}
    return Counter((label(by_id[dep]), label(step)) for step in plan.steps for dep in step.depends_on if dep in by_id)


def f1(predicted: Counter[Label], reference: Counter[Label]) -> F1:
    """Precision, recall and F1 of `predicted` against `reference`, both multisets."""
    made, wanted = sum(predicted.values()), sum(reference.values())
    if not made and not wanted:
        return F1(precision=1.0, recall=1.0, f1=1.0)
    common = sum(min(count, reference[key]) for key, count in predicted.items())
    precision = common / made if made else 0.0
    recall = common / wanted if wanted else 0.0
    score = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return F1(precision=precision, recall=recall, f1=score)


def node_f1(plan: PlanDraft, reference: PlanDraft) -> F1:
    return f1(nodes(plan), nodes(reference))


def edge_f1(plan: PlanDraft, reference: PlanDraft) -> F1:
    return f1(edges(plan), edges(reference))


# ------------------------------------------------------------------ checks


def calls(step: Step, target: str) -> bool:
    """Whether `step` calls the tool `target` (or is of the kind `target`)."""
    if target in KINDS:
        return step.kind.value == target
    if step.kind is StepKind.tool:
        return step.tool == target
    return step.kind is StepKind.llm and target in step.tools


def run_checks(plan: PlanDraft, checks: Iterable[Check], catalog: ToolCatalog | None = None) -> list[CheckResult]:
    return [run_check(plan, check, catalog) for check in checks]


def run_check(plan: PlanDraft, check: Check, catalog: ToolCatalog | None = None) -> CheckResult:
    """Whether `plan` meets `check`. `catalog`: the tools as the run sees them, so a tool that
    declares that every use waits for approval counts as asking (as the run makes it ask)."""
    rule, target = check.rule
    callers = [step for step in plan.steps if calls(step, target)]
    article = "an" if target == "llm" else "a"
    doing = f"is {article} {target} step" if target in KINDS else f"calls {target}"  # a kind, or a tool
    named = ", ".join(f"'{step.id}'" for step in callers[:3]) + (" ..." if len(callers) > 3 else "")
    if rule == "uses":
        if callers:
            return _result(check, True, f"step {named} {doing}")
        return _result(check, False, f"no step {doing}")
    if rule == "avoids":
        if callers:
            return _result(check, False, f"step {named} {doing}")
        return _result(check, True, f"no step {doing}")
    if not callers:
        return _result(check, True, f"no step {doing}")
    by_id = {step.id: step for step in plan.steps}
    depends = {step.id: [dep for dep in step.depends_on if dep in by_id] for step in plan.steps}
    is_ancestor = ancestry(depends)
    if rule == "asks_before":
        for step in callers:
            before = [by_id[other] for other in by_id if is_ancestor(step.id, other)]
            if not any(_asks(s, target, catalog) for s in [step, *before]):
                return _result(check, False, f"step '{step.id}' {doing} with no human step or approval before it")
        return _result(check, True, f"a person is asked before every step that {doing} ({named})")
    # nothing_after
    for step in callers:
        after = [other for other in by_id if is_ancestor(other, step.id)]
        if after:
            return _result(check, False, f"step '{after[0]}' comes after step '{step.id}', which {doing}")
    return _result(check, True, f"no step comes after {named}")


def _asks(step: Step, target: str, catalog: ToolCatalog | None) -> bool:
    """Whether a person is asked at `step`: a human step, or one that waits for its approval
    (by the plan, or by its tool's declaration), or an llm step whose calls of `target` wait."""
    if step.kind is StepKind.human or step.needs_step_approval:
        return True
    if catalog is None:
        return False
    return needs_approval(step, catalog) or target in gated_calls(step, catalog)


def _result(check: Check, passed: bool, why: str) -> CheckResult:
    return CheckResult(check=str(check), passed=passed, why=why)
