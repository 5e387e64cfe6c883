"""Tools for the employee onboarding example: a directory, application access, and equipment orders.

The "systems" are files in the run's workspace, so the example runs offline and its effects can
be inspected: directory/users.json, provisioning/<system>.jsonl and procurement/orders.csv.
Every tool with side effects records the step's idempotency key and returns what it did the
first time when a step is retried, so a retry never creates a second account or order.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
import threading
import unicodedata
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

from stratagem import ToolError
from stratagem.tools import ToolContext, tool

EMAIL_DOMAIN = "northwind-logistics.example"
DEPARTMENTS = {"Engineering", "Finance", "Operations", "Sales", "Support"}

# The groups each application offers; asking for another one is an error a retry cannot fix.
SYSTEM_GROUPS = {
    "slack": {"all-company", "engineering", "eng-platform", "finance", "ops", "sales", "support", "new-joiners"},
    "github": {"northwind/developers", "northwind/platform", "northwind/route-planner", "northwind/read-only"},
    "jira": {"jira-software-users", "PLAT", "ROUTE", "OPS", "FIN"},
}

# Equipment catalogue: price in EUR and lead time in working days.
EQUIPMENT = {
    "laptop-14-standard": (Decimal("1390.00"), 3),
    "laptop-16-developer": (Decimal("2480.00"), 5),
    "monitor-27-4k": (Decimal("420.00"), 2),
    "dock-usb-c": (Decimal("189.00"), 2),
    "headset-anc": (Decimal("229.00"), 2),
    "keyboard-mouse-set": (Decimal("95.00"), 1),
    "phone-standard": (Decimal("540.00"), 4),
}

_lock = threading.Lock()  # tools run in worker threads; one writer per file at a time


def _read_json(path: Path, default: Any) -> Any:
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else default


def _write_json(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_suffix(path.suffix + ".tmp")
    temp.write_text(json.dumps(value, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    temp.replace(path)


def _ascii_words(name: str) -> list[str]:
    # Transliterate the letters NFKD cannot decompose, then drop accents.
    name = name.replace("ß", "ss").replace("ø", "o").replace("Ø", "O").replace("æ", "ae").replace("Æ", "AE")
    plain = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    return re.findall(r"[a-z]+", plain.lower())


@tool
def create_directory_account(
    full_name: str, department: str, job_title: str, manager_email: str, start_date: str, *, ctx: ToolContext
) -> dict[str, Any]:
    """Create the employee's directory account (single sign-on identity and mailbox).

    The username is the first name's initial plus the rest of the name, accents dropped
    ("Zoë Lindqvist" -> "zlindqvist"), with a number added when it is taken. `start_date` is
    YYYY-MM-DD. A retried step returns the account it created, and a hire that already has an
    account (same name and start date) gets that account back ("created": false). Returns
    {"employee_id", "username", "email", "display_name", "department", "start_date", "created",
    "repeated"}.
    """
    if department not in DEPARTMENTS:
        raise ToolError(
            f"create_directory_account: unknown department '{department}' ({', '.join(sorted(DEPARTMENTS))})",
            retryable=False,
        )
    try:
        date.fromisoformat(start_date)
    except ValueError:
        raise ToolError(
            f"create_directory_account: start_date must be YYYY-MM-DD, not '{start_date}'", retryable=False
        ) from None
    words = _ascii_words(full_name)
    if len(words) < 2:
        raise ToolError(f"create_directory_account: '{full_name}' needs a first and a last name", retryable=False)
    directory = ctx.workspace / "directory" / "users.json"
    with _lock:
        users: list[dict[str, Any]] = _read_json(directory, [])
        for user in users:
            if user["idempotency_key"] == ctx.idempotency_key:
                return {**_public(user), "created": False, "repeated": True}
            if (user["display_name"], user["start_date"]) == (full_name, start_date):
                # The same hire onboarded by an earlier run: reuse the account, never create a twin.
                return {**_public(user), "created": False, "repeated": False}
        base = words[0][0] + "".join(words[1:])
        taken = {u["username"] for u in users}
        username = (
            base if base not in taken else next(f"{base}{n}" for n in range(2, 1000) if f"{base}{n}" not in taken)
        )
        user = {
            "employee_id": f"E{10000 + len(users) + 1}",
            "username": username,
            "email": f"{username}@{EMAIL_DOMAIN}",
            "display_name": full_name,
            "department": department,
            "job_title": job_title,
            "manager_email": manager_email,
            "start_date": start_date,
            "idempotency_key": ctx.idempotency_key,
        }
        _write_json(directory, [*users, user])
    return {**_public(user), "created": True, "repeated": False}


def _public(user: dict[str, Any]) -> dict[str, Any]:
    keys = ("employee_id", "username", "email", "display_name", "department", "start_date")
    return {k: user[k] for k in keys}


@tool
def provision_access(
    system: Literal["slack", "github", "jira"], username: str, groups: list[str], *, ctx: ToolContext
) -> dict[str, Any]:
    """Give a directory user an account in an application (slack, github or jira) and add it to groups.

    Every group must exist in that application; an unknown group fails the step. Accounts sign in
    through the directory, so no password is created. A retried step returns the account it
    created. Returns {"system", "account_id", "username", "groups", "groups_text" (the groups
    comma-separated), "repeated"}.
    """
    unknown = sorted(set(groups) - SYSTEM_GROUPS[system])
    if unknown:
        raise ToolError(
            f"provision_access: {system} has no group(s) {', '.join(unknown)} (it has: {', '.join(sorted(SYSTEM_GROUPS[system]))})",
            retryable=False,
        )
    log = ctx.workspace / "provisioning" / f"{system}.jsonl"
    with _lock:
        lines = log.read_text(encoding="utf-8").splitlines() if log.exists() else []
        for line in lines:
            entry = json.loads(line)
            if entry["idempotency_key"] == ctx.idempotency_key:
                return {**_access(entry), "repeated": True}
        entry = {
            "system": system,
            "account_id": f"{system}-{hashlib.sha256(f'{system}/{username}'.encode()).hexdigest()[:8]}",
            "username": username,
            "groups": sorted(set(groups)),
            "idempotency_key": ctx.idempotency_key,
        }
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(entry) + "\n")
    return {**_access(entry), "repeated": False}


def _access(entry: dict[str, Any]) -> dict[str, Any]:
    return {
        **{k: entry[k] for k in ("system", "account_id", "username", "groups")},
        "groups_text": ", ".join(entry["groups"]),
    }


ORDERS = "procurement/orders.csv"
ORDER_COLUMNS = [
    "order_id",
    "employee",
    "items",
    "total_eur",
    "cost_center",
    "ship_to",
    "lead_time_days",
    "idempotency_key",
]
ORDER_LIMIT_EUR = Decimal("5000")


@tool
def order_equipment(
    employee: str, items: list[str], cost_center: str, ship_to: str, *, ctx: ToolContext
) -> dict[str, Any]:
    """Order equipment from the catalogue for a new employee (appends to procurement/orders.csv).

    `items` are catalogue ids (laptop-14-standard, laptop-16-developer, monitor-27-4k, dock-usb-c,
    headset-anc, keyboard-mouse-set, phone-standard). Orders over 5000 EUR are refused. Exactly
    once per step: a retried step returns the order it placed. Returns {"order_id", "total_eur",
    "total_text" (e.g. "EUR 3,413.00"), "lead_time_days", "items", "items_text", "repeated"}.
    """
    unknown = [item for item in items if item not in EQUIPMENT]
    if unknown or not items:
        raise ToolError(
            f"order_equipment: unknown item(s) {', '.join(unknown) or '(none given)'}; the catalogue has {', '.join(EQUIPMENT)}",
            retryable=False,
        )
    total = sum((EQUIPMENT[item][0] for item in items), Decimal(0))
    if total > ORDER_LIMIT_EUR:
        raise ToolError(
            f"order_equipment: EUR {total} is over the EUR {ORDER_LIMIT_EUR} limit for a new-joiner order",
            retryable=False,
        )
    lead_time = max(EQUIPMENT[item][1] for item in items)
    target = ctx.workspace / ORDERS
    with _lock:
        existing = target.read_text(encoding="utf-8") if target.exists() else ""
        for row in csv.DictReader(io.StringIO(existing)):
            if row["idempotency_key"] == ctx.idempotency_key:
                order = _order(
                    row["order_id"], Decimal(row["total_eur"]), int(row["lead_time_days"]), row["items"].split(";")
                )
                return {**order, "repeated": True}
        order_id = "PO-" + hashlib.sha256(ctx.idempotency_key.encode()).hexdigest()[:8].upper()
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        if not existing:
            writer.writerow(ORDER_COLUMNS)
        writer.writerow(
            [order_id, employee, ";".join(items), f"{total:.2f}", cost_center, ship_to, lead_time, ctx.idempotency_key]
        )
        target.parent.mkdir(parents=True, exist_ok=True)
        with target.open("a", encoding="utf-8") as handle:
            handle.write(out.getvalue())
    return {**_order(order_id, total, lead_time, items), "repeated": False}


def _order(order_id: str, total: Decimal, lead_time: int, items: list[str]) -> dict[str, Any]:
    return {
        "order_id": order_id,
        "total_eur": float(total),
        "total_text": f"EUR {total:,.2f}",
        "lead_time_days": lead_time,
        "items": items,
        "items_text": ", ".join(items),
    }
