"""Standing approvals' pure rules (stratagem.domain.standing): bounds as a small typed model,
which grant a run of a process takes, and why none does, in words a reviewer can act on."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from stratagem.domain.plan import Author, AuthorKind, Plan
from stratagem.domain.process import ProcessRecord, ProcessSpec, check_inputs, render_plan
from stratagem.domain.standing import Grant, Registry, Revocation, difference, grant_problems, match, parse_bound

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 27, 12, tzinfo=UTC)


def spec(version: str = "1", label: str = "pay ${inputs.vendor} ${inputs.amount}") -> ProcessSpec:
    return ProcessSpec.model_validate(
        {
            "name": "payout",
            "version": version,
            "inputs": {
                "vendor": {"type": "string"},
                "amount": {"type": "number", "minimum": 0},
                "country": {"type": "string", "enum": ["DE", "FR", "US"], "default": "DE"},
                "urgent": {"type": "boolean", "default": False},
            },
            "goal": "Pay ${inputs.vendor}",
            "steps": [{"id": "pay", "title": "Pay", "tool": "record", "args": {"label": label}, "risk": "high"}],
        }
    )


def grant(process: ProcessSpec, *bounds: str, gid: str = "g1", at: datetime = NOW, **fields) -> Grant:
    return Grant(
        id=gid,
        by="dana",
        process=process.name,
        version=process.version,
        digest=process.digest,
        spec=process,
        bounds=[parse_bound(b, process) for b in bounds],
        granted_at=at,
        **fields,
    )


def record(process: ProcessSpec, schedule: str | None = None, **inputs) -> ProcessRecord:
    values, problems = check_inputs(process, {"vendor": "acme", "amount": 100, **inputs})
    assert not problems
    return ProcessRecord(
        name=process.name, version=process.version, digest=process.digest, inputs=values, schedule=schedule
    )


@pytest.mark.parametrize(
    ("text", "value", "holds"),
    [
        ("amount<=5000", 5000, True),
        ("amount<=5000", 5000.01, False),
        ("amount < 10", 9.5, True),
        ("amount>=1", 0, False),
        ("amount>0", 1, True),
        ("country=DE", "DE", True),
        ("country==DE", "FR", False),
        ("country!=US", "US", False),
        ("country in [DE, FR]", "FR", True),
        ("country in [DE,FR]", "US", False),
        ("urgent=false", False, True),
        ("urgent=false", 0, False),
        ("amount=100", 100.0, True),
        ("vendor='acme'", "acme", True),
    ],
)
def test_a_bound_is_parsed_and_holds_or_not(text, value, holds):
    assert parse_bound(text, spec()).holds(value) is holds


def test_a_number_bound_never_holds_for_a_value_that_is_not_a_number():
    bound = parse_bound("amount<=5000", spec())
    assert not bound.holds("100") and not bound.holds(True) and not bound.holds(None)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("amount <= ", "is not one of"),
        ("amount ~ 5", "is not one of"),
        ("total<=5", "payout has no input 'total' (its inputs: vendor, amount, country, urgent)"),
        ("vendor<=5", "'vendor' is a string input; only numbers take <="),
        ("amount<=lots", "<= needs a number"),
        ("country in DE", "write the values as [A,B]"),
        ("amount=much", "'amount' is a number"),
        ("__import__('os')", "is not one of"),
        ("country=XX", "'country' is never XX (it takes one of DE, FR, US)"),
        ("country in [DE,ZZ]", "'country' is never ZZ"),
    ],
)
def test_a_bound_that_cannot_be_is_refused_in_one_line(text, says):
    with pytest.raises(ValueError) as caught:
        parse_bound(text, spec())
    assert says in str(caught.value) and "\n" not in str(caught.value)


def test_a_run_inside_the_bounds_takes_the_grant():
    process = spec()
    registry = Registry(grants=[grant(process, "amount<=5000", "country in [DE,FR]")])
    found = match(registry, record(process, amount=4999), rendered=True, now=NOW)
    assert found.grant is not None and found.grant.id == "g1"


def test_out_of_bounds_names_the_bound_and_the_value():
    process = spec()
    registry = Registry(grants=[grant(process, "amount<=5000")])
    found = match(registry, record(process, amount=7000), rendered=True, now=NOW)
    assert found.grant is None
    assert found.why == ["standing approval g1 (dana): amount=7000 is outside the bound amount<=5000"]


def test_a_changed_version_does_not_match_and_offers_the_approved_one_for_a_diff():
    old, new = spec("1"), spec("2", label="pay ${inputs.vendor} ${inputs.amount} twice")
    found = match(Registry(grants=[grant(old)]), record(new), rendered=True, now=NOW)
    assert found.grant is None and found.approved == old
    assert found.why == ["standing approval g1 (dana) approves payout v1; this run is v2"]
    values, _ = check_inputs(new, record(new).inputs)
    draft = render_plan(new, values)
    assert draft is not None
    plan = Plan.from_draft(draft, revision=1, author=Author(kind=AuthorKind.human, name="payout v2"))
    lines = difference(old, record(new), plan)
    assert "~ pay" in lines
    assert any("pay acme 100 twice" in line for line in lines), lines


def test_the_same_version_with_another_digest_does_not_match():
    approved, changed = spec("1"), spec("1", label="pay ${inputs.vendor} everything")
    found = match(Registry(grants=[grant(approved)]), record(changed), rendered=True, now=NOW)
    assert found.grant is None and "the process changed since; same version" in found.why[0]


def test_revoked_expired_other_schedule_and_a_plan_not_rendered_each_say_why():
    process = spec()
    revoked = grant(process, gid="g-revoked", at=NOW - timedelta(hours=4))
    expired = grant(process, gid="g-expired", at=NOW - timedelta(hours=3), expires=NOW - timedelta(hours=1))
    scheduled = grant(process, gid="g-monthly", at=NOW - timedelta(hours=2), schedule="monthly")
    registry = Registry(
        grants=[revoked, expired, scheduled],
        revocations=[Revocation(id="g-revoked", by="lee", reason="vendor under review", at=NOW)],
    )
    found = match(registry, record(process, schedule="weekly"), rendered=True, now=NOW)
    assert found.grant is None
    assert found.why == [
        "standing approval g-monthly (dana) is for schedule monthly; this run is from schedule weekly",
        "standing approval g-expired (dana) expired at 2026-11-27T11:00+00:00",
        "standing approval g-revoked (dana) was revoked by lee: vendor under review",
    ]
    assert match(registry, record(process, schedule="monthly"), rendered=True, now=NOW).grant == scheduled
    planned = match(registry, record(process, schedule="monthly"), rendered=False, now=NOW)
    assert planned.grant is None and "this plan is not it" in planned.why[0]


def test_a_grant_for_one_process_never_applies_to_another():
    process = spec()
    other = process.model_copy(update={"name": "refund"})
    found = match(Registry(grants=[grant(process)]), record(other), rendered=True, now=NOW)
    assert found.grant is None and not found.exists


def test_an_untrusted_grant_never_applies():
    process = spec()
    found = match(
        Registry(grants=[grant(process)]), record(process), rendered=True, now=NOW, untrusted={"g1": "unsigned"}
    )
    assert found.grant is None and found.why == ["standing approval g1 is not trusted: unsigned"]


def test_the_registry_refuses_a_grant_whose_digest_is_not_its_process():
    process = spec()
    forged = grant(process).model_copy(update={"digest": "0" * 64})
    problems = grant_problems(forged, Registry(), NOW)
    assert problems == ["the grant's process, version and digest are not those of the process it carries"]
    twice = grant_problems(grant(process), Registry(grants=[grant(process)]), NOW)
    assert twice == ["there is a standing approval g1 already"]
    unknown_step = grant(process).model_copy(update={"steps": ["nope"]})
    assert grant_problems(unknown_step, Registry(), NOW) == ["payout v1 has no step nope"]
