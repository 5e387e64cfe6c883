"""Tools for the order shipping example: an order book, warehouse reservations and two freight carriers.

Everything is offline and deterministic. The orders and the carriers' tariffs are small tables
in this file; the "systems of record" (the warehouse's reservations, the booked shipments) are
files in the run's workspace. Tools with side effects use the step's idempotency key, so a
retried step never reserves stock or books a truck twice.

A carrier that does not serve the destination refuses to quote, and that fails the step: a
ToolError that retrying cannot fix. The planner then revises the plan (see README.md).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import threading
from datetime import date, timedelta
from typing import Any

from stratagem import ToolError
from stratagem.tools import ToolContext, tool

# Tools run in worker threads; this keeps two steps from writing the same file at once.
_lock = threading.Lock()

ORDERS: dict[str, dict[str, Any]] = {
    "SO-1042": {
        "order_id": "SO-1042",
        "customer": "Bergblick Hotels GmbH",
        "contact_email": "einkauf@bergblick-hotels.example",
        "street": "Annenstraße 12",
        "postcode": "8020",
        "city": "Graz",
        "country": "AT",
        "items": [
            {"sku": "LIN-KS-200", "description": "King-size linen set", "quantity": 120},
            {"sku": "TWL-BATH-70", "description": "Bath towel 70x140", "quantity": 480},
        ],
        "pallets": 3,
        "weight_kg": 690,
        "ready_on": "2025-11-10",
        "deliver_by": "2025-11-14",
    },
}

# Tariffs in EUR: a price per pallet and per kilogram, plus a surcharge outside Germany.
CARRIERS: dict[str, dict[str, Any]] = {
    "nordbahn": {
        "name": "Nordbahn Cargo",
        "countries": ["DE"],
        "per_pallet": 95.0,
        "per_kg": 0.12,
        "abroad": 0.0,
        "days": 2,
    },
    "alpentrans": {
        "name": "Alpentrans Logistik",
        "countries": ["AT", "CH", "DE", "IT", "SI"],
        "per_pallet": 110.0,
        "per_kg": 0.15,
        "abroad": 85.0,
        "days": 3,
    },
}

RESERVATIONS = "warehouse/reservations.csv"
RESERVATION_COLUMNS = ["reservation_id", "order_id", "pallets", "location", "idempotency_key"]


def _digest(*parts: str) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:8].upper()


@tool(side_effects=False)
def load_order(order_id: str) -> dict[str, Any]:
    """Look up a sales order: customer, delivery address, pallets, weight and dates.

    Returns {"order_id", "customer", "contact_email", "street", "postcode", "city", "country" (ISO
    alpha-2), "items": [{"sku", "description", "quantity"}], "items_text", "pallets", "weight_kg",
    "ready_on", "deliver_by"}. An unknown order fails the step.
    """
    order = ORDERS.get(order_id.strip().upper())
    if order is None:
        raise ToolError(f"load_order: there is no order '{order_id}' (known: {', '.join(ORDERS)})", retryable=False)
    items_text = ", ".join(f"{i['quantity']} x {i['description']} ({i['sku']})" for i in order["items"])
    return {**order, "items_text": items_text}


@tool
def reserve_stock(order_id: str, pallets: int, *, ctx: ToolContext) -> dict[str, Any]:
    """Reserve an order's pallets in the Hamburg warehouse (warehouse/reservations.csv).

    Exactly once per step: a retried step finds its row (by idempotency key) and returns it with
    "repeated": true. Returns {"reservation_id", "order_id", "pallets", "location", "repeated"}.
    """
    if order_id not in ORDERS:
        raise ToolError(f"reserve_stock: there is no order '{order_id}'", retryable=False)
    if not 0 < pallets <= 33:  # a full truck
        raise ToolError(f"reserve_stock: {pallets} pallets is not between 1 and 33", retryable=False)
    target = ctx.workspace / RESERVATIONS
    with _lock:
        target.parent.mkdir(parents=True, exist_ok=True)
        existing = target.read_text(encoding="utf-8") if target.exists() else ""
        for row in csv.DictReader(io.StringIO(existing)):
            if row["idempotency_key"] == ctx.idempotency_key:
                return {
                    **{k: row[k] for k in ("reservation_id", "order_id", "location")},
                    "pallets": int(row["pallets"]),
                    "repeated": True,
                }
        reservation = {
            "reservation_id": "RES-" + _digest(ctx.idempotency_key),
            "order_id": order_id,
            "pallets": pallets,
            "location": "Hamburg, dock 4",
        }
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        if not existing:
            writer.writerow(RESERVATION_COLUMNS)
        writer.writerow([*reservation.values(), ctx.idempotency_key])
        with target.open("a", encoding="utf-8") as handle:
            handle.write(out.getvalue())
    return {**reservation, "repeated": False}


def _price(carrier: dict[str, Any], country: str, pallets: int, weight_kg: float) -> float:
    surcharge = carrier["abroad"] if country != "DE" else 0.0
    return round(pallets * carrier["per_pallet"] + weight_kg * carrier["per_kg"] + surcharge, 2)


def _carrier(name: str, tool_name: str) -> dict[str, Any]:
    carrier = CARRIERS.get(name.strip().lower())
    if carrier is None:
        raise ToolError(f"{tool_name}: unknown carrier '{name}' (known: {', '.join(CARRIERS)})", retryable=False)
    return carrier


@tool(side_effects=False)
def quote_freight(carrier: str, country: str, postcode: str, pallets: int, weight_kg: float) -> dict[str, Any]:
    """Ask a carrier ("nordbahn" or "alpentrans") for a price to take pallets to an address.

    A carrier that does not deliver to `country` (ISO alpha-2) refuses, and the step fails:
    Nordbahn Cargo serves Germany only; Alpentrans Logistik serves AT, CH, DE, IT and SI.
    Returns {"quote_id", "carrier", "carrier_name", "price_eur", "transit_days"}.
    """
    details = _carrier(carrier, "quote_freight")
    country = country.strip().upper()
    if country not in details["countries"]:
        raise ToolError(
            f"quote_freight: {details['name']} does not deliver to {country} (it serves {', '.join(details['countries'])}); "
            "ask another carrier",
            retryable=False,
        )
    key = carrier.strip().lower()
    return {
        "quote_id": f"Q-{key[:3].upper()}-{_digest(key, country, postcode, str(pallets), str(weight_kg))}",
        "carrier": key,
        "carrier_name": details["name"],
        "price_eur": _price(details, country, pallets, weight_kg),
        "transit_days": details["days"],
    }


def _working_days_after(start: date, days: int) -> date:
    day = start
    while days:
        day += timedelta(days=1)
        if day.weekday() < 5:
            days -= 1
    return day


@tool
def book_shipment(order_id: str, quote_id: str, reservation_id: str, *, ctx: ToolContext) -> dict[str, Any]:
    """Book the truck a quote offers for an order's reserved pallets (shipments/<order_id>.json).

    An order ships once: a retried step, or a second booking of the same order, returns the
    booking already made with "repeated": true. Returns {"shipment_id", "tracking_number",
    "carrier", "carrier_name", "price_eur", "pickup_on", "delivery_on", "repeated"}.
    """
    order = ORDERS.get(order_id)
    if order is None:
        raise ToolError(f"book_shipment: there is no order '{order_id}'", retryable=False)
    prefix = quote_id.split("-")[1].lower() if quote_id.count("-") == 2 else ""
    key = next((name for name in CARRIERS if name[:3] == prefix), None)
    if key is None:
        raise ToolError(f"book_shipment: '{quote_id}' is not a quote of a known carrier", retryable=False)
    carrier = CARRIERS[key]
    target = ctx.workspace / "shipments" / f"{order_id}.json"
    with _lock:
        if target.exists():
            return {**_shown(json.loads(target.read_text(encoding="utf-8"))), "repeated": True}
        pickup = date.fromisoformat(order["ready_on"])
        booking = {
            "shipment_id": f"SH-{_digest(order_id, key)}",
            "tracking_number": f"{key[:3].upper()}{_digest(order_id, key, 'tracking')}",
            "order_id": order_id,
            "carrier": key,
            "carrier_name": carrier["name"],
            "quote_id": quote_id,
            "reservation_id": reservation_id,
            "price_eur": _price(carrier, order["country"], order["pallets"], order["weight_kg"]),
            "pickup_on": pickup.isoformat(),
            "delivery_on": _working_days_after(pickup, carrier["days"]).isoformat(),
            "idempotency_key": ctx.idempotency_key,
        }
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(booking, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return {**_shown(booking), "repeated": False}


def _shown(booking: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in booking.items() if k not in ("idempotency_key", "order_id", "quote_id", "reservation_id")}
