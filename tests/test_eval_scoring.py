"""Scoring a plan for `stratagem eval`: node and edge F1 against a reference, computed by hand
here, and each check passing and failing for the reason it gives."""

from __future__ import annotations

import pytest

from stratagem.domain.catalog import ToolCatalog, ToolSpec
from stratagem.domain.plan import PlanDraft
from stratagem.domain.risk import Risk
from stratagem.evals.cases import Check
from stratagem.evals.scoring import edge_f1, edges, node_f1, nodes, run_check

pytestmark = pytest.mark.unit


def tool(id: str, name: str, *deps: str, **fields) -> dict:
    return {"id": id, "title": id, "tool": name, "depends_on": list(deps), **fields}


def human(id: str, *deps: str) -> dict:
    return {"id": id, "title": id, "kind": "human", "instructions": "?", "depends_on": list(deps)}


def llm(id: str, *deps: str, tools: tuple[str, ...] = ()) -> dict:
    return {"id": id, "title": id, "kind": "llm", "instructions": "do", "depends_on": list(deps), "tools": list(tools)}


def plan(*steps: dict) -> PlanDraft:
    return PlanDraft.model_validate({"goal": "g", "steps": list(steps)})


# A diamond: fetch -> (check, llm) -> pay
REFERENCE = plan(
    tool("a", "fetch"),
    tool("b", "check", "a"),
    llm("c", "a"),
    tool("d", "pay", "b", "c"),
)


def test_labels_are_tool_names_and_kinds_and_edges_pair_them_whatever_the_ids():
    renamed = plan(tool("x", "fetch"), tool("y", "check", "x"), llm("z", "x"), tool("w", "pay", "y", "z"))
    assert nodes(REFERENCE) == nodes(renamed) == {"fetch": 1, "check": 1, "llm": 1, "pay": 1}
    assert edges(REFERENCE) == {("fetch", "check"): 1, ("fetch", "llm"): 1, ("check", "pay"): 1, ("llm", "pay"): 1}
    assert node_f1(renamed, REFERENCE).f1 == edge_f1(renamed, REFERENCE).f1 == 1.0


def test_a_wrong_tool_and_a_missing_dependency_score_as_computed_by_hand():
    # `check` became `lookup`, and pay no longer waits for the llm step.
    made = plan(tool("a", "fetch"), tool("b", "lookup", "a"), llm("c", "a"), tool("d", "pay", "b"))
    nodes_score = node_f1(made, REFERENCE)
    assert (nodes_score.precision, nodes_score.recall, nodes_score.f1) == (0.75, 0.75, 0.75)  # 3 of 4 either way
    # made: (fetch,lookup) (fetch,llm) (lookup,pay); reference: 4 edges; common: (fetch,llm) only
    edges_score = edge_f1(made, REFERENCE)
    assert edges_score.precision == pytest.approx(1 / 3) and edges_score.recall == 0.25
    assert edges_score.f1 == pytest.approx(2 * (1 / 3) * 0.25 / (1 / 3 + 0.25))  # 2/7


def test_labels_count_as_a_multiset():
    # Two provision steps against one: precision 2/3 (the second is extra), recall 1.
    made = plan(tool("a", "account"), tool("b", "provision", "a"), tool("c", "provision", "a"))
    reference = plan(tool("a", "account"), tool("b", "provision", "a"))
    score = node_f1(made, reference)
    assert (score.precision, score.recall) == (pytest.approx(2 / 3), 1.0) and score.f1 == pytest.approx(0.8)
    assert edge_f1(made, reference).f1 == pytest.approx(2 / 3)  # (account, provision) twice against once: P 1/2, R 1


def test_no_edges_against_no_edges_is_right_and_against_some_is_wrong():
    parallel = plan(tool("a", "fetch"), tool("b", "check"))
    assert edge_f1(parallel, parallel).f1 == 1.0
    assert edge_f1(parallel, REFERENCE).f1 == 0.0 and edge_f1(REFERENCE, parallel).f1 == 0.0
    assert node_f1(parallel, REFERENCE).f1 == pytest.approx(2 * 1.0 * 0.5 / 1.5)  # 2 of 2 made, 2 of 4 wanted


def test_a_dependency_on_a_step_that_is_not_there_is_no_edge():
    made = PlanDraft.model_construct(goal="g", steps=plan(tool("a", "fetch", "ghost")).steps)
    assert edges(made) == {}


def check(**rule: str) -> Check:
    return Check(**rule)


def verdict(made: PlanDraft, rule: Check, catalog: ToolCatalog | None = None) -> tuple[bool, str]:
    result = run_check(made, rule, catalog)
    assert result.check == str(rule)
    return result.passed, result.why


def test_uses_and_avoids_look_at_tool_steps_llm_steps_tools_and_kinds():
    assert verdict(REFERENCE, check(uses="pay")) == (True, "step 'd' calls pay")
    assert verdict(REFERENCE, check(uses="refund")) == (False, "no step calls refund")
    assert verdict(REFERENCE, check(uses="llm")) == (True, "step 'c' is an llm step")
    assert verdict(REFERENCE, check(avoids="human")) == (True, "no step is a human step")
    assert verdict(REFERENCE, check(avoids="pay")) == (False, "step 'd' calls pay")
    may_call = plan(llm("a", tools=("send_email",)))
    assert verdict(may_call, check(avoids="send_email")) == (False, "step 'a' calls send_email")


def test_asks_before_passes_with_a_human_ancestor_an_approval_or_a_tool_that_declares_one():
    failing = verdict(REFERENCE, check(asks_before="pay"))
    assert failing == (False, "step 'd' calls pay with no human step or approval before it")
    by_person = plan(tool("a", "fetch"), human("ok", "a"), tool("b", "check", "ok"), tool("d", "pay", "b"))
    assert verdict(by_person, check(asks_before="pay"))[0]  # the person is an ancestor, not a parent
    by_risk = plan(tool("a", "fetch"), tool("d", "pay", "a", risk="high"))
    assert verdict(by_risk, check(asks_before="pay"))[0]
    approved_before = plan(tool("a", "fetch", requires_approval=True), tool("d", "pay", "a"))
    assert verdict(approved_before, check(asks_before="pay"))[0]
    aside = plan(tool("a", "fetch"), human("ok"), tool("d", "pay", "a"))  # a person, but not before it
    assert not verdict(aside, check(asks_before="pay"))[0]
    declared = ToolCatalog(tools=[ToolSpec(name="pay", risk=Risk.high)])
    plain = plan(tool("d", "pay"))
    assert not verdict(plain, check(asks_before="pay"))[0]
    assert verdict(plain, check(asks_before="pay"), declared)[0]  # the run makes it wait: it asks
    assert verdict(REFERENCE, check(asks_before="refund")) == (True, "no step calls refund")


def test_asks_before_holds_every_step_calling_the_tool_to_it():
    one_of_two = plan(human("ok"), tool("p1", "pay", "ok"), tool("p2", "pay"))
    assert verdict(one_of_two, check(asks_before="pay")) == (
        False,
        "step 'p2' calls pay with no human step or approval before it",
    )


def test_nothing_after_fails_on_a_step_that_depends_on_it_directly_or_not():
    assert verdict(REFERENCE, check(nothing_after="pay")) == (True, "no step comes after 'd'")
    assert verdict(REFERENCE, check(nothing_after="fetch")) == (
        False,
        "step 'b' comes after step 'a', which calls fetch",
    )
    chain = plan(tool("a", "pay"), tool("b", "log", "a"), tool("c", "mail", "b"))
    later = plan(tool("a", "pay"), tool("b", "log"), tool("c", "mail", "b", "a"))
    assert not verdict(chain, check(nothing_after="pay"))[0] and not verdict(later, check(nothing_after="pay"))[0]
    assert verdict(REFERENCE, check(nothing_after="refund"))[0]
