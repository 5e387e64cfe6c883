"""What a gated step's approver is shown (stratagem.domain.step_preview), without a server: what
is filled, what is masked, and what the digest binds."""

from __future__ import annotations

import pytest

from stratagem.common.errors import ReferenceResolutionError
from stratagem.domain.plan import Step
from stratagem.domain.step_preview import preview

pytestmark = pytest.mark.unit

KEY = "sk-live" + "1234567890abcdefgh"


def pay(**args) -> Step:
    return Step(id="pay", title="Pay", tool="schedule_payment", args=args, depends_on=["bank"], risk="high")


def test_references_are_filled_and_credentials_masked_but_the_digest_binds_the_real_values() -> None:
    outputs = {"bank": {"iban": "DE02120300000000202051", "amount": 1200}}
    step = pay(iban="${bank.iban}", amount="${bank.amount}", token=KEY, auth="${secret:CRM}")
    shown = preview(step, outputs)
    assert shown.args == {
        "iban": "DE02120300000000202051",
        "amount": 1200,  # a whole reference keeps its type
        "token": "[redacted]",
        "auth": "${secret:CRM}",  # a name, filled only on the worker
    }
    other = preview(
        pay(iban="${bank.iban}", amount="${bank.amount}", token=KEY[:-1] + "X", auth="${secret:CRM}"), outputs
    )
    assert other.args == shown.args and other.digest != shown.digest  # alike once masked, never one approval


def test_the_digest_changes_with_any_input_and_not_otherwise() -> None:
    step = pay(iban="${bank.iban}")
    first = preview(step, {"bank": {"iban": "A"}})
    assert preview(step, {"bank": {"iban": "A"}}).digest == first.digest
    assert preview(step, {"bank": {"iban": "B"}}).digest != first.digest
    assert preview(pay(iban="A"), {}).digest == first.digest  # what runs, not how it was written


def test_every_value_is_on_a_line_of_its_own_and_no_name_passes_for_another_line() -> None:
    shown = preview(pay(**{"memo": "x" * 5000, "amount\n  to": "mallory"}), {})
    lines = shown.lines()
    assert lines[0] == "schedule_payment(" and lines[-1] == ")"
    assert lines[1] == f'  memo="{"x" * 5000}"'  # whole
    assert lines[2] == '  "amount\\n  to"="mallory"'


def test_a_reference_that_names_nothing_is_an_error_not_a_blank() -> None:
    with pytest.raises(ReferenceResolutionError):
        preview(pay(iban="${bank.iban}"), {"bank": {}})


def test_beside_a_stored_output_the_other_references_are_still_filled() -> None:
    stored = {"$stored": "store:runs/r/huge/abc.json", "bytes": 400000, "sha256": "abc", "preview": "x"}
    step = pay(note="${huge} to ${bank.iban}, escaped $${bank.iban}", whole="${huge}")
    shown = preview(step, {"huge": stored, "bank": {"iban": "DE02"}})
    assert shown.args == {"note": "${huge} to DE02, escaped $${bank.iban}", "whole": "${huge}"}
    assert "400,000 bytes: store:runs/r/huge/abc.json" in shown.stored["huge"]
    moved = preview(step, {"huge": stored | {"sha256": "def"}, "bank": {"iban": "DE02"}})
    assert moved.digest != shown.digest  # other content in the store is another approval
