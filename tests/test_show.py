"""`stratagem show`: the pure layout, Mermaid and diff functions, and the command on a real server."""

from __future__ import annotations

import json

import pytest
from rich.console import Console
from support.cli import TOOLS, acli, one_line_error, write_plan
from support.plans import step

from stratagem.cli.show import (
    diff_lines,
    diff_revisions,
    mermaid,
    mermaid_id,
    plan_json,
    plan_tree,
    plan_view,
    spanning_forest,
)
from stratagem.domain.ledger import Ledger, StepRecord, StepStatus
from stratagem.domain.plan import Author, AuthorKind, Plan
from stratagem.domain.usage import UsageTotals


def plan_of(steps: list[dict], revision: int = 1, reason: str = "", goal: str = "g") -> Plan:
    return Plan.model_validate(
        {
            "goal": goal,
            "steps": steps,
            "reason": reason,
            "revision": revision,
            "author": Author(kind=AuthorKind.human, name="ann"),
        }
    )


def ledger_of(*plans: Plan, statuses: dict[str, StepStatus] | None = None) -> Ledger:
    ledger = Ledger(run_id="r1")
    for plan in plans:
        ledger.add_revision(plan)
    for step_id, status in (statuses or {}).items():
        ledger.steps[step_id] = StepRecord(step_id=step_id, status=status, attempts=1)
    return ledger


DIAMOND = plan_of(
    [
        step("top", "record"),
        step("left", "record", ["top"]),
        step("right", "record", ["top"]),
        step("bottom", "record", ["left", "right"]),
    ]
)


def wide(layers: int = 12, width: int = 3) -> Plan:
    """Every step of a layer depends on every step of the one before: width**layers paths."""
    steps = [step(f"s0-{i}", "record") for i in range(width)]
    for layer in range(1, layers):
        steps += [step(f"s{layer}-{i}", "record", [f"s{layer - 1}-{j}" for j in range(width)]) for i in range(width)]
    return plan_of(steps)


def rendered(renderable) -> str:
    console = Console(width=200, color_system=None, record=True)
    with console.capture() as capture:
        console.print(renderable)
    return capture.get()


@pytest.mark.unit
def test_diamond_layout_places_each_step_once_and_names_both_parents():
    roots, children = spanning_forest(DIAMOND)
    assert roots == ["top"]
    assert children == {"top": ["left", "right"], "left": [], "right": ["bottom"], "bottom": []}
    text = rendered(plan_tree(DIAMOND, ledger_of(DIAMOND, statuses={"top": StepStatus.succeeded})))
    for step_id in ("top", "left", "right", "bottom"):
        assert text.count(f" {step_id} [tool] ") == 1, text
    assert "after: left, right" in text
    assert "after: top" not in text  # one parent: the tree already says so
    assert "succeeded · 1 attempt" in text


@pytest.mark.unit
def test_wide_dag_every_step_once():
    plan = wide()
    roots, children = spanning_forest(plan)
    placed = roots + [c for kids in children.values() for c in kids]
    assert sorted(placed) == sorted(plan.step_ids)
    text = rendered(plan_tree(plan))
    assert len([line for line in text.splitlines() if " [tool] " in line]) == len(plan.step_ids) == 36
    assert text.count("after: s10-0, s10-1, s10-2") == 3


@pytest.mark.unit
def test_mermaid_edges_classes_and_escaping():
    plan = plan_of(
        [
            {"id": "a-1", "title": 'say "hi" [now] #1\nthen <b>', "tool": "record"},
            step("a_1", "record", ["a-1"]),
            step("end", "record", ["a-1", "a_1"]),
        ]
    )
    ledger = ledger_of(plan, statuses={"a-1": StepStatus.succeeded, "a_1": StepStatus.failed})
    text = mermaid(plan, ledger)
    lines = text.splitlines()
    assert lines[0] == "flowchart TD"
    assert mermaid_id("a-1") == "s_a_d1" and mermaid_id("a_1") == "s_a__1" and mermaid_id("end") == "s_end"
    assert [line.strip() for line in lines if "-->" in line] == [
        "s_a_d1 --> s_a__1",
        "s_a_d1 --> s_end",
        "s_a__1 --> s_end",
    ]
    assert [line.strip() for line in lines if line.strip().startswith("class ")] == [
        "class s_a_d1 succeeded",
        "class s_a__1 failed",
        "class s_end pending",
    ]
    assert len([line for line in lines if "classDef" in line]) == len(StepStatus)  # one per status, in_doubt too
    assert "classDef failed fill:#f8d7da" in text and "classDef running fill:#cce5ff" in text
    node = next(line.strip() for line in lines if line.strip().startswith("s_a_d1["))
    assert node == 's_a_d1["a-1: say #quot;hi#quot; #91;now#93; #35;1 then #lt;b#gt;<br/>succeeded"]'
    label = node[len('s_a_d1["') : -2]
    assert '"' not in label and "[" not in label and "]" not in label and "\n" not in text.rstrip("\n").split("\n")[1]


@pytest.mark.unit
def test_diff_reports_added_removed_and_changed_fields():
    old = plan_of(
        [
            step("profile", "fetch_profile", user="ada"),
            step("charge", "broken", ["profile"], reason="card declined"),
            step("welcome", "record", ["charge"], label="hi"),
            {"id": "think", "title": "think", "kind": "llm", "instructions": "plan it", "tools": ["record"]},
        ],
        reason="first try",
    )
    new = plan_of(
        [
            step("profile", "fetch_profile", user="ada"),
            step("invoice", "record", label="invoice"),
            step("welcome", "record", ["invoice"], label="hello"),
            {
                "id": "think",
                "title": "think",
                "kind": "llm",
                "instructions": "plan it well",
                "tools": [],
                "tier": "fast",
                "risk": "high",
            },
        ],
        revision=2,
        reason="invoice instead",
    )
    diff = diff_revisions(old, new)
    assert diff["added"] == ["invoice"] and diff["removed"] == ["charge"]
    assert diff["changed"] == {
        "welcome": {"args": [{"label": "hi"}, {"label": "hello"}], "depends_on": [["charge"], ["invoice"]]},
        "think": {
            "instructions": ["plan it", "plan it well"],
            "tools": [["record"], []],
            "tier": [None, "fast"],
            "risk": ["low", "high"],
        },
    }
    assert (diff["from"], diff["to"]) == (1, 2) and "goal" not in diff
    assert diff["revisions"] == [
        {"revision": 1, "author": "human:ann", "reason": "first try"},
        {"revision": 2, "author": "human:ann", "reason": "invoice instead"},
    ]
    lines = diff_lines(diff)
    assert lines[:2] == ["from revision 1 by human:ann: first try", "to revision 2 by human:ann: invoice instead"]
    assert "+ invoice" in lines and "- charge" in lines
    assert "    args.label: hi → hello" in lines
    assert "    depends_on[0]: charge → invoice" in lines and "    tools[0]: removed record" in lines
    assert "    tier: None → fast" not in lines and "    tier: null → fast" in lines
    assert diff_revisions(old, old)["changed"] == {} and "no step changed" in diff_lines(diff_revisions(old, old))


@pytest.mark.unit
def test_the_diff_names_the_list_item_that_was_removed():
    items = ["laptop", "monitor", "dock", "headset"]
    args = {"cost_center": "CC-4120 Operations and facilities", "employee": "Zoë Martin", "items": items}
    old = plan_of([step("order", "record", **args)])
    new = plan_of([step("order", "record", **{**args, "items": ["laptop", "monitor", "headset"]})], revision=2)
    lines = diff_lines(diff_revisions(old, new))
    assert "    args.items[2]: removed dock" in lines
    assert not any("cost_center" in line for line in lines)  # what did not change is not shown
    nested = plan_of([step("order", "record", **{**args, "employee": "Zoë M.", "extra": {"a": 1}})], revision=2)
    lines = diff_lines(diff_revisions(old, nested))
    assert "    args.employee: Zoë Martin → Zoë M." in lines and '    args.extra: added {"a": 1}' in lines


@pytest.mark.unit
def test_json_and_header_carry_usage():
    ledger = ledger_of(DIAMOND, statuses={"top": StepStatus.succeeded})
    ledger.steps["top"].usage = UsageTotals(calls=2, input_tokens=100, output_tokens=20, cost_usd=0.0012)
    data = plan_json(DIAMOND, ledger)
    assert [s["id"] for s in data["steps"]] == ["top", "left", "right", "bottom"]
    assert data["steps"][0]["usage"]["calls"] == 2 and data["steps"][3]["depends_on"] == ["left", "right"]
    text = rendered(plan_view(DIAMOND, ledger, phase="running"))
    assert text.splitlines()[0] == "r1  revision 1 of 1  running"
    assert "120 tok · $0.0012" in text


@pytest.mark.system
async def test_show_on_a_revised_run(cli_env, tmp_path):
    env, _ = cli_env
    first = write_plan(
        tmp_path / "one.yaml",
        {
            "goal": "onboard",
            "steps": [
                step("profile", "fetch_profile", user="ada"),
                step("charge", "record", ["profile"], label="charge"),
            ],
        },
    )
    second = write_plan(
        tmp_path / "two.yaml",
        {
            "goal": "onboard",
            "steps": [
                step("profile", "fetch_profile", user="ada"),
                step("invoice", "record", label="invoice"),
                step("welcome", "record", ["profile", "invoice"], label="welcome ${profile.name}"),
            ],
        },
    )
    started = await acli("run", *TOOLS, "--plan", first, "--detach", "--id", "cli-show", "--by", "ann", env=env)
    assert started.returncode == 0, started.stderr
    revised = await acli(
        "revise", "cli-show", second, "--revision", "1", "--reason", "invoice instead", "--by", "bob", env=env
    )
    assert revised.returncode == 0, revised.stderr
    assert (await acli("approve", "cli-show", "--revision", "2", "--by", "bob", env=env)).returncode == 0
    assert (await acli("wait", "cli-show", env=env)).returncode == 0

    shown = await acli("show", "cli-show", env={**env, "COLUMNS": "160"})
    assert shown.returncode == 0, shown.stderr
    print(shown.stdout)
    assert "cli-show  revision 2 of 2  succeeded" in shown.stdout
    assert "author: human:bob  reason: invoice instead" in shown.stdout
    assert "after: profile, invoice" in shown.stdout and shown.stdout.count("welcome [tool]") == 1
    older = await acli("show", "cli-show", "--revision", "1", env=env)
    assert "revision 1 of 2" in older.stdout and "charge" in older.stdout

    chart = await acli("show", "cli-show", "--mermaid", env=env)
    print(chart.stdout)
    assert chart.stdout.startswith("flowchart TD\n")
    assert "s_profile --> s_welcome" in chart.stdout and "s_invoice --> s_welcome" in chart.stdout
    assert "class s_profile,s_invoice,s_welcome succeeded" in chart.stdout

    diff = await acli("show", "cli-show", "--diff", "1", "2", env=env)
    print(diff.stdout)
    assert diff.returncode == 0, diff.stderr
    assert "to revision 2 by human:bob: invoice instead" in diff.stdout
    assert "+ invoice" in diff.stdout and "+ welcome" in diff.stdout and "- charge" in diff.stdout
    diff_json = json.loads((await acli("show", "cli-show", "--diff", "1", "2", "--json", env=env)).stdout)
    assert (diff_json["added"], diff_json["removed"], diff_json["changed"]) == (["invoice", "welcome"], ["charge"], {})

    one_line_error(await acli("show", "cli-show", "--diff", "1", "9", env=env), "has no revision 9 (revisions: 1, 2)")
    assert (await acli("show", "cli-show", "--mermaid", "--diff", "1", "2", env=env)).returncode == 2

    data = json.loads((await acli("show", "cli-show", "--json", env=env)).stdout)
    assert (data["run_id"], data["revision"], data["goal"]) == ("cli-show", 2, "onboard")
    assert [(s["id"], s["status"], s["attempts"]) for s in data["steps"]] == [
        ("profile", "succeeded", 1),
        ("invoice", "succeeded", 1),
        ("welcome", "succeeded", 1),
    ]


@pytest.mark.workflow
async def test_a_superseded_revision_shows_what_ran_under_it(harness):
    """#36: `show --revision 1` marked a step succeeded under revision 1 that had failed there and
    succeeded only under revision 2."""
    from stratagem.cli import show
    from stratagem.domain.ledger import StepStatus
    from stratagem.domain.run_types import ApproveInput, Phase, RepairAction, RepairInput

    plan = {
        "goal": "ship",
        "steps": [
            {"id": "pack", "title": "Pack", "tool": "record", "args": {"label": "packed"}},
            {"id": "book", "title": "Book", "tool": "fails_once", "args": {"label": "usual"}, "depends_on": ["pack"]},
        ],
    }
    run = await harness.start(plan)
    await harness.wait_for(run, lambda s: bool(s.pending))
    await run.approve(ApproveInput(by="ops", revision=1))
    await harness.wait_for(run, lambda s: s.phase is Phase.awaiting_repair)
    await run.repair(RepairInput(by="ops", action=RepairAction.retry, step_id="book", args={"label": "other"}))
    assert (await run.result()).status is Phase.succeeded
    ledger = await run.ledger()
    first, second = ledger.revision(1), ledger.revision(2)
    then = show.as_of(ledger, first)
    assert then.steps["pack"].status is StepStatus.succeeded and then.steps["book"].status is StepStatus.failed
    assert show.as_of(ledger, second).steps["book"].status is StepStatus.succeeded
    assert show.plan_json(first, then)["steps"][1]["status"] == "failed"
