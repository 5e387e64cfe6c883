"""The three business tasks of the model_economics measure, and the decisions a competent model makes for each.

Each task has a goal, the plan a planner would write for it, the executor's turns for each `llm` step
of that plan, and the joint model's turns for the same goal: tool calls ({"calls": [...]}) or a final
answer ({"text": ...}). The tool results these decisions lead to are the real outputs of bench/tools.py.
bench/economics_model.py turns the turns into scripted answers with usage; bench/model_economics.py
runs them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from stratagem.tools import ToolRegistry

from . import tools as bench_tools


@dataclass
class Task:
    name: str
    goal: str
    plan: dict[str, Any]
    # The executor's turns for each llm step of the plan: tool calls ({"calls": [...]}) or a final answer ({"text": ...}).
    executor_turns: dict[str, list[dict[str, Any]]]
    # The joint model's turns, in order.
    joint_turns: list[dict[str, Any]]
    expected: dict[str, Any] = field(default_factory=dict)


MEMO = """# Due diligence: Nordwind Logistics GmbH

**Register.** Active GmbH, registered at Amtsgericht Hamburg under HRB 148213 since 2011, share capital EUR 250,000.
Directors Katrin Vollmer (since 2016) and Henrik Albers (since 2021). Annual accounts for 2024 were filed on time
(2025-06-30). Industry code NACE 52.29 fits a logistics supplier.

**Sanctions.** Screened against the EU, UN, UK OFSI and US OFAC SDN lists. One weak partial match (score 0.41,
threshold 0.85) against NORDWIND SHIPPING LTD in Cyprus: a different entity in a different country. Clear.

**VAT.** DE811907980 is valid in VIES; the registered name and address match the register extract.

**Bank account.** IBAN DE89 3704 0044 0532 0130 00 at Commerzbank AG (COBADEFFXXX) passes the format and checksum
tests, and the verification of payee confirms Nordwind Logistics GmbH as the account holder. SEPA reachable.

**Recommendation: approve.** All four checks are clean. Keep the sanctions screening result with the vendor file
and repeat the screening at the annual vendor review."""

COMMENTARY_TEMPLATE = """# Sales KPIs, October 2025

| KPI | Value |
|---|---|
| Revenue | EUR {revenue:,.2f} |
| Gross margin | EUR {gross_margin:,.2f} ({gross_margin_pct}%) |
| Operating result | EUR {operating_result:,.2f} |
| Orders | {orders} (average EUR {average_order_value:,.2f}) |

**Commentary.** October revenue came from {orders} orders, led by {top1} and {top2}. The gross margin of
{gross_margin_pct}% is healthy, but fixed warehouse costs (rent and staff) absorb most of it, so the operating
result is sensitive to volume: a weaker month would turn it negative. {cust1} and {cust2} were the largest
customers; together they account for a large share of revenue, a concentration risk worth watching.

**Recommendation.** Push the high-margin consumables (wrap film, strapping) with the top customers in November,
and review the freight-out contract, the largest variable cost after goods."""

TRIAGE = [
    {
        "ticket_id": "T-4811",
        "team": "billing-ops",
        "priority": "P1",
        "reason": "duplicate charge, refund needed before month close",
    },
    {"ticket_id": "T-4812", "team": "finance", "priority": "P3", "reason": "VAT number change for future invoices"},
    {
        "ticket_id": "T-4813",
        "team": "portal-engineering",
        "priority": "P2",
        "reason": "invoice download fails with error 500 for all invoices",
    },
    {
        "ticket_id": "T-4814",
        "team": "account-management",
        "priority": "P3",
        "reason": "cancellation at end of term, written confirmation",
    },
    {
        "ticket_id": "T-4815",
        "team": "billing-ops",
        "priority": "P2",
        "reason": "retry a failed payment to avoid suspension",
    },
    {
        "ticket_id": "T-4816",
        "team": "account-management",
        "priority": "P4",
        "reason": "volume discount question for 40 more seats",
    },
]
TRIAGE_SUMMARY = "Billing queue triaged: 6 tickets routed. P1: T-4811 (duplicate charge) to billing-ops. P2: T-4813 (portal invoice download error) to portal-engineering, T-4815 (failed payment retry) to billing-ops. P3: T-4812 (VAT change) to finance, T-4814 (cancellation) to account-management. P4: T-4816 (volume discount) to account-management."


def _route_calls() -> list[dict[str, Any]]:
    return [
        {
            "tool": "route_ticket",
            "args": {"ticket_id": t["ticket_id"], "team": t["team"], "priority": t["priority"], "note": t["reason"]},
        }
        for t in TRIAGE
    ]


def tasks(registry: ToolRegistry) -> list[Task]:
    vendor = {
        "name": "Nordwind Logistics GmbH",
        "country": "DE",
        "vat": "DE811907980",
        "iban": "DE89370400440532013000",
    }
    memo_path = "vendors/nordwind-logistics/due-diligence.md"
    kpis = bench_tools.compute_kpis(bench_tools.fetch_sales("2025-10"), bench_tools.fetch_costs("2025-10"))
    commentary = COMMENTARY_TEMPLATE.format(
        **kpis,
        top1=kpis["top_products"][0]["product"],
        top2=kpis["top_products"][1]["product"],
        cust1=kpis["top_customers"][0]["customer"],
        cust2=kpis["top_customers"][1]["customer"],
    )
    report_path = "reports/kpi-2025-10.md"
    return [
        Task(
            name="vendor due diligence",
            goal=(
                f"Run due diligence on the new vendor {vendor['name']} (Germany, VAT {vendor['vat']}, IBAN {vendor['iban']}) "
                "before onboarding: look the company up in the business register, screen it against the sanctions lists, "
                "validate the VAT number and verify the bank account holder, then write a risk memo for procurement to "
                f"{memo_path}."
            ),
            plan={
                "goal": f"Due diligence on {vendor['name']} before onboarding",
                "reason": "The four checks are independent and run in parallel; the memo needs all of them; saving needs the memo.",
                "steps": [
                    {
                        "id": "register",
                        "title": "Look the company up in the business register",
                        "kind": "tool",
                        "tool": "lookup_company",
                        "args": {"name": vendor["name"], "country": "DE"},
                    },
                    {
                        "id": "sanctions",
                        "title": "Screen against sanctions lists",
                        "kind": "tool",
                        "tool": "screen_sanctions",
                        "args": {"name": vendor["name"], "country": "DE"},
                    },
                    {
                        "id": "vat",
                        "title": "Validate the VAT number",
                        "kind": "tool",
                        "tool": "validate_vat",
                        "args": {"vat_id": vendor["vat"]},
                    },
                    {
                        "id": "bank",
                        "title": "Verify the bank account holder",
                        "kind": "tool",
                        "tool": "verify_iban",
                        "args": {"iban": vendor["iban"], "account_holder": vendor["name"]},
                    },
                    {
                        "id": "memo",
                        "title": "Write the due-diligence memo",
                        "kind": "llm",
                        "depends_on": ["register", "sanctions", "vat", "bank"],
                        "instructions": "Write a due-diligence memo for procurement in Markdown: one short paragraph per check "
                        "(register, sanctions, VAT, bank account) stating what was found, then a recommendation "
                        "(approve, approve with conditions, or reject) with its reasons.",
                        "success_criteria": ["Covers all four checks", "Ends with a clear recommendation"],
                    },
                    {
                        "id": "save",
                        "title": "Save the memo",
                        "kind": "tool",
                        "tool": "write_file",
                        "depends_on": ["memo"],
                        "args": {"path": memo_path, "content": "${memo}"},
                    },
                ],
            },
            executor_turns={"memo": [{"text": MEMO}]},
            joint_turns=[
                {
                    "calls": [
                        {"tool": "lookup_company", "args": {"name": vendor["name"], "country": "DE"}},
                        {"tool": "screen_sanctions", "args": {"name": vendor["name"], "country": "DE"}},
                        {"tool": "validate_vat", "args": {"vat_id": vendor["vat"]}},
                        {"tool": "verify_iban", "args": {"iban": vendor["iban"], "account_holder": vendor["name"]}},
                    ]
                },
                {"calls": [{"tool": "write_file", "args": {"path": memo_path, "content": MEMO}}]},
                {
                    "text": f"Due diligence on {vendor['name']} is complete: register, sanctions, VAT and bank checks are clean. "
                    f"Recommendation: approve. The memo is saved to {memo_path}."
                },
            ],
        ),
        Task(
            name="monthly KPI report",
            goal=(
                "Prepare the October 2025 sales KPI report: fetch the sales order lines and the cost ledger for 2025-10, "
                "compute the KPIs, write a short management commentary on the results, and save the report as "
                f"{report_path}."
            ),
            plan={
                "goal": "October 2025 sales KPI report",
                "reason": "Sales and costs are fetched in parallel; the KPIs are computed by a tool from both; a model writes the commentary; the report is saved.",
                "steps": [
                    {
                        "id": "sales",
                        "title": "Fetch October sales lines",
                        "kind": "tool",
                        "tool": "fetch_sales",
                        "args": {"month": "2025-10"},
                    },
                    {
                        "id": "costs",
                        "title": "Fetch October cost ledger",
                        "kind": "tool",
                        "tool": "fetch_costs",
                        "args": {"month": "2025-10"},
                    },
                    {
                        "id": "kpis",
                        "title": "Compute the KPIs",
                        "kind": "tool",
                        "tool": "compute_kpis",
                        "depends_on": ["sales", "costs"],
                        "args": {"sales": "${sales}", "costs": "${costs}"},
                    },
                    {
                        "id": "commentary",
                        "title": "Write the KPI report with commentary",
                        "kind": "llm",
                        "depends_on": ["kpis"],
                        "instructions": "Write October's KPI report in Markdown: a table of the main KPIs, then a management commentary "
                        "of 150 to 250 words on revenue, margin, operating result, top products and customers, and "
                        "one recommendation.",
                        "success_criteria": ["Numbers match the KPIs", "One concrete recommendation"],
                    },
                    {
                        "id": "save",
                        "title": "Save the report",
                        "kind": "tool",
                        "tool": "write_file",
                        "depends_on": ["commentary"],
                        "args": {"path": report_path, "content": "${commentary}"},
                    },
                ],
            },
            executor_turns={"commentary": [{"text": commentary}]},
            joint_turns=[
                {
                    "calls": [
                        {"tool": "fetch_sales", "args": {"month": "2025-10"}},
                        {"tool": "fetch_costs", "args": {"month": "2025-10"}},
                    ]
                },
                # The joint model must hand the data to compute_kpis itself: its output is the data again.
                {
                    "calls": [
                        {
                            "tool": "compute_kpis",
                            "args": {
                                "sales": bench_tools.fetch_sales("2025-10"),
                                "costs": bench_tools.fetch_costs("2025-10"),
                            },
                        }
                    ]
                },
                {"calls": [{"tool": "write_file", "args": {"path": report_path, "content": commentary}}]},
                {
                    "text": f"The October 2025 KPI report is saved to {report_path}: revenue EUR {kpis['revenue']:,.2f}, "
                    f"gross margin {kpis['gross_margin_pct']}%, operating result EUR {kpis['operating_result']:,.2f}."
                },
            ],
        ),
        Task(
            name="support ticket triage",
            goal=(
                "Triage the open tickets in the billing support queue: read them, decide for each the team (billing-ops, "
                "finance, portal-engineering, account-management) and the priority (P1 to P4), route each ticket, and post "
                "a summary of the routing to the #billing-support channel."
            ),
            plan={
                "goal": "Triage the open billing tickets",
                "reason": "Routing needs judgement per ticket, so one executor step reads the tickets and routes them with route_ticket; the summary is posted after.",
                "steps": [
                    {
                        "id": "tickets",
                        "title": "List the open billing tickets",
                        "kind": "tool",
                        "tool": "list_tickets",
                        "args": {"queue": "billing", "status": "open"},
                    },
                    {
                        "id": "triage",
                        "title": "Decide team and priority, and route each ticket",
                        "kind": "llm",
                        "depends_on": ["tickets"],
                        "tools": ["route_ticket"],
                        "output_format": "json",
                        "instructions": "For each ticket in the input, decide the team (billing-ops, finance, portal-engineering, "
                        "account-management) and the priority (P1 urgent to P4 low), and route it with route_ticket "
                        "with a one-line note. Then answer with a JSON list of {ticket_id, team, priority, reason}.",
                        "success_criteria": ["Every ticket routed exactly once"],
                    },
                    {
                        "id": "announce",
                        "title": "Post the routing summary",
                        "kind": "tool",
                        "tool": "post_message",
                        "depends_on": ["triage"],
                        "args": {"channel": "#billing-support", "text": "Billing queue triaged: ${triage}"},
                    },
                ],
            },
            executor_turns={"triage": [{"calls": _route_calls()}, {"text": json.dumps(TRIAGE)}]},
            joint_turns=[
                {"calls": [{"tool": "list_tickets", "args": {"queue": "billing", "status": "open"}}]},
                {"calls": _route_calls()},
                {"calls": [{"tool": "post_message", "args": {"channel": "#billing-support", "text": TRIAGE_SUMMARY}}]},
                {"text": "All 6 open billing tickets are routed and the summary is posted to #billing-support."},
            ],
        ),
    ]
