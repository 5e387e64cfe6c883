"""Tools for the benchmark suite.

Timing tools (`noop`, `noop_local`, `sleep_for`, `stamp`) do as little as possible and report
wall-clock times taken inside the tool, so the suite can tell the tool's own time from the time
around it. The business tools (vendor checks, sales figures, support tickets) return realistic,
deterministic data for the model-economics measure, whose token counts depend on what the
tools return.

A worker process loads this file with `python worker.py --tools bench/tools.py`.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

from stratagem.tools import tool

# ---------------------------------------------------------------------------- timing tools


@tool(side_effects=False)
async def noop() -> int:
    """Do nothing (a benchmark step)."""
    return 0


@tool(side_effects=False, local=True)
async def noop_local() -> int:
    """Do nothing, as a local activity (the fast path for cheap tools)."""
    return 0


@tool(side_effects=False)
async def sleep_for(label: str, seconds: float) -> dict[str, Any]:
    """Sleep for `seconds`; return the wall-clock start and end times (seconds since the epoch)."""
    start = time.time()
    await asyncio.sleep(seconds)
    return {"label": label, "start": start, "end": time.time()}


@tool(side_effects=False)
async def stamp(label: str) -> dict[str, Any]:
    """Return the wall-clock time at which the step started."""
    return {"label": label, "start": time.time()}


# ---------------------------------------------------------------------------- business tools


@tool(side_effects=False)
def lookup_company(name: str, country: str) -> dict[str, Any]:
    """Look a company up in the national business register.

    Returns its legal name, legal form, registration number, registered address, directors,
    founding date, status (active, dissolved, in liquidation) and industry codes.
    """
    return {
        "legal_name": name,
        "legal_form": "Gesellschaft mit beschränkter Haftung (GmbH)",
        "register": "Amtsgericht Hamburg",
        "registration_number": "HRB 148213",
        "registered_address": {
            "street": "Am Sandtorkai 58",
            "postcode": "20457",
            "city": "Hamburg",
            "country": country,
        },
        "directors": [
            {"name": "Katrin Vollmer", "role": "Geschäftsführerin", "appointed": "2016-03-01"},
            {"name": "Henrik Albers", "role": "Geschäftsführer", "appointed": "2021-09-15"},
        ],
        "founded": "2011-06-22",
        "status": "active",
        "share_capital_eur": 250000,
        "industry_codes": [
            {"scheme": "NACE Rev. 2", "code": "52.29", "label": "Other transportation support activities"}
        ],
        "last_filing": {"type": "annual accounts", "period": "2024", "filed": "2025-06-30"},
        "source": "Handelsregister extract, retrieved for due diligence",
    }


@tool(side_effects=False)
def screen_sanctions(name: str, country: str) -> dict[str, Any]:
    """Screen a company name against the EU, UN, UK and US (OFAC) sanctions lists.

    Returns the lists checked, possible matches with a score, and whether the name is clear.
    """
    return {
        "query": {"name": name, "country": country},
        "lists_checked": [
            "EU Consolidated Financial Sanctions",
            "UN Security Council Consolidated",
            "UK OFSI",
            "US OFAC SDN",
        ],
        "matches": [
            {
                "list": "US OFAC SDN",
                "entry": "NORDWIND SHIPPING LTD",
                "score": 0.41,
                "country": "CY",
                "reason": "partial name overlap",
            }
        ],
        "threshold": 0.85,
        "clear": True,
        "note": "One weak partial match below the threshold (different entity and country).",
    }


@tool(side_effects=False)
def validate_vat(vat_id: str) -> dict[str, Any]:
    """Validate an EU VAT identification number with the VIES service; returns the registered name and address."""
    return {
        "vat_id": vat_id,
        "valid": True,
        "country_code": vat_id[:2],
        "registered_name": "Nordwind Logistics GmbH",
        "registered_address": "Am Sandtorkai 58, 20457 Hamburg",
        "checked_at": "2025-11-03T09:14:22Z",
        "consultation_number": "WAPIAAAAZ1x2Y3k4",
    }


@tool(side_effects=False)
def verify_iban(iban: str, account_holder: str) -> dict[str, Any]:
    """Check an IBAN's format and checksum, find its bank, and confirm the account holder's name (verification of payee)."""
    return {
        "iban": iban,
        "valid_format": True,
        "checksum_ok": True,
        "bank": {"name": "Commerzbank AG", "bic": "COBADEFFXXX", "city": "Frankfurt am Main"},
        "holder_check": {
            "submitted": account_holder,
            "result": "match",
            "registered_holder": "Nordwind Logistics GmbH",
        },
        "sepa_reachable": True,
    }


_PRODUCTS = [
    ("SKU-1001", "Pallet wrap film 500mm", 18.90),
    ("SKU-1002", "Euro pallet, new", 14.50),
    ("SKU-1003", "Corrugated box 60x40x40", 1.85),
    ("SKU-1004", "Strapping band PET 16mm", 42.00),
    ("SKU-1005", "Edge protector 1200mm", 0.95),
    ("SKU-1006", "Label printer ribbon", 7.40),
    ("SKU-1007", "Hand pallet truck", 389.00),
    ("SKU-1008", "Stretch film dispenser", 64.00),
]
_CUSTOMERS = ["Alster Foods", "Becker Bau", "Elbe Pharma", "Hansa Retail", "Kiel Marine", "Lübeck Print", "Nord Agrar"]


@tool(side_effects=False)
def fetch_sales(month: str) -> list[dict[str, Any]]:
    """Fetch every sales order line of a month (YYYY-MM) from the ERP: order id, date, customer, SKU, product, quantity, unit price and net amount."""
    rng = random.Random(f"sales-{month}")
    lines = []
    for n in range(36):
        sku, product, price = rng.choice(_PRODUCTS)
        qty = rng.randint(2, 120)
        lines.append(
            {
                "order": f"SO-{month.replace('-', '')}-{n + 1:03d}",
                "date": f"{month}-{rng.randint(1, 28):02d}",
                "customer": rng.choice(_CUSTOMERS),
                "sku": sku,
                "product": product,
                "qty": qty,
                "unit_price": price,
                "net": round(qty * price, 2),
            }
        )
    return lines


@tool(side_effects=False)
def fetch_costs(month: str) -> list[dict[str, Any]]:
    """Fetch the cost ledger of a month (YYYY-MM): cost of goods per SKU, freight, warehouse and staff costs."""
    rng = random.Random(f"costs-{month}")
    rows = [
        {"account": "COGS", "sku": sku, "amount": round(price * rng.uniform(20, 60) * 0.62, 2)}
        for sku, _, price in _PRODUCTS
    ]
    rows += [
        {"account": "Freight out", "sku": None, "amount": round(rng.uniform(3000, 5000), 2)},
        {"account": "Warehouse rent", "sku": None, "amount": 12500.00},
        {"account": "Warehouse staff", "sku": None, "amount": round(rng.uniform(21000, 23000), 2)},
        {"account": "Packaging consumables", "sku": None, "amount": round(rng.uniform(800, 1200), 2)},
    ]
    return rows


@tool(side_effects=False)
def compute_kpis(sales: list[dict[str, Any]], costs: list[dict[str, Any]]) -> dict[str, Any]:
    """Compute revenue, cost of goods, gross margin, operating result, order count, average order value and the top products and customers from sales lines and cost rows."""
    revenue = round(sum(line["net"] for line in sales), 2)
    cogs = round(sum(row["amount"] for row in costs if row["account"] == "COGS"), 2)
    opex = round(sum(row["amount"] for row in costs if row["account"] != "COGS"), 2)
    by_product: dict[str, float] = {}
    by_customer: dict[str, float] = {}
    for line in sales:
        by_product[line["product"]] = by_product.get(line["product"], 0) + line["net"]
        by_customer[line["customer"]] = by_customer.get(line["customer"], 0) + line["net"]
    orders = len({line["order"] for line in sales})
    return {
        "revenue": revenue,
        "cogs": cogs,
        "gross_margin": round(revenue - cogs, 2),
        "gross_margin_pct": round(100 * (revenue - cogs) / revenue, 1) if revenue else None,
        "operating_costs": opex,
        "operating_result": round(revenue - cogs - opex, 2),
        "orders": orders,
        "average_order_value": round(revenue / orders, 2) if orders else None,
        "top_products": [
            {"product": p, "net": round(v, 2)} for p, v in sorted(by_product.items(), key=lambda kv: -kv[1])[:3]
        ],
        "top_customers": [
            {"customer": c, "net": round(v, 2)} for c, v in sorted(by_customer.items(), key=lambda kv: -kv[1])[:3]
        ],
    }


_TICKETS = [
    (
        "T-4811",
        "Charged twice for October invoice",
        "Hi, our card was charged twice for invoice INV-2025-10-3381 (EUR 1,240.00 each). Please refund the duplicate as soon as possible, our finance team is closing the month on Friday.",
    ),
    (
        "T-4812",
        "Request for VAT number change",
        "We moved our company seat to Austria. Please update our VAT number on future invoices to ATU73829104 and confirm which invoice will be the first with the new number.",
    ),
    (
        "T-4813",
        "Cannot download invoices",
        "The invoice download in the customer portal shows 'error 500' for all invoices since yesterday. We need the September and October PDFs for an audit next week.",
    ),
    (
        "T-4814",
        "Cancel subscription at end of term",
        "Please cancel our Professional plan at the end of the current term (2025-12-31). We do not want it to renew. Confirm in writing please.",
    ),
    (
        "T-4815",
        "Payment failed - card expired",
        "Got an email that the payment failed. We updated the card in the portal. Can you retry the charge so our account is not suspended?",
    ),
    (
        "T-4816",
        "Question about volume discount",
        "We are planning to add 40 seats in January. What volume discount would apply, and can it be applied to the existing 60 seats too?",
    ),
]


@tool(side_effects=False)
def list_tickets(queue: str, status: str = "open") -> list[dict[str, Any]]:
    """List the support tickets of a queue with a given status: id, subject, customer, created time and the full message text."""
    return [
        {
            "id": tid,
            "queue": queue,
            "status": status,
            "subject": subject,
            "customer": f"customer-{i + 101}",
            "created": f"2025-11-0{1 + i % 3}T0{8 + i}:12:00Z",
            "body": body,
        }
        for i, (tid, subject, body) in enumerate(_TICKETS)
    ]


@tool
def route_ticket(ticket_id: str, team: str, priority: str, note: str = "") -> dict[str, Any]:
    """Assign a ticket to a team (billing-ops, finance, portal-engineering, account-management) with a priority (P1 urgent to P4 low) and an optional internal note."""
    return {"ticket_id": ticket_id, "team": team, "priority": priority, "routed": True}


@tool
def post_message(channel: str, text: str) -> dict[str, Any]:
    """Post a message to a team chat channel; returns the message id."""
    return {"channel": channel, "message_id": f"msg-{len(channel) * 100_000 + len(text)}", "posted": True}


ECONOMICS_TOOLS = [
    lookup_company,
    screen_sanctions,
    validate_vat,
    verify_iban,
    fetch_sales,
    fetch_costs,
    compute_kpis,
    list_tickets,
    route_ticket,
    post_message,
]
