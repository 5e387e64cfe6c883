"""Tools for the vendor onboarding example: a vendor master, compliance checks and a payments ledger.

Everything is offline and deterministic: the sanctions list is a small in-file list, VAT ids and
IBANs are checked with their real format and checksum rules, and the "systems of record" are
files in the run's workspace. Tools with side effects use the step's idempotency key, so a
retried step never registers a vendor or schedules a payment twice.

A check that finds a problem fails its step (a ToolError that retrying cannot fix), so nothing
that depends on it (the welcome letter, the payment) runs. The vendor record and the letter can
be undone (`remove_vendor`, `discard_letter`): a run with `--on-failure compensate` whose payment
the bank refuses removes them again.
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
from typing import Any

from stratagem import ToolError
from stratagem.tools import ToolContext, tool

# Tools run in worker threads; this keeps two steps from writing the same file at once.
_lock = threading.Lock()

# --- Sanctions screening ------------------------------------------------------------------------

SANCTIONS_LIST_VERSION = "consolidated-2025-10-01 (example data)"

# Fictional entries standing in for a consolidated sanctions list.
SANCTIONED_PARTIES = [
    {"name": "Northwind Arms Trading", "country": "BY", "program": "EU-BY-2022"},
    {"name": "Kestrel Maritime Logistics", "country": "IR", "program": "EU-IR-NUC"},
    {"name": "Volga Dual-Use Components", "country": "RU", "program": "EU-RU-833"},
    {"name": "Golden Lotus Import Export", "country": "KP", "program": "UN-KP-1718"},
]

# Countries under comprehensive embargo in this example: no vendor from there is onboarded.
EMBARGOED_COUNTRIES = {"CU": "Cuba", "IR": "Iran", "KP": "North Korea", "SY": "Syria"}

_LEGAL_FORMS = {
    "gmbh",
    "ag",
    "kg",
    "ug",
    "ltd",
    "limited",
    "llc",
    "inc",
    "sa",
    "sas",
    "sarl",
    "bv",
    "nv",
    "spa",
    "srl",
    "plc",
    "co",
    "oy",
    "ab",
}


def normalize_party_name(name: str) -> str:
    """Casefold, drop accents, punctuation and legal forms: 'ACME Supplies GmbH' -> 'acme supplies'."""
    ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    words = re.sub(r"[^a-z0-9 ]+", " ", ascii_name.casefold()).split()
    return " ".join(w for w in words if w not in _LEGAL_FORMS)


@tool(side_effects=False)
def check_sanctions(vendor: str, country: str) -> dict[str, Any]:
    """Screen a vendor against the consolidated sanctions list and the embargoed countries.

    `vendor` is the legal name; `country` the ISO 3166 alpha-2 code of its seat. Names are matched
    after dropping case, accents, punctuation and legal forms (GmbH, Ltd, ...). A match fails the
    step, so onboarding stops. Returns {"clear": true, "screened_name", "list_version", "checked_entries"}.
    """
    country = country.strip().upper()
    if not re.fullmatch(r"[A-Z]{2}", country):
        raise ToolError(
            f"check_sanctions: country must be an ISO alpha-2 code such as 'DE', not '{country}'", retryable=False
        )
    if country in EMBARGOED_COUNTRIES:
        raise ToolError(
            f"check_sanctions: '{vendor}' is seated in {EMBARGOED_COUNTRIES[country]} ({country}), "
            "which is under embargo; onboarding must stop",
            retryable=False,
        )
    screened = normalize_party_name(vendor)
    for party in SANCTIONED_PARTIES:
        if normalize_party_name(party["name"]) == screened:
            raise ToolError(
                f"check_sanctions: '{vendor}' matches sanctioned party '{party['name']}' "
                f"({party['country']}, programme {party['program']}); onboarding must stop",
                retryable=False,
            )
    return {
        "clear": True,
        "screened_name": screened,
        "list_version": SANCTIONS_LIST_VERSION,
        "checked_entries": len(SANCTIONED_PARTIES),
    }


# --- VAT ids ------------------------------------------------------------------------------------

# Format rules per country (without the two-letter prefix). Germany also has its check digit verified.
VAT_FORMATS = {
    "AT": r"U\d{8}",
    "BE": r"[01]\d{9}",
    "DE": r"\d{9}",
    "DK": r"\d{8}",
    "ES": r"[0-9A-Z]\d{7}[0-9A-Z]",
    "FR": r"[0-9A-Z]{2}\d{9}",
    "IT": r"\d{11}",
    "NL": r"\d{9}B\d{2}",
    "PL": r"\d{10}",
}


def german_vat_check_digit(first_eight: str) -> int:
    """The check digit of a German USt-IdNr (ISO 7064, MOD 11,10)."""
    product = 10
    for digit in first_eight:
        total = (int(digit) + product) % 10 or 10
        product = (2 * total) % 11
    check = 11 - product
    return 0 if check == 10 else check


@tool(side_effects=False)
def validate_vat(vat_id: str) -> dict[str, Any]:
    """Check an EU VAT identification number's format (and, for Germany, its check digit).

    Spaces, dots and dashes are ignored, so "DE 129 273 398" works. An invalid number fails the
    step. Returns {"valid": true, "vat_id": the normalized number, "country": its prefix,
    "checksum_verified": whether a check digit was verified}.
    """
    normalized = re.sub(r"[\s.\-]", "", vat_id).upper()
    country, number = normalized[:2], normalized[2:]
    if country not in VAT_FORMATS:
        supported = ", ".join(sorted(VAT_FORMATS))
        raise ToolError(f"validate_vat: '{vat_id}' has no supported country prefix ({supported})", retryable=False)
    if not re.fullmatch(VAT_FORMATS[country], number):
        raise ToolError(f"validate_vat: '{vat_id}' does not match the {country} VAT id format", retryable=False)
    checksum_verified = False
    if country == "DE":
        expected = german_vat_check_digit(number[:8])
        if int(number[8]) != expected:
            raise ToolError(
                f"validate_vat: '{vat_id}' fails the German check digit (expected {expected}, found {number[8]})",
                retryable=False,
            )
        checksum_verified = True
    return {"valid": True, "vat_id": normalized, "country": country, "checksum_verified": checksum_verified}


# --- Bank details -------------------------------------------------------------------------------

IBAN_LENGTHS = {
    "AT": 20,
    "BE": 16,
    "CH": 21,
    "DE": 22,
    "DK": 18,
    "ES": 24,
    "FR": 27,
    "GB": 22,
    "IT": 27,
    "NL": 18,
    "PL": 28,
}

# German bank codes (Bankleitzahl) known to this example.
KNOWN_BANKS = {"37040044": "Commerzbank Köln", "10070000": "Deutsche Bank Berlin", "50010517": "ING-DiBa Frankfurt"}


def normalize_iban(iban: str) -> str:
    return re.sub(r"\s+", "", iban).upper()


def iban_checksum_ok(iban: str) -> bool:
    """ISO 13616: move the first four characters to the end, letters to numbers; the result mod 97 is 1."""
    rearranged = iban[4:] + iban[:4]
    return int("".join(str(int(ch, 36)) for ch in rearranged)) % 97 == 1


@tool(side_effects=False)
def verify_bank_details(iban: str, account_holder: str, country: str) -> dict[str, Any]:
    """Verify a vendor's bank account: IBAN length and checksum, and that the account is held in the vendor's country.

    A failing check fails the step. Returns {"verified": true, "iban": the normalized IBAN,
    "masked_iban": the IBAN with all but the last four characters hidden, "bank": the bank's name
    when known, "account_holder"}.
    """
    normalized = normalize_iban(iban)
    if not re.fullmatch(r"[A-Z]{2}\d{2}[A-Z0-9]+", normalized):
        raise ToolError(f"verify_bank_details: '{iban}' is not an IBAN", retryable=False)
    iban_country = normalized[:2]
    expected_length = IBAN_LENGTHS.get(iban_country)
    if expected_length is None:
        raise ToolError(f"verify_bank_details: IBANs from {iban_country} are not supported", retryable=False)
    if len(normalized) != expected_length:
        raise ToolError(
            f"verify_bank_details: a {iban_country} IBAN has {expected_length} characters, '{iban}' has {len(normalized)}",
            retryable=False,
        )
    if not iban_checksum_ok(normalized):
        raise ToolError(f"verify_bank_details: '{iban}' fails the IBAN checksum (mod 97)", retryable=False)
    if iban_country != country.strip().upper():
        raise ToolError(
            f"verify_bank_details: the account is held in {iban_country} but the vendor is seated in {country}; "
            "foreign accounts need a manual review",
            retryable=False,
        )
    bank = KNOWN_BANKS.get(normalized[4:12], "unknown bank") if iban_country == "DE" else "unknown bank"
    return {
        "verified": True,
        "iban": normalized,
        "masked_iban": "*" * (len(normalized) - 4) + normalized[-4:],
        "bank": bank,
        "account_holder": account_holder,
    }


# --- Vendor master ------------------------------------------------------------------------------


def vendor_id_for(vat_id: str) -> str:
    """Vendor ids are derived from the VAT id, the business key: one vendor, one id."""
    return "V-" + hashlib.sha256(vat_id.encode()).hexdigest()[:8].upper()


VENDOR_ID = re.compile(r"V-[0-9A-F]{8}")


@tool
def remove_vendor(vat_id: str, original_output: dict[str, Any], *, ctx: ToolContext) -> dict[str, Any]:
    """Undo `create_vendor_record`: remove the vendor record this onboarding created.

    Takes the record's VAT id and what creating it returned. A vendor that an earlier onboarding
    registered ("created" and "repeated" both false) is kept: this run did not add it. Removing
    a record that is already gone does nothing, so a retried undo is harmless. Returns
    {"vendor_id", "removed", "kept_because"}.
    """
    vendor_id = str(original_output.get("vendor_id", ""))
    normalized_vat = re.sub(r"[\s.\-]", "", vat_id).upper()
    # The output and the VAT id must name the same record: a plan's arguments reach no other file.
    if not VENDOR_ID.fullmatch(vendor_id) or vendor_id != vendor_id_for(normalized_vat):
        raise ToolError(
            f"remove_vendor: '{vendor_id}' is not the vendor id of VAT id '{vat_id}'; nothing removed", retryable=False
        )
    if not (original_output.get("created") or original_output.get("repeated")):
        return {"vendor_id": vendor_id, "removed": False, "kept_because": "registered before this onboarding"}
    target = ctx.workspace / "vendors" / f"{vendor_id}.json"
    with _lock:
        if not target.exists():
            return {"vendor_id": vendor_id, "removed": False, "kept_because": "already removed"}
        target.unlink()
    return {"vendor_id": vendor_id, "removed": True, "kept_because": None}


@tool(compensate=remove_vendor)
def create_vendor_record(
    name: str, country: str, vat_id: str, iban: str, contact_email: str, *, ctx: ToolContext
) -> dict[str, Any]:
    """Create the vendor in the vendor master (vendors/<vendor_id>.json in the workspace).

    The vendor id is derived from the VAT id. A retried step returns the record it created
    ("created": false, "repeated": true); a vendor that was already registered by an earlier
    onboarding is returned as it is ("created": false). Returns {"vendor_id", "path", "created",
    "repeated"}. Undone by `remove_vendor` when a run compensates.
    """
    if "@" not in contact_email:
        raise ToolError(f"create_vendor_record: '{contact_email}' is not an email address", retryable=False)
    normalized_vat = re.sub(r"[\s.\-]", "", vat_id).upper()
    vendor_id = vendor_id_for(normalized_vat)
    relative = f"vendors/{vendor_id}.json"
    target = ctx.workspace / relative
    with _lock:
        if target.exists():
            existing = json.loads(target.read_text(encoding="utf-8"))
            repeated = existing.get("idempotency_key") == ctx.idempotency_key
            return {"vendor_id": vendor_id, "path": relative, "created": False, "repeated": repeated}
        record = {
            "vendor_id": vendor_id,
            "name": name,
            "country": country.upper(),
            "vat_id": normalized_vat,
            "iban": normalize_iban(iban),
            "contact_email": contact_email,
            "status": "onboarding",
            "idempotency_key": ctx.idempotency_key,
        }
        target.parent.mkdir(parents=True, exist_ok=True)
        temp = target.with_suffix(".tmp")
        temp.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        temp.replace(target)
    return {"vendor_id": vendor_id, "path": relative, "created": True, "repeated": False}


# --- Letters ------------------------------------------------------------------------------------

LETTER_PATH = re.compile(r"letters/V-[0-9A-F]{8}-welcome\.txt")


@tool
def discard_letter(path: str, *, ctx: ToolContext) -> dict[str, Any]:
    """Undo filing a welcome letter: delete letters/<vendor_id>-welcome.txt from the workspace.

    Only a welcome letter's path is taken. A letter already gone is no error, so a retried undo
    is harmless. Returns {"path", "discarded"}.
    """
    if not LETTER_PATH.fullmatch(path):
        raise ToolError(f"discard_letter: '{path}' is not a welcome letter's path", retryable=False)
    target = ctx.workspace / path
    with _lock:
        if not target.exists():
            return {"path": path, "discarded": False}
        target.unlink()
    return {"path": path, "discarded": True}


# --- Payments -----------------------------------------------------------------------------------

PAYMENTS_LEDGER = "payments/ledger.csv"
LEDGER_COLUMNS = ["payment_id", "vendor", "amount_eur", "iban", "reference", "scheduled_on", "idempotency_key"]
MAX_FIRST_PAYMENT_EUR = 50_000

# What the bank says when it refuses a payment, by IBAN (example data): SEPA reason codes.
BANK_REFUSALS = {"DE47100700000532470611": "AC04: the account is closed"}


@tool
def schedule_payment(
    vendor: str, amount_eur: float, iban: str, reference: str = "", *, ctx: ToolContext
) -> dict[str, Any]:
    """Schedule a payment to a vendor by appending it to the payments ledger (payments/ledger.csv).

    Exactly once per step: a retried step finds its row (by idempotency key) and returns it with
    "repeated": true. Amounts must be positive and at most 50000 EUR for a first payment; the IBAN
    must pass its checksum. A payment the bank refuses (a closed account) fails the step for good.
    Returns {"payment_id", "amount_eur", "ledger", "repeated"}.
    """
    if not 0 < amount_eur <= MAX_FIRST_PAYMENT_EUR:
        raise ToolError(
            f"schedule_payment: amount {amount_eur} EUR is outside 0 < amount <= {MAX_FIRST_PAYMENT_EUR}",
            retryable=False,
        )
    normalized = normalize_iban(iban)
    if len(normalized) < 15 or not iban_checksum_ok(normalized):
        raise ToolError(f"schedule_payment: '{iban}' is not a valid IBAN", retryable=False)
    if refusal := BANK_REFUSALS.get(normalized):
        # An answer, not an outage: trying again gets the same one.
        raise ToolError(f"schedule_payment: the bank refused the payment to {normalized} ({refusal})", retryable=False)
    target = ctx.workspace / PAYMENTS_LEDGER
    payment_id = "PAY-" + hashlib.sha256(ctx.idempotency_key.encode()).hexdigest()[:10].upper()
    with _lock:
        target.parent.mkdir(parents=True, exist_ok=True)
        existing = target.read_text(encoding="utf-8") if target.exists() else ""
        for row in csv.DictReader(io.StringIO(existing)):
            if row["idempotency_key"] == ctx.idempotency_key:
                return {
                    "payment_id": row["payment_id"],
                    "amount_eur": float(row["amount_eur"]),
                    "ledger": PAYMENTS_LEDGER,
                    "repeated": True,
                }
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        if not existing:
            writer.writerow(LEDGER_COLUMNS)
        amount = round(amount_eur, 2)
        writer.writerow(
            [payment_id, vendor, f"{amount:.2f}", normalized, reference, date.today().isoformat(), ctx.idempotency_key]
        )
        with target.open("a", encoding="utf-8") as handle:
            handle.write(out.getvalue())
    return {"payment_id": payment_id, "amount_eur": amount, "ledger": PAYMENTS_LEDGER, "repeated": False}
