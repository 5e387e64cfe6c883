"""Tools for the monthly operations report: KPIs computed from the CSV exports in `data/`.

The data folder defaults to the `data` folder next to this file; set MONTHLY_REPORT_DATA_DIR to
point the same tools at real exports. File arguments are relative to that folder and cannot
leave it. Every KPI is computed deterministically (Decimal arithmetic for money), so the
numbers in the report can be checked by hand against the CSV files.
"""

from __future__ import annotations

import csv
import os
import re
from collections import defaultdict
from datetime import date, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from statistics import median
from typing import Any

from stratagem import ToolError
from stratagem.tools import tool

DEFAULT_DATA_DIR = Path(__file__).resolve().parent / "data"
DATA_DIR_ENV = "MONTHLY_REPORT_DATA_DIR"

# Resolution targets in hours, by ticket priority.
SLA_HOURS = {"P1": 4, "P2": 24, "P3": 72}

CENT = Decimal("0.01")


def data_dir() -> Path:
    return Path(os.environ.get(DATA_DIR_ENV) or DEFAULT_DATA_DIR).resolve()


def _read_rows(file: str, required: set[str]) -> list[dict[str, str]]:
    root = data_dir()
    target = (root / file).resolve()
    if not target.is_relative_to(root):
        raise ToolError(f"'{file}' is outside the data folder", retryable=False)
    if not target.is_file():
        raise ToolError(f"no data file '{file}' in {root}", retryable=False)
    with target.open(newline="", encoding="utf-8-sig") as handle:
        reader = csv.DictReader(handle)
        missing = required - set(reader.fieldnames or [])
        if missing:
            raise ToolError(f"'{file}' lacks the column(s) {', '.join(sorted(missing))}", retryable=False)
        return list(reader)


def _month_bounds(month: str) -> tuple[date, date]:
    """'2025-10' -> (2025-10-01, 2025-11-01)."""
    if not re.fullmatch(r"\d{4}-(0[1-9]|1[0-2])", month):
        raise ToolError(f"month must look like '2025-10', not '{month}'", retryable=False)
    first = date.fromisoformat(month + "-01")
    following = (first + timedelta(days=32)).replace(day=1)
    return first, following


def _previous_month(month: str) -> str:
    first, _ = _month_bounds(month)
    return (first - timedelta(days=1)).strftime("%Y-%m")


def _euros(amount: Decimal) -> str:
    """Decimal('98765.4') -> 'EUR 98,765.40'."""
    return f"EUR {amount.quantize(CENT, ROUND_HALF_UP):,.2f}"


def _order_amounts(month: str, file: str) -> list[tuple[dict[str, str], Decimal]]:
    first, following = _month_bounds(month)
    rows = _read_rows(file, {"order_id", "order_date", "region", "customer", "quantity", "unit_price_eur"})
    picked = []
    for row in rows:
        if first <= date.fromisoformat(row["order_date"]) < following:
            picked.append((row, Decimal(row["quantity"]) * Decimal(row["unit_price_eur"])))
    return picked


@tool(side_effects=False)
def revenue_by_region(month: str, file: str = "sales.csv") -> dict[str, Any]:
    """Revenue of one month (YYYY-MM) from the sales export, in total and by region, with the change on the previous month.

    Revenue is quantity x unit price of each order dated in the month. Returns {"month",
    "month_name" (e.g. "October 2025"), "orders", "total_eur", "total_display" (e.g. "EUR 98,765.40"), "by_region": {region:
    amount_eur}, largest first, "top_region", "previous_month_total_eur", "change_pct", "change_display" (e.g. "+12.0%")}.
    """
    orders = _order_amounts(month, file)
    if not orders:
        raise ToolError(f"no orders dated in {month} in '{file}'", retryable=False)
    by_region: dict[str, Decimal] = defaultdict(Decimal)
    for row, amount in orders:
        by_region[row["region"]] += amount
    total = sum(by_region.values(), Decimal(0))
    previous = sum((amount for _, amount in _order_amounts(_previous_month(month), file)), Decimal(0))
    ranked = sorted(by_region.items(), key=lambda item: (-item[1], item[0]))
    change = ((total - previous) / previous * 100).quantize(Decimal("0.1"), ROUND_HALF_UP) if previous else None
    return {
        "month": month,
        "month_name": _month_bounds(month)[0].strftime("%B %Y"),
        "orders": len(orders),
        "total_eur": float(total.quantize(CENT)),
        "total_display": _euros(total),
        "by_region": {region: float(amount.quantize(CENT)) for region, amount in ranked},
        "top_region": ranked[0][0],
        "previous_month_total_eur": float(previous.quantize(CENT)),
        "change_pct": float(change) if change is not None else None,
        "change_display": f"{change:+.1f}%" if change is not None else "n/a",
    }


@tool(side_effects=False)
def top_customers(month: str, limit: int = 3, file: str = "sales.csv") -> dict[str, Any]:
    """The customers with the most revenue in one month (YYYY-MM), and their share of the month's revenue.

    Returns {"month", "customers": [{"customer", "revenue_eur", "share_pct", "orders"}, ...] (at
    most `limit`, largest first), "concentration_pct": the share of the listed customers together}.
    """
    if limit < 1:
        raise ToolError("limit must be at least 1", retryable=False)
    orders = _order_amounts(month, file)
    if not orders:
        raise ToolError(f"no orders dated in {month} in '{file}'", retryable=False)
    revenue: dict[str, Decimal] = defaultdict(Decimal)
    counts: dict[str, int] = defaultdict(int)
    for row, amount in orders:
        revenue[row["customer"]] += amount
        counts[row["customer"]] += 1
    total = sum(revenue.values(), Decimal(0))
    ranked = sorted(revenue.items(), key=lambda item: (-item[1], item[0]))[:limit]

    def share(amount: Decimal) -> float:
        return float((amount / total * 100).quantize(Decimal("0.1"), ROUND_HALF_UP))

    return {
        "month": month,
        "customers": [
            {
                "customer": name,
                "revenue_eur": float(amount.quantize(CENT)),
                "share_pct": share(amount),
                "orders": counts[name],
            }
            for name, amount in ranked
        ],
        "concentration_pct": share(sum((amount for _, amount in ranked), Decimal(0))),
    }


@tool(side_effects=False)
def ticket_sla(month: str, file: str = "tickets.csv") -> dict[str, Any]:
    """Support SLA for the tickets opened in one month (YYYY-MM): resolution-time breaches by priority.

    Targets: P1 4 hours, P2 24 hours, P3 72 hours from opening to resolution. A ticket still open
    at the end of the month is a breach once it is older than its target. Returns {"month",
    "tickets", "breached", "breach_rate_pct", "open_at_month_end", "by_priority": {priority:
    {"tickets", "breached", "target_hours", "median_resolution_hours"}}, "breached_ids"}.
    """
    first, following = _month_bounds(month)
    month_end = datetime.combine(following, datetime.min.time())
    rows = _read_rows(file, {"ticket_id", "opened_at", "resolved_at", "priority"})
    stats: dict[str, dict[str, Any]] = {p: {"tickets": 0, "breached": 0, "hours": []} for p in SLA_HOURS}
    breached_ids, open_count, total = [], 0, 0
    for row in rows:
        opened = datetime.fromisoformat(row["opened_at"])
        if not first <= opened.date() < following:
            continue
        priority = row["priority"]
        if priority not in SLA_HOURS:
            raise ToolError(f"ticket {row['ticket_id']} has unknown priority '{priority}'", retryable=False)
        total += 1
        bucket = stats[priority]
        bucket["tickets"] += 1
        if row["resolved_at"]:
            hours = (datetime.fromisoformat(row["resolved_at"]) - opened).total_seconds() / 3600
            bucket["hours"].append(hours)
        else:
            open_count += 1
            hours = (month_end - opened).total_seconds() / 3600
        if hours > SLA_HOURS[priority]:
            bucket["breached"] += 1
            breached_ids.append(row["ticket_id"])
    if total == 0:
        raise ToolError(f"no tickets opened in {month} in '{file}'", retryable=False)
    breached = len(breached_ids)
    return {
        "month": month,
        "tickets": total,
        "breached": breached,
        "breach_rate_pct": round(breached / total * 100, 1),
        "open_at_month_end": open_count,
        "by_priority": {
            p: {
                "tickets": s["tickets"],
                "breached": s["breached"],
                "target_hours": SLA_HOURS[p],
                "median_resolution_hours": round(median(s["hours"]), 1) if s["hours"] else None,
            }
            for p, s in stats.items()
        },
        "breached_ids": breached_ids,
    }


@tool(side_effects=False)
def format_kpi_tables(revenue: dict[str, Any], customers: dict[str, Any], sla: dict[str, Any]) -> str:
    """Render the outputs of revenue_by_region, top_customers and ticket_sla as Markdown tables.

    Returns the Markdown text: a revenue table by region with the total and the change on the
    previous month, the top customers, and the SLA table by priority.
    """
    try:
        lines = ["## Revenue", "", "| Region | Revenue | Share |", "|---|---:|---:|"]
        total = Decimal(str(revenue["total_eur"]))
        for region, amount in revenue["by_region"].items():
            value = Decimal(str(amount))
            lines.append(f"| {region} | {_euros(value)} | {value / total * 100:.1f}% |")
        lines.append(f"| **Total** | **{revenue['total_display']}** | 100.0% |")
        change = revenue.get("change_pct")
        previous = _euros(Decimal(str(revenue["previous_month_total_eur"])))
        trend = (
            f"{change:+.1f}% on the previous month ({previous})"
            if change is not None
            else "no data for the previous month"
        )
        lines += ["", f"{revenue['orders']} orders; {trend}.", ""]

        lines += ["## Top customers", "", "| Customer | Revenue | Share | Orders |", "|---|---:|---:|---:|"]
        for c in customers["customers"]:
            lines.append(
                f"| {c['customer']} | {_euros(Decimal(str(c['revenue_eur'])))} | {c['share_pct']:.1f}% | {c['orders']} |"
            )
        lines += [
            "",
            f"The top {len(customers['customers'])} customers bring {customers['concentration_pct']:.1f}% of revenue.",
            "",
        ]

        lines += [
            "## Support SLA",
            "",
            "| Priority | Target | Tickets | Breached | Median resolution |",
            "|---|---:|---:|---:|---:|",
        ]
        for priority, s in sla["by_priority"].items():
            med = f"{s['median_resolution_hours']:.1f} h" if s["median_resolution_hours"] is not None else "-"
            lines.append(f"| {priority} | {s['target_hours']} h | {s['tickets']} | {s['breached']} | {med} |")
        lines.append(f"| **All** | | **{sla['tickets']}** | **{sla['breached']}** | |")
        breached = ", ".join(sla["breached_ids"]) or "none"
        lines += [
            "",
            f"Breach rate {sla['breach_rate_pct']:.1f}% ({breached}); {sla['open_at_month_end']} ticket(s) open at month end.",
        ]
    except (KeyError, TypeError, ArithmeticError) as exc:
        raise ToolError(
            f"format_kpi_tables: the KPI inputs are not what the KPI tools return ({exc!r})", retryable=False
        ) from None
    return "\n".join(lines)
