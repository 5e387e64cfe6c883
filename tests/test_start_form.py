"""The console's Start form (stratagem.console.start_form): fields made from a process's inputs
schema, and a posted form read back into the inputs a run takes, each problem at its field."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from stratagem.console.start_form import StartDraft, read_start, start_fields
from stratagem.console.views import WHOLE
from stratagem.domain.process import ProcessSpec

pytestmark = pytest.mark.unit

SPEC = ProcessSpec(
    name="vendor-onboarding",
    version="2",
    inputs={
        "vendor": {"type": "string", "title": "Vendor name", "description": "As on the contract."},
        "tier": {"enum": ["gold", "silver"]},
        "amount": {"type": "number", "minimum": 0, "maximum": 5000, "default": 100},
        "seats": {"type": "integer", "minimum": 1},
        "urgent": {"type": "boolean", "default": False},
        "month": {"type": "string", "default": "${nominal.previous_month}"},
        "tags": {"type": "array", "items": {"type": "string"}, "default": []},
    },
    goal="Onboard ${inputs.vendor}",
    steps=[
        {"id": "record", "title": "Record ${inputs.vendor}", "tool": "record", "args": {"label": "${inputs.vendor}"}}
    ],
)
NOW = datetime(2026, 11, 27, 12, tzinfo=UTC)


def test_each_input_is_a_field_labelled_helped_typed_and_prefilled_with_its_default():
    fields = {f["name"]: f for f in start_fields(SPEC)}
    assert list(fields) == list(SPEC.inputs)  # in the order the process declares them
    vendor = fields["vendor"]
    assert (vendor["label"], vendor["description"], vendor["required"], vendor["value"]) == (
        "Vendor name",
        "As on the contract.",
        True,
        "",
    )
    assert fields["tier"]["control"] == "select" and fields["tier"]["choices"] == ["gold", "silver"]
    assert fields["tier"]["value"] == ""  # starts on "choose one", never on a value
    assert fields["amount"]["control"] == "number" and fields["amount"]["value"] == "100"
    assert (fields["amount"]["minimum"], fields["amount"]["maximum"], fields["amount"]["required"]) == (0, 5000, False)
    assert fields["seats"]["control"] == "number" and fields["seats"]["required"]
    assert fields["urgent"]["control"] == "select" and fields["urgent"]["value"] == "false"
    assert fields["tags"]["control"] == "json" and fields["tags"]["value"] == "[]"
    again = start_fields(SPEC, StartDraft(values={"vendor": "<b>x"}, errors={"vendor": "too long"}))
    assert again[0]["value"] == "<b>x" and again[0]["error"] == "too long"


def form(**values: str) -> dict[str, str]:
    base = {"vendor": "Acme", "tier": "gold", "amount": "100", "seats": "3", "urgent": "false"}
    return {f"input.{k}": v for k, v in {**base, **values}.items()}


def test_a_good_form_gives_typed_values_and_keeps_nominal_time_texts_for_the_run():
    given, draft = read_start(SPEC, form(**{"month": "${nominal.previous_month}", "tags": '["a"]'}), NOW)
    assert draft.errors == {}
    assert given == {
        "vendor": "Acme",
        "tier": "gold",
        "amount": 100,
        "seats": 3,
        "urgent": False,
        "month": "${nominal.previous_month}",
        "tags": ["a"],
    }


def test_each_problem_is_beside_its_field_and_what_was_typed_comes_back():
    _, draft = read_start(SPEC, form(vendor="", tier="", amount="9000", seats="three", tags="[1,"), NOW)
    assert draft.errors["vendor"] == "required: type a value"
    assert draft.errors["tier"] == "choose one"
    assert "maximum of 5000" in draft.errors["amount"]
    assert "not a whole number" in draft.errors["seats"]
    assert "not valid JSON" in draft.errors["tags"]
    assert draft.values["amount"] == "9000" and draft.values["seats"] == "three"
    assert WHOLE not in draft.errors


def test_a_field_the_process_does_not_declare_is_refused_not_dropped():
    _, draft = read_start(SPEC, {**form(), "input.approver": "mallory"}, NOW)
    assert "has no input 'approver'" in draft.errors[WHOLE]


def test_a_missing_field_of_a_required_input_is_refused_and_a_bad_nominal_field_named():
    posted = {k: v for k, v in form(month="${nominal.someday}").items() if k != "input.seats"}
    _, draft = read_start(SPEC, posted, NOW)
    assert draft.errors["seats"] == "required: type a value"
    assert "nominal.someday" in draft.errors["month"]
