"""Standing approvals: a person approves a process once, and its runs go through without a review
while they run exactly that version with inputs inside the bounds the person set.

A grant names the process by name, version and digest (`ProcessSpec.digest`) and keeps the
approved process itself, so a run of a changed version can show the reviewer what changed. Its
bounds are a small typed model (`amount<=5000`, `currency=EUR`, `country in [DE,FR]`), parsed
here and nothing else accepted. The gated steps it names are approved too; any other gated step
still asks per run. It may be limited to one schedule, and may expire. It is signed as a
decision is (stratagem.common.signing, kind `standing_approval`, over the registry's id), and a
revocation is signed alike (kind `standing_revocation`).

Which grant a run takes, or why none applies, is `match`: pure, given the grants and
revocations the registry holds, the run's ProcessRecord and whether its plan is the process's
rendered plan (a planner's plan or a revision is never approved by a grant).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from stratagem.domain.decision_inputs import DecisionInput
from stratagem.domain.plan import Author, AuthorKind, Plan
from stratagem.domain.plan_diff import diff_lines, diff_revisions
from stratagem.domain.process import (
    PROCESS_NAME_PATTERN,
    ProcessRecord,
    ProcessSpec,
    check_inputs,
    describe_inputs,
    render_plan,
)

GRANT_KIND = "standing_approval"
REVOKE_KIND = "standing_revocation"
REGISTRY_WORKFLOW = "StratagemStandingApprovals"
GRANT_UPDATE = "standing_grant"
REVOKE_UPDATE = "standing_revoke"
LIST_QUERY = "standing_list"
FIND_ACTIVITY = "stratagem.find_standing_approval"
GRANT_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,79}$"
# The registry keeps every grant and revocation (its audit); a deployment needing more has too many.
MAX_GRANTS = 500
MAX_BOUNDS = 20
MAX_SPEC_BYTES = 64 * 1024

Op = Literal["<=", "<", ">=", ">", "=", "!=", "in"]
_NUMERIC: tuple[str, ...] = ("<=", "<", ">=", ">")
_BOUND = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(<=|>=|!=|==|=|<|>|\s+in\s+)\s*([^<>=!\s].*?)\s*$")
BOUND_SYNTAX = "NAME<=N, NAME<N, NAME>=N, NAME>N, NAME=VALUE, NAME!=VALUE or NAME in [A,B]"


def registry_id(task_queue: str) -> str:
    """The registry's fixed workflow id: one per task queue, which its runs read."""
    return f"stratagem-standing-approvals/{task_queue}"


class Bound(BaseModel):
    """One bound on one input: `input op value` (`value` a list for `in`)."""

    input: str = Field(max_length=64)
    op: Op
    value: Any

    def __str__(self) -> str:
        if self.op == "in":
            return f"{self.input} in [{','.join(_text(v) for v in self.value)}]"
        return f"{self.input}{self.op}{_text(self.value)}"

    def holds(self, value: Any) -> bool:
        if self.op in _NUMERIC:
            if not _number(value):
                return False
            bound = float(self.value)
            return {"<=": value <= bound, "<": value < bound, ">=": value >= bound, ">": value > bound}[self.op]
        if self.op == "in":
            return any(_same(value, item) for item in self.value)
        return _same(value, self.value) is (self.op == "=")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _same(value: Any, bound: Any) -> bool:
    if _number(value) and _number(bound):
        return float(value) == float(bound)
    return type(value) is type(bound) and value == bound


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _scalar(text: str) -> Any:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    if text in ("true", "false"):
        return text == "true"
    try:
        number = float(text)
    except ValueError:
        return text
    return int(number) if number.is_integer() and re.fullmatch(r"[+-]?\d+", text) else number


def parse_bound(text: str, spec: ProcessSpec) -> Bound:
    """`amount<=5000` as a Bound on one of the process's inputs; ValueError says, in one line,
    what is wrong (the syntax, an unknown input, a number bound on an input that is not a number)."""
    match = _BOUND.match(text or "")
    if match is None:
        raise ValueError(f"bound '{text[:80]}' is not one of: {BOUND_SYNTAX}")
    name, op, raw = match.group(1), match.group(2).strip(), match.group(3)
    op = "=" if op == "==" else op
    field = spec.inputs.get(name)
    if field is None:
        known = ", ".join(spec.inputs) or "none"
        raise ValueError(f"bound '{text[:80]}': {spec.name} has no input '{name}' (its inputs: {known})")
    value: Any
    if op == "in":
        if not (raw.startswith("[") and raw.endswith("]")) or not raw[1:-1].strip():
            raise ValueError(f"bound '{text[:80]}': write the values as [A,B]")
        value = [_scalar(item) for item in raw[1:-1].split(",")]
    else:
        value = _scalar(raw)
    bound = Bound(input=name, op=op, value=value)  # type: ignore[arg-type]
    problem = bound_problem(bound, spec)
    if problem:
        raise ValueError(problem)
    return bound


def bound_problem(bound: Bound, spec: ProcessSpec) -> str | None:
    """What makes a bound meaningless for `spec` (a grant arriving at the registry is checked
    again: it may not have come from parse_bound)."""
    field = spec.inputs.get(bound.input)
    if field is None:
        return f"bound {bound}: {spec.name} has no input '{bound.input}'"
    kind = field.get("type")
    if bound.op in _NUMERIC:
        if kind not in ("number", "integer"):
            return f"bound {bound}: '{bound.input}' is a {kind or 'untyped'} input; only numbers take {bound.op}"
        if not _number(bound.value):
            return f"bound {bound}: {bound.op} needs a number"
    if bound.op == "in" and (not isinstance(bound.value, list) or not bound.value or len(bound.value) > 100):
        return f"bound {bound}: 'in' needs a list of 1 to 100 values"
    if kind in ("number", "integer") and bound.op in ("=", "!=") and not _number(bound.value):
        return f"bound {bound}: '{bound.input}' is a number"
    choices = field.get("enum")
    if isinstance(choices, list) and bound.op in ("=", "in"):
        # A value the input can never take: the grant would approve nothing, and say otherwise.
        wanted = bound.value if isinstance(bound.value, list) else [bound.value]
        never = [v for v in wanted if not any(_same(c, v) for c in choices)]
        if never:
            shown = ", ".join(str(c) for c in choices[:20])
            return f"bound {bound}: '{bound.input}' is never {', '.join(str(v) for v in never[:5])} (it takes one of {shown})"
    return None


class Grant(DecisionInput):
    """A standing approval of one version of one process (its `digest`), signed by `by`."""

    id: str = Field(pattern=GRANT_ID_PATTERN)
    process: str = Field(pattern=PROCESS_NAME_PATTERN)
    version: str = Field(min_length=1, max_length=64)
    digest: str = Field(min_length=64, max_length=64)
    spec: ProcessSpec = Field(description="The approved process, so a run of another version can show what changed.")
    bounds: list[Bound] = Field(default_factory=list, max_length=MAX_BOUNDS)
    steps: list[str] = Field(default_factory=list, max_length=100, description="Gated steps it approves too.")
    schedule: str | None = Field(default=None, max_length=200, description="The only schedule whose runs it approves.")
    granted_at: datetime
    expires: datetime | None = None
    comment: str = Field(default="", max_length=1000)

    def describe(self) -> str:
        parts = [f"{self.id}: {self.process} v{self.version} by {self.by}"]
        if self.bounds:
            parts.append("bounds " + ", ".join(str(b) for b in self.bounds))
        if self.steps:
            parts.append("steps " + ", ".join(self.steps))
        if self.schedule:
            parts.append(f"schedule {self.schedule}")
        if self.expires:
            parts.append(f"expires {self.expires.isoformat(timespec='minutes')}")
        return "; ".join(parts)


class Revocation(DecisionInput):
    """The end of a grant: every run that asks after it waits for a person."""

    id: str = Field(pattern=GRANT_ID_PATTERN)
    reason: str = Field(min_length=1, max_length=1000)
    at: datetime


class Registry(BaseModel):
    """What the registry workflow holds, and what its query and its continue-as-new carry."""

    grants: list[Grant] = Field(default_factory=list)
    revocations: list[Revocation] = Field(default_factory=list)

    def revoked(self, grant_id: str) -> Revocation | None:
        return next((r for r in self.revocations if r.id == grant_id), None)


def grant_problems(grant: Grant, registry: Registry, now: datetime) -> list[str]:
    """What makes a grant unfit to record: checked by the registry, whoever sent it."""
    problems: list[str] = []
    spec = grant.spec
    if any(g.id == grant.id for g in registry.grants):
        problems.append(f"there is a standing approval {grant.id} already")
    if len(registry.grants) >= MAX_GRANTS:
        problems.append(f"the registry holds {MAX_GRANTS} standing approvals, revoked ones included: its limit")
    if (spec.name, spec.version, spec.digest) != (grant.process, grant.version, grant.digest):
        problems.append("the grant's process, version and digest are not those of the process it carries")
    if spec.source is not None:
        problems.append("the process a grant carries has no source")
    if len(json.dumps(spec.model_dump(mode="json"), default=str)) > MAX_SPEC_BYTES:
        problems.append(f"the process is larger than {MAX_SPEC_BYTES:,} bytes of JSON")
    problems.extend(p for b in grant.bounds if (p := bound_problem(b, spec)))
    step_ids = {s.id for s in spec.steps}
    if unknown := [s for s in grant.steps if s not in step_ids]:
        problems.append(f"{spec.name} v{spec.version} has no step {', '.join(unknown[:5])}")
    if grant.expires is not None and grant.expires <= now:
        problems.append("the grant expires before it is recorded")
    return problems


def revocation_problem(revocation: Revocation, registry: Registry) -> str | None:
    if not any(g.id == revocation.id for g in registry.grants):
        return f"there is no standing approval {revocation.id}"
    if (earlier := registry.revoked(revocation.id)) is not None:
        return f"standing approval {revocation.id} was revoked already, by {earlier.by}"
    return None


# ------------------------------------------------------------------ a run asks


class StandingMatch(BaseModel):
    """The answer to a run: the grant that approves it, or why none did (`why`, one line per
    grant considered), with the approved process closest to the run's (`approved`) for a diff."""

    grant: Grant | None = None
    signed_by: str | None = Field(default=None, description="The key the worker verified the grant's signature with.")
    why: list[str] = Field(default_factory=list)
    approved: ProcessSpec | None = None

    @property
    def exists(self) -> bool:
        return self.grant is not None or bool(self.why)


class StandingRequest(BaseModel):
    """A run at its review gate asks its registry for a grant (the activity FIND_ACTIVITY)."""

    registry: str
    record: ProcessRecord
    rendered: bool = Field(description="Whether the plan under review is the process's rendered plan.")
    now: datetime


def _why_not(grant: Grant, registry: Registry, record: ProcessRecord, rendered: bool, now: datetime) -> str | None:
    name = f"standing approval {grant.id} ({grant.by})"
    if (revoked := registry.revoked(grant.id)) is not None:
        return f"{name} was revoked by {revoked.by}: {revoked.reason}"
    if grant.expires is not None and grant.expires <= now:
        return f"{name} expired at {grant.expires.isoformat(timespec='minutes')}"
    if grant.version != record.version:
        return f"{name} approves {grant.process} v{grant.version}; this run is v{record.version}"
    if grant.digest != record.digest:
        return f"{name} approves another {grant.process} v{grant.version} (the process changed since; same version)"
    if grant.schedule is not None and grant.schedule != record.schedule:
        return f"{name} is for schedule {grant.schedule}; this run is " + (
            f"from schedule {record.schedule}" if record.schedule else "not from a schedule"
        )
    if not rendered:
        return f"{name} approves the process's own plan; this plan is not it (a planner's plan or a revision)"
    for bound in grant.bounds:
        if bound.input not in record.inputs or not bound.holds(record.inputs[bound.input]):
            value = describe_inputs({bound.input: record.inputs.get(bound.input)}, 120)
            return f"{name}: {value} is outside the bound {bound}"
    return None


def match(
    registry: Registry, record: ProcessRecord, *, rendered: bool, now: datetime, untrusted: Mapping[str, str] = {}
) -> StandingMatch:
    """The newest grant for the run's process that approves it, or why none does. `untrusted`:
    grants whose signature the worker did not verify, by id, with why (they never apply)."""
    why: list[str] = []
    approved: ProcessSpec | None = None
    for grant in sorted(registry.grants, key=lambda g: g.granted_at, reverse=True):
        if grant.process != record.name:
            continue
        if grant.id in untrusted:
            why.append(f"standing approval {grant.id} is not trusted: {untrusted[grant.id]}")
            continue
        reason = _why_not(grant, registry, record, rendered, now)
        if reason is None:
            return StandingMatch(grant=grant)
        why.append(reason)
        if approved is None and registry.revoked(grant.id) is None and grant.digest != record.digest:
            approved = grant.spec
    return StandingMatch(why=why[:5], approved=approved)


def difference(approved: ProcessSpec, record: ProcessRecord, plan: Plan) -> list[str]:
    """What the run's plan changed against the approved version rendered with the same inputs,
    in lines (at most 20): what a reviewer has to look at, and nothing else."""
    values, problems = check_inputs(approved, record.inputs)
    before = render_plan(approved, values) if not problems else None
    if before is None:
        why = "; ".join(problems) if problems else "the approved version plans from its goal"
        return [f"v{approved.version} cannot render this run's plan ({why[:300]})"]
    old = Plan.from_draft(before, revision=1, author=Author(kind=AuthorKind.human, name=approved.label))
    return diff_lines(diff_revisions(old, plan))[2:22]


def notes(found: StandingMatch, differences: Sequence[str] = ()) -> str:
    """What a pending review says about a standing approval that did not apply."""
    text = "a standing approval exists but did not apply: " + "; ".join(found.why)
    if differences:
        text += ". What changed since the approved version: " + "; ".join(line.strip() for line in differences)
    return text
