"""The plan drawn as a graph: an SVG the server writes, steps as boxes coloured by status and an
arrow from each step to every step that waits for it, laid out in the columns of
`views.graph_columns` (a step sits right of everything it waits for).

No script and nothing fetched: the page's CSP allows neither, and the drawing must read the same
in a screen reader (a title and a description naming every edge, a text label in every box).
Every text in it (step ids, titles a planner wrote) is escaped here: the SVG is markup the
template inserts as is.
"""

from __future__ import annotations

from typing import Any

from markupsafe import Markup, escape

from stratagem.domain.plan import Plan
from stratagem.domain.visible_text import written_out

BOX_W, BOX_H = 190, 58
COL_GAP, ROW_GAP, PAD = 64, 16, 12
TITLE_CHARS = 26


def _text(value: Any) -> Markup:
    """Text for the SVG: reordering characters written out (as on the page), then escaped."""
    return escape(written_out(str(value)))


def _cut(text: str, limit: int = TITLE_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def plan_svg(plan: Plan, columns: list[list[dict[str, Any]]], run_id: str) -> Markup:
    """The drawing of `plan`, whose steps `columns` (graph_columns) places and gives a status."""
    where: dict[str, tuple[int, int]] = {}
    status: dict[str, str] = {}
    for c, column in enumerate(columns):
        for r, cell in enumerate(column):
            where[cell["step"].id] = (PAD + c * (BOX_W + COL_GAP), PAD + r * (BOX_H + ROW_GAP))
            status[cell["step"].id] = cell["status"]
    edges = [(dep, step.id) for step in plan.steps for dep in step.depends_on if dep in where and step.id in where]
    width = PAD * 2 + max(len(columns), 1) * (BOX_W + COL_GAP) - COL_GAP
    height = PAD * 2 + max((len(column) for column in columns), default=1) * (BOX_H + ROW_GAP) - ROW_GAP
    said = "; ".join(f"{a} before {b}" for a, b in edges) or "no step waits for another"
    desc = f"{len(plan.steps)} steps and {len(edges)} dependencies: {said}."
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="plan-graph" role="img" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" aria-labelledby="graph-title graph-desc">',
        f'<title id="graph-title">Plan of run {_text(run_id)}, revision {plan.revision}</title>',
        f'<desc id="graph-desc">{_text(desc)}</desc>',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
        'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" class="arrow-head"/></marker></defs>',
    ]
    for a, b in edges:
        (ax, ay), (bx, by) = where[a], where[b]
        x1, y1, x2, y2 = ax + BOX_W, ay + BOX_H // 2, bx, by + BOX_H // 2
        bend = max((x2 - x1) // 2, 24)
        parts.append(
            f'<path class="edge" data-from="{_text(a)}" data-to="{_text(b)}" marker-end="url(#arrow)" '
            f'd="M {x1} {y1} C {x1 + bend} {y1}, {x2 - bend} {y2}, {x2} {y2}"><title>{_text(a)} before {_text(b)}</title></path>'
        )
    for step in plan.steps:
        if step.id not in where:
            continue
        x, y = where[step.id]
        state = status[step.id]
        parts.append(
            f'<a href="#step-{_text(step.id)}" class="node status-{_text(state)}" data-step="{_text(step.id)}">'
            f"<title>{_text(step.id)}: {_text(step.title)} ({_text(state)})</title>"
            f'<rect x="{x}" y="{y}" width="{BOX_W}" height="{BOX_H}" rx="6"/>'
            f'<text x="{x + 10}" y="{y + 18}" class="node-id">{_text(_cut(step.id, 22))}</text>'
            f'<text x="{x + 10}" y="{y + 35}" class="node-title">{_text(_cut(step.title))}</text>'
            f'<text x="{x + 10}" y="{y + 51}" class="node-status">{_text(state)}</text></a>'
        )
    parts.append("</svg>")
    return Markup("".join(parts))


__all__ = ["plan_svg"]
