"""Plan validation: every rule a plan must meet before it can be approved or run.

`plan_problems` returns plain-English messages, one per broken rule, so a person editing a
plan file and a planner model repairing its output get the same exact feedback.
"""

from __future__ import annotations

import difflib
import json
from collections import Counter
from collections.abc import Collection, Mapping
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from stratagem.common.errors import PlanValidationError
from stratagem.domain.answers import path_problem, schema_problems
from stratagem.domain.catalog import ToolCatalog
from stratagem.domain.compensation import undo_args
from stratagem.domain.graph import ancestry, find_cycles
from stratagem.domain.identity_cache import ByIdentity
from stratagem.domain.plan import PlanDraft, Step, StepKind
from stratagem.domain.quorum import quorum_problems
from stratagem.domain.references import find_references, references_in
from stratagem.domain.risk import raised
from stratagem.domain.secret_bindings import SecretBinding, binding_refusal, literal_target, secret_names


def plan_problems(
    plan: PlanDraft,
    catalog: ToolCatalog,
    *,
    has_executor: bool = True,
    tiers: Collection[str] = (),
    credentials: bool = True,
    approvers: Collection[str] | None = None,
    groups: Mapping[str, list[str]] | None = None,
    human_fields: bool = True,
    auto_approve: bool = False,
) -> list[str]:
    """Every broken rule, as a message. `has_executor=False` refuses llm steps (no model to run
    them); `tiers` are the model tiers the run routes, which llm steps may name. `credentials`
    refuses literal credentials in HTTP headers, `human_fields` a reference into a field of a
    human step that has no answer schema (each off only to replay runs from before its rule).
    `auto_approve`: the run approves itself, so no step may need more than one person."""
    problems: list[str] = []
    counts = Counter(step.id for step in plan.steps)
    for step_id, count in counts.items():
        if count > 1:
            problems.append(f"duplicate step id '{step_id}' ({count} steps share it); step ids must be unique")

    known = set(counts)
    for step in plan.steps:
        problems.extend(_kind_problems(step, catalog))
        problems.extend(_executor_problems(step, catalog, tiers))
        if step.compensate is not None:
            problems.extend(_compensation_problems(step, catalog, credentials=credentials))
        if step.answer_schema is not None:
            if step.kind is not StepKind.human:
                problems.append(f"step '{step.id}' has an answer_schema, but only human steps are answered")
            else:
                problems.extend(f"step '{step.id}': {p}" for p in schema_problems(step.answer_schema))
        if step.output_schema is not None:
            problems.extend(_output_schema_problems(step))
        if credentials:
            problems.extend(_credential_problems(step))
        if catalog.secrets is not None:  # None: a catalogue recorded before workers said where secrets go
            problems.extend(_secret_problems(step, catalog.secrets))
        if step.approvers:
            problems.extend(_approver_problems(step, approvers, groups or {}))
        if step.quorum is not None or step.four_eyes:
            problems.extend(quorum_problems(step, approvers, groups or {}, auto_approve=auto_approve))
        if step.kind is StepKind.llm and not has_executor and step.tier is None:
            problems.append(
                f"step '{step.id}' is an llm step, but the run has no executor model; set one or use a tool step"
            )
        for dep in step.depends_on:
            if dep == step.id:
                problems.append(f"step '{step.id}' depends on itself")
            elif dep not in known:
                problems.append(f"step '{step.id}' depends on missing step '{dep}'{_did_you_mean(dep, known)}")

    edges = {step.id: [d for d in step.depends_on if d != step.id] for step in plan.steps}
    cycles = find_cycles(edges)
    for cycle in cycles:
        problems.append(f"dependency cycle: {_render_cycle(cycle)}")

    if not cycles:
        is_ancestor = ancestry(edges)
        # What references into a step's output can be checked against: a human step's answer
        # schema, or the return type of the tool a tool step calls.
        shapes: dict[str, tuple[dict[str, Any], str]] = {
            s.id: (s.answer_schema, "the answer")
            for s in plan.steps
            if s.kind is StepKind.human and isinstance(s.answer_schema, dict)
        }
        for s in plan.steps:
            spec = catalog.get(s.tool) if s.kind is StepKind.tool and s.tool else None
            if spec is not None and spec.returns is not None:
                shapes[s.id] = (spec.returns, f"the output of tool '{spec.name}'")
        # A person may answer a human step without a schema with a sentence, which has no fields:
        # `${finance_review.status}` then failed a later step, shown to the person who answered.
        untyped = (
            {s.id for s in plan.steps if s.kind is StepKind.human and s.answer_schema is None}
            if human_fields
            else set()
        )
        for step in plan.steps:
            for ref in references_in(step.instructions, step.args):
                if ref.step_id not in known:
                    problems.append(
                        f"step '{step.id}' references {ref}, but there is no step '{ref.step_id}'"
                        f"{_did_you_mean(ref.step_id, known)}"
                    )
                elif ref.step_id == step.id:
                    problems.append(f"step '{step.id}' references its own output {ref}")
                elif not is_ancestor(step.id, ref.step_id):
                    problems.append(
                        f"step '{step.id}' references {ref}, but '{ref.step_id}' is not among its dependencies; "
                        f"add '{ref.step_id}' to depends_on (directly or through another step)"
                    )
                elif ref.path and ref.step_id in untyped:
                    problems.append(
                        f"step '{step.id}' references {ref}, but '{ref.step_id}' is a human step without an "
                        f"answer_schema: a person may answer it with a sentence, which has no field "
                        f"'{ref.path[0]}'; give '{ref.step_id}' an answer_schema with that field"
                    )
                elif (shape := shapes.get(ref.step_id)) is not None and (
                    problem := path_problem(shape[0], [str(p) for p in ref.path], shape[1])
                ):
                    problems.append(f"step '{step.id}' references {ref}, but {problem}")
            if step.compensate is not None and step.compensate.args:
                problems.extend(_compensation_references(step, known, is_ancestor))
    return problems


def plan_notes(plan: PlanDraft, catalog: ToolCatalog) -> list[str]:
    """What the tools change about the plan as written: steps whose risk a tool raised, or that
    wait for approval because their tool says so. Not problems: the tool wins, and says why."""
    return [note for step in plan.steps if (note := raised(step, catalog))]


def validate_plan(
    plan: PlanDraft,
    catalog: ToolCatalog,
    *,
    has_executor: bool = True,
    tiers: Collection[str] = (),
    approvers: Collection[str] | None = None,
    groups: Mapping[str, list[str]] | None = None,
    auto_approve: bool = False,
) -> None:
    """Raise `PlanValidationError` listing every problem, or return if the plan is valid."""
    problems = plan_problems(
        plan,
        catalog,
        has_executor=has_executor,
        tiers=tiers,
        approvers=approvers,
        groups=groups,
        auto_approve=auto_approve,
    )
    if problems:
        raise PlanValidationError(problems)


# Headers that carry credentials. A literal value would be stored in the plan, the history and
# every audit export; `${secret:NAME}` is resolved by the worker when the request is sent.
CREDENTIAL_HEADERS = frozenset(
    {"authorization", "proxy-authorization", "cookie", "x-api-key", "api-key", "x-auth-token"}
)


def _approver_problems(step: Step, run_approvers: Collection[str] | None, groups: Mapping[str, list[str]]) -> list[str]:
    """A step's approvers must leave someone who may decide: a step nobody may approve waits forever."""
    people = {person for name in step.approvers for person in groups.get(name, [name])}
    if run_approvers is not None and not people & set(run_approvers):
        named = ", ".join(step.approvers)
        return [
            f"step '{step.id}' names approvers ({named}) none of whom is among the run's approvers "
            f"({', '.join(run_approvers) or 'nobody'}): nobody could approve it"
        ]
    return []


def _credential_problems(step: Step) -> list[str]:
    headers = step.args.get("headers") if step.kind is StepKind.tool else None
    if not isinstance(headers, dict):
        return []
    return [
        f"step '{step.id}': header '{name}' holds a literal credential, which would be stored with the plan; "
        f"write ${{secret:NAME}} and set STRATAGEM_SECRET_NAME and STRATAGEM_SECRET_NAME_HOSTS on the workers"
        for name, value in headers.items()
        if str(name).lower() in CREDENTIAL_HEADERS and isinstance(value, str) and "${" not in value
    ]


def _secret_problems(step: Step, bindings: Mapping[str, SecretBinding]) -> list[str]:
    """`${secret:NAME}` only in a header and to a host the worker bound NAME to. A URL whose host
    comes from a reference is checked when the request is sent (and at each redirect)."""
    headers = step.args.get("headers") if step.kind is StepKind.tool else None
    if not isinstance(headers, dict):
        return []
    url = step.args.get("url")
    target = literal_target(url) if isinstance(url, str) else None
    problems = []
    for header, value in headers.items():
        for name in dict.fromkeys(secret_names(value) if isinstance(value, str) else []):
            if refusal := binding_refusal(name, bindings.get(name), str(header), target):
                problems.append(f"step '{step.id}': header '{header}': {refusal}")
    return problems


def _kind_problems(step: Step, catalog: ToolCatalog) -> list[str]:
    if step.kind is StepKind.tool:
        if not step.tool:
            return [f"step '{step.id}' is a tool step but names no tool"]
        spec = catalog.get(step.tool)
        if spec is None:
            hint = _did_you_mean(step.tool, catalog.names)
            available = ", ".join(sorted(catalog.names)) or "none"
            return [f"step '{step.id}' uses unknown tool '{step.tool}'{hint} (available: {available})"]
        return [f"step '{step.id}': {p}" for p in argument_problems(step.args, spec.parameters, tool=step.tool)]

    problems = []
    kind = f"an {step.kind.value}" if step.kind is StepKind.llm else f"a {step.kind.value}"
    if step.tool is not None:
        problems.append(f"step '{step.id}' is {kind} step but names tool '{step.tool}'; only tool steps call tools")
    if step.args:
        problems.append(f"step '{step.id}' is {kind} step but has args; put inputs in its instructions")
    if not step.instructions.strip():
        what = "the question to ask" if step.kind is StepKind.human else "what the executor should do"
        problems.append(f"step '{step.id}' is {kind} step with no instructions; say {what}")
    return problems


def _compensation_problems(step: Step, catalog: ToolCatalog, *, credentials: bool) -> list[str]:
    """A step's own compensation is checked like a step: only tool and llm steps have effects to
    undo, its tool must exist, its arguments (the step's own when it gives none) must fit, and
    they may hold no literal credential nor send a secret where it is not bound."""
    assert step.compensate is not None
    if step.kind is StepKind.human:
        return [f"step '{step.id}' is a human step, which has no effect to undo; remove its compensate"]
    tool = step.compensate.tool
    spec = catalog.get(tool)
    if spec is None:
        available = ", ".join(sorted(catalog.names)) or "none"
        return [
            f"step '{step.id}': compensate uses unknown tool '{tool}'{_did_you_mean(tool, catalog.names)} "
            f"(available: {available})"
        ]
    args = undo_args(step, step.compensate, catalog)
    problems = argument_problems(args, spec.parameters, tool=tool)
    undo = Step(id=step.id, title=step.title, tool=tool, args=args)
    if credentials:
        problems += [p.removeprefix(f"step '{step.id}': ") for p in _credential_problems(undo)]
    if catalog.secrets is not None:
        problems += [p.removeprefix(f"step '{step.id}': ") for p in _secret_problems(undo, catalog.secrets)]
    return [f"step '{step.id}': compensate: {p}" for p in problems]


def _compensation_references(step: Step, known: Collection[str], is_ancestor: Any) -> list[str]:
    """The undo runs after the step: it may read the step's own output and its ancestors'."""
    assert step.compensate is not None
    problems = []
    for ref in references_in("", step.compensate.args or {}):
        if ref.step_id == step.id:
            continue
        if ref.step_id not in known:
            problems.append(
                f"step '{step.id}': compensate references {ref}, but there is no step '{ref.step_id}'"
                f"{_did_you_mean(ref.step_id, known)}"
            )
        elif not is_ancestor(step.id, ref.step_id):
            problems.append(
                f"step '{step.id}': compensate references {ref}, but '{ref.step_id}' is neither the step itself "
                "nor among its dependencies"
            )
    return problems


def _executor_problems(step: Step, catalog: ToolCatalog, tiers: Collection[str]) -> list[str]:
    """An llm step's tool allowlist and model tier must name things the run has."""
    problems = []
    if step.kind is not StepKind.llm:
        if step.tools:
            problems.append(f"step '{step.id}' lists tools for an executor, but only llm steps have one")
        if step.tier is not None:
            problems.append(f"step '{step.id}' names model tier '{step.tier}', but only llm steps run on a model")
        return problems
    for name, count in Counter(step.tools).items():
        if catalog.get(name) is None:
            available = ", ".join(sorted(catalog.names)) or "none"
            problems.append(
                f"step '{step.id}' allows unknown tool '{name}'{_did_you_mean(name, catalog.names)} (available: {available})"
            )
        elif count > 1:
            problems.append(f"step '{step.id}' lists tool '{name}' {count} times")
    if step.tier is not None and step.tier not in tiers:
        configured = ", ".join(sorted(tiers)) or "none"
        problems.append(
            f"step '{step.id}' names model tier '{step.tier}', which the run does not route "
            f"(configured tiers: {configured}){_did_you_mean(step.tier, tiers)}"
        )
    return problems


# Validators by schema: a plan's steps share a handful of tool schemas, and building a validator
# cost more than using one (a 10,000-step plan took 1.7 s to check inside a workflow task).
_VALIDATORS: ByIdentity[dict[str, Any], Draft202012Validator] = ByIdentity(limit=512)


def _validator(schema: dict[str, Any]) -> Draft202012Validator:
    return _VALIDATORS.get(schema, Draft202012Validator)


def argument_problems(args: dict[str, Any], schema: dict[str, Any], *, tool: str) -> list[str]:
    """Schema errors for a tool's arguments. Values that hold a reference are checked at run time."""
    validator = _validator(schema)
    if validator.is_valid(args):
        return []
    problems = []
    for error in sorted(validator.iter_errors(args), key=lambda e: [str(p) for p in e.absolute_path]):
        path = list(error.absolute_path)
        if _holds_reference(args, path):
            continue
        where = ".".join(str(p) for p in path)
        if error.validator == "required":
            missing = error.message.split(" is a required property")[0]
            inside = f" in '{where}'" if where else ""
            problems.append(f"tool '{tool}' is missing required argument {missing}{inside}")
        elif error.validator == "additionalProperties" and not where:
            allowed = ", ".join(sorted(schema.get("properties", {}))) or "none"
            problems.append(f"tool '{tool}' got unexpected arguments: {error.message} (it takes: {allowed})")
        else:
            location = f"argument '{where}'" if where else "arguments"
            problems.append(f"{location} of tool '{tool}' is invalid: {error.message}")
    return problems


def _holds_reference(args: Any, path: list[Any]) -> bool:
    """True if the value at the error's path, or any value above it, is a string with a reference.

    Such a value only gets its real type at run time, when the tool checks it again."""
    node = args
    for part in path:
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            return False
        if isinstance(node, str):
            return bool(find_references(node))
    return isinstance(node, str) and bool(find_references(node))


def _render_cycle(cycle: list[str], keep: int = 5) -> str:
    if len(cycle) <= 2 * keep + 1:
        return " -> ".join(cycle)
    hidden = len(cycle) - 2 * keep
    return " -> ".join(cycle[:keep]) + f" -> ... ({hidden} more) -> " + " -> ".join(cycle[-keep:])


def _did_you_mean(name: str, candidates: Any) -> str:
    close = difflib.get_close_matches(name, list(candidates), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _output_schema_problems(step: Step) -> list[str]:
    """An llm step's output schema must be a valid JSON Schema that refers to nothing outside itself."""
    if step.kind is not StepKind.llm:
        return [f"step '{step.id}' has an output_schema, but only llm steps have their answer checked against one"]
    schema = step.output_schema
    if "$ref" in json.dumps(schema) or "$dynamicRef" in json.dumps(schema):
        return [f"step '{step.id}': output_schema may not use $ref; write the schema out in full"]
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        location = ".".join(str(p) for p in exc.absolute_path)
        return [
            f"step '{step.id}': output_schema{'.' + location if location else ''} is not a valid schema: {exc.message}"
        ]
    return []
