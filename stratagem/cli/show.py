"""`stratagem show`: a plan revision as a graph, as Mermaid, or as a diff between revisions.

Plain functions over `Plan` and `Ledger`, so they are tested without a server; the command
only fetches the ledger and prints what these return.

A plan is a DAG, not a tree. The terminal view is a spanning forest: each step is placed once,
under its *primary* parent (the dependency that comes last in topological order), and a step
with several parents says "after: a, b". The view is linear in the number of steps however
many paths lead to a step.
"""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.text import Text
from rich.tree import Tree

from stratagem.cli.errors import CliError
from stratagem.cli.render import STATUS_STYLE
from stratagem.domain.graph import topological_order
from stratagem.domain.ledger import EventKind, Ledger, StepRecord, StepStatus
from stratagem.domain.plan import Plan, Step, StepKind
from stratagem.domain.plan_diff import diff_lines, diff_revisions

# Mermaid classes: succeeded green, failed red, running blue, pending grey, skipped/cancelled yellow.
MERMAID_CLASSES = {
    StepStatus.succeeded: "fill:#d4edda,stroke:#28a745,color:#155724",
    StepStatus.failed: "fill:#f8d7da,stroke:#dc3545,color:#721c24",
    StepStatus.running: "fill:#cce5ff,stroke:#007bff,color:#004085",
    StepStatus.pending: "fill:#e2e3e5,stroke:#6c757d,color:#383d41",
    StepStatus.skipped: "fill:#fff3cd,stroke:#ffc107,color:#856404",
    StepStatus.cancelled: "fill:#fff3cd,stroke:#ffc107,color:#856404",
    StepStatus.in_doubt: "fill:#fde2f3,stroke:#c11574,color:#851651,stroke-dasharray:4 2",
}

# The step fields a diff compares, in the order it reports them.


# ---------------------------------------------------------------------------- choosing a revision


def pick_revision(ledger: Ledger, number: int | None) -> Plan:
    """Revision `number` of the run (default: the newest), or a one-line error naming those there are."""
    if not ledger.revisions:
        raise CliError(f"run {ledger.run_id} has no plan yet (it is still planning)")
    if number is None:
        return ledger.revisions[-1]
    try:
        return ledger.revision(number)
    except KeyError:
        known = ", ".join(str(p.revision) for p in ledger.revisions)
        raise CliError(f"run {ledger.run_id} has no revision {number} (revisions: {known})") from None


_ENDED = {
    EventKind.step_succeeded: StepStatus.succeeded,
    EventKind.step_carried: StepStatus.succeeded,
    EventKind.step_failed: StepStatus.failed,
    EventKind.step_skipped: StepStatus.skipped,
    EventKind.step_cancelled: StepStatus.cancelled,
    EventKind.step_in_doubt: StepStatus.in_doubt,
}


def as_of(ledger: Ledger, plan: Plan) -> Ledger:
    """The ledger as `plan`'s revision left it: for a superseded revision, each step's status is
    the last one it reached under that revision or an earlier one, from the events (a step that
    ran only under a later revision did not run under this one). The current records describe
    the latest revision only: `show --revision 1` once marked a step succeeded under revision 1
    that had failed there and succeeded under revision 2."""
    if not ledger.revisions or plan.revision == ledger.revisions[-1].revision:
        return ledger
    reached: dict[str, StepStatus] = {}
    for event in ledger.events:
        if event.step_id and event.revision is not None and event.revision <= plan.revision:
            if event.kind in _ENDED:
                reached[event.step_id] = _ENDED[event.kind]
            elif event.kind is EventKind.step_started:
                reached[event.step_id] = StepStatus.running
    steps = {}
    for step in plan.steps:
        status = reached.get(step.id, StepStatus.pending)
        current = ledger.steps.get(step.id)
        same = current is not None and current.status is status and (current.revision or 0) <= plan.revision
        steps[step.id] = current if same and current is not None else StepRecord(step_id=step.id, status=status)
    return ledger.model_copy(update={"steps": steps})


def step_status(ledger: Ledger | None, step_id: str) -> StepStatus:
    record = ledger.steps.get(step_id) if ledger is not None else None
    return record.status if record else StepStatus.pending


# ---------------------------------------------------------------------------- layout


def edges_of(plan: Plan) -> dict[str, list[str]]:
    """step id -> its dependencies that are in the plan, in the plan's step order."""
    ids = set(plan.step_ids)
    return {s.id: [d for d in s.depends_on if d in ids] for s in plan.steps}


def spanning_forest(plan: Plan) -> tuple[list[str], dict[str, list[str]]]:
    """(roots, children): every step exactly once, under the dependency that comes last in
    topological order; roots are the steps with no dependency. Both in topological order."""
    edges = edges_of(plan)
    order = topological_order(edges)
    position = {step_id: i for i, step_id in enumerate(order)}
    roots: list[str] = []
    children: dict[str, list[str]] = {step_id: [] for step_id in order}
    for step_id in order:
        deps = edges[step_id]
        if deps:
            children[max(deps, key=position.__getitem__)].append(step_id)
        else:
            roots.append(step_id)
    return roots, children


def step_line(step: Step, record: StepRecord | None, parents: list[str]) -> Text:
    """One step: id, kind, what it does, status, attempts, usage, and its parents when several."""
    status = record.status if record else StepStatus.pending
    line = Text.assemble((step.id, "bold"), " ", (f"[{step.kind.value}]", "dim"), " ", no_wrap=False, overflow="fold")
    line.append(f"{step.tool} · {step.title}" if step.kind is StepKind.tool and step.tool else step.title)
    line.append("  ")
    line.append(status.value, STATUS_STYLE[status])
    if record and record.attempts:
        line.append(f" · {record.attempts} attempt{'s' if record.attempts != 1 else ''}")
    if record and record.usage is not None and record.usage.calls:
        usage = record.usage
        line.append(f" · {usage.tokens:,} tok")
        if usage.unpriced_calls == 0:
            line.append(f" · ${usage.cost_usd:.4f}")
    if len(parents) > 1:
        line.append(f"  after: {', '.join(parents)}", "magenta")
    return line


def plan_tree(plan: Plan, ledger: Ledger | None = None) -> Tree:
    """The plan as a rich Tree over its spanning forest (built without recursion)."""
    edges = edges_of(plan)
    by_id = {s.id: s for s in plan.steps}
    roots, children = spanning_forest(plan)
    tree = Tree(Text(f"revision {plan.revision}", "bold"), guide_style="dim")
    stack: list[tuple[Tree, str]] = [(tree, root) for root in reversed(roots)]
    while stack:
        parent, step_id = stack.pop()
        record = ledger.steps.get(step_id) if ledger is not None else None
        node = parent.add(step_line(by_id[step_id], record, edges[step_id]))
        stack.extend((node, child) for child in reversed(children[step_id]))
    return tree


def header_lines(plan: Plan, *, run_id: str, phase: str | None, ledger: Ledger | None, total: int) -> list[str]:
    lines = [f"{run_id}  revision {plan.revision} of {total}" + (f"  {phase}" if phase else "")]
    lines.append(f"goal: {plan.goal}")
    lines.append(f"author: {plan.author}" + (f"  reason: {plan.reason}" if plan.reason else ""))
    if ledger is not None and ledger.usage.calls:
        lines.append(f"model usage: {ledger.usage.describe()}")
    return lines


def plan_view(plan: Plan, ledger: Ledger, *, phase: str | None = None) -> Group:
    header = [
        Text(line)
        for line in header_lines(plan, run_id=ledger.run_id, phase=phase, ledger=ledger, total=len(ledger.revisions))
    ]
    return Group(*header, plan_tree(plan, ledger))


def plan_json(plan: Plan, ledger: Ledger) -> dict[str, Any]:
    steps = []
    for step_id in topological_order(edges_of(plan)):
        step = plan.step(step_id)
        record = ledger.steps.get(step_id)
        steps.append(
            {
                "id": step.id,
                "kind": step.kind.value,
                "title": step.title,
                "tool": step.tool,
                "status": step_status(ledger, step_id).value,
                "depends_on": list(step.depends_on),
                "attempts": record.attempts if record else 0,
                "usage": record.usage.model_dump(mode="json") if record and record.usage else None,
            }
        )
    return {
        "run_id": ledger.run_id,
        "revision": plan.revision,
        "author": str(plan.author),
        "reason": plan.reason,
        "goal": plan.goal,
        "usage": ledger.usage.model_dump(mode="json"),
        "steps": steps,
    }


# ---------------------------------------------------------------------------- mermaid


def mermaid_id(step_id: str) -> str:
    """A Mermaid-safe node id, one-to-one with step ids: '_' -> '__', '-' -> '_d', prefixed
    with 's_' (so no id is a Mermaid keyword such as 'end')."""
    return "s_" + "".join("__" if c == "_" else "_d" if c == "-" else c for c in step_id)


_MERMAID_ENTITIES = {
    "#": "#35;",  # first: the other escapes introduce '#'
    '"': "#quot;",
    "[": "#91;",
    "]": "#93;",
    "(": "#40;",
    ")": "#41;",
    "{": "#123;",
    "}": "#125;",
    "<": "#lt;",
    ">": "#gt;",
    "&": "#amp;",
    "|": "#124;",
    "`": "#96;",
}


def mermaid_text(text: str) -> str:
    """Text safe inside a quoted Mermaid label: entity codes for the characters Mermaid reads,
    line breaks as spaces."""
    text = " ".join(text.split())
    return "".join(_MERMAID_ENTITIES.get(c, c) for c in text)


def mermaid(plan: Plan, ledger: Ledger | None = None) -> str:
    """A `flowchart TD`: one node per step, an edge from each dependency to its dependent,
    and a class per status."""
    edges = edges_of(plan)
    order = topological_order(edges)
    by_id = {s.id: s for s in plan.steps}
    lines = ["flowchart TD"]
    for step_id in order:
        status = step_status(ledger, step_id)
        label = f"{mermaid_text(step_id)}: {mermaid_text(by_id[step_id].title)}<br/>{status.value}"
        lines.append(f'    {mermaid_id(step_id)}["{label}"]')
    for step_id in order:
        for dep in edges[step_id]:
            lines.append(f"    {mermaid_id(dep)} --> {mermaid_id(step_id)}")
    for status, style in MERMAID_CLASSES.items():
        lines.append(f"    classDef {status.value} {style}")
    for status in MERMAID_CLASSES:
        members = [mermaid_id(s) for s in order if step_status(ledger, s) is status]
        if members:
            lines.append(f"    class {','.join(members)} {status.value}")
    return "\n".join(lines) + "\n"


__all__ = ["diff_lines", "diff_revisions"]  # shown by `show --diff` and as a revision arrives
