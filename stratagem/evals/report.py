"""An eval's figures for people (a table, one row per case, and a summary line) and for
machines (one JSON document). Two variants are shown side by side, with what differs."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

from stratagem.evals.runner import CaseResult, Summary, VariantResult

# The figures compared between two variants, per case: (name, how it reads, higher is better).
COMPARED = (
    ("valid", "valid", True),
    ("node_f1", "node F1", True),
    ("edge_f1", "edge F1", True),
    ("checks_passed", "checks passed", True),
    ("repairs", "repairs", False),
)


def score(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def checks(case: CaseResult) -> str:
    return f"{case.checks_passed}/{len(case.checks)}" if case.checks else "—"


def note(case: CaseResult) -> str:
    """Why a case fell short, in a few words: the failed call, the first problem, or the failed checks."""
    if case.error:
        return f"model call failed: {case.error}"
    if not case.valid:
        more = f" (+{len(case.problems) - 1} more)" if len(case.problems) > 1 else ""
        return (case.problems[0] if case.problems else "no valid plan") + more
    return "; ".join(f"{c.check}: {c.why}" for c in case.checks if not c.passed)


def summary_line(summary: Summary) -> str:
    parts = [
        f"valid plans {summary.valid}/{summary.cases} ({summary.valid_rate:.0%})",
        f"repairs {summary.repairs}",
        f"node F1 {score(summary.node_f1)}",
        f"edge F1 {score(summary.edge_f1)}",
        f"checks {summary.checks_passed}/{summary.checks_total}",
        f"calls {summary.calls}",
        f"tokens {summary.input_tokens:,} in / {summary.output_tokens:,} out",
        f"{summary.seconds:.1f} s",
    ]
    return " · ".join(parts)


def table(result: VariantResult, title: str) -> Table:
    """One row per case: whether its plan was valid, what it took, how it scored."""
    grid = Table(title=f"{title} · {result.label}", title_justify="left")
    for header in ("case", "valid", "calls", "repairs", "tokens in/out", "s"):
        grid.add_column(header, justify="left" if header == "case" else "right", no_wrap=True)
    for header in ("node F1", "edge F1", "checks"):
        grid.add_column(header, justify="right", no_wrap=True)
    grid.add_column("note", overflow="fold")
    for case in result.cases:
        grid.add_row(
            case.id,
            _valid(case.valid),
            str(case.calls),
            str(case.repairs),
            f"{case.input_tokens:,}/{case.output_tokens:,}",
            f"{case.seconds:.1f}",
            score(case.node_f1),
            score(case.edge_f1),
            checks(case),
            note(case),
        )
    return grid


def comparison(a: VariantResult, b: VariantResult, title: str) -> Table:
    """The two variants' figures per case, each cell `A / B`."""
    grid = Table(title=f"{title} · A: {a.label} · B: {b.label}", title_justify="left")
    grid.add_column("case", no_wrap=True)
    for header in ("valid", "calls", "repairs", "tokens in", "node F1", "edge F1", "checks"):
        grid.add_column(f"{header} A / B", justify="right", no_wrap=True)
    for left, right in zip(a.cases, b.cases, strict=True):
        grid.add_row(
            left.id,
            f"{_shown(left.valid)} / {_shown(right.valid)}",
            f"{left.calls} / {right.calls}",
            f"{left.repairs} / {right.repairs}",
            f"{left.input_tokens:,} / {right.input_tokens:,}",
            f"{score(left.node_f1)} / {score(right.node_f1)}",
            f"{score(left.edge_f1)} / {score(right.edge_f1)}",
            f"{checks(left)} / {checks(right)}",
        )
    return grid


def differences(a: VariantResult, b: VariantResult) -> list[dict[str, Any]]:
    """Each figure that differs between A and B, case by case: {case, figure, a, b}."""
    found = []
    for left, right in zip(a.cases, b.cases, strict=True):
        for name, _, _ in COMPARED:
            before, after = _figure(left, name), _figure(right, name)
            if before != after:
                found.append({"case": left.id, "figure": name, "a": before, "b": after})
    return found


def difference_lines(a: VariantResult, b: VariantResult) -> list[str]:
    """What changes from A to B, a line per case that differs, each figure said better or worse
    for B: `acme: node F1 1.00 → 0.86 (worse), repairs 0 → 1 (worse)`; then the totals."""
    names = {name: (words, higher) for name, words, higher in COMPARED}
    by_case: dict[str, list[str]] = {}
    for found in differences(a, b):
        words, higher = names[found["figure"]]
        before, after = found["a"], found["b"]
        verdict = "better" if (after > before) == higher else "worse"
        by_case.setdefault(found["case"], []).append(f"{words} {_shown(before)} → {_shown(after)} ({verdict})")
    lines = [f"{case}: {', '.join(changes)}" for case, changes in by_case.items()]
    first, second = a.summary, b.summary
    totals = [
        f"valid plans {second.valid - first.valid:+d}",
        f"repairs {second.repairs - first.repairs:+d}",
        f"node F1 {_delta(first.node_f1, second.node_f1)}",
        f"edge F1 {_delta(first.edge_f1, second.edge_f1)}",
        f"checks {second.checks_passed - first.checks_passed:+d}",
        f"tokens {second.input_tokens + second.output_tokens - first.input_tokens - first.output_tokens:+,d}",
    ]
    return [*lines, "B against A: " + ", ".join(totals)]


def document(title: str, results: list[VariantResult]) -> dict[str, Any]:
    """The JSON document `stratagem eval --json` writes (docs/evals.md describes it)."""
    data: dict[str, Any] = {
        "set": title,
        "variants": [
            {
                "model": result.model,
                "prompt": result.prompt,
                "summary": result.summary.model_dump(mode="json"),
                "cases": [case.model_dump(mode="json", exclude_none=False) for case in result.cases],
            }
            for result in results
        ],
    }
    if len(results) == 2:
        data["differences"] = differences(*results)
    return data


def _figure(case: CaseResult, name: str) -> Any:
    if name == "checks_passed":
        return case.checks_passed
    value = getattr(case, name)
    return round(value, 4) if isinstance(value, float) else value


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.2f}"
    return "—" if value is None else str(value)


def _delta(before: float | None, after: float | None) -> str:
    return "—" if before is None or after is None else f"{after - before:+.2f}"


def _valid(valid: bool) -> Text:
    return Text("yes", style="green") if valid else Text("no", style="red")
