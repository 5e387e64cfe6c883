"""Plan validation: the exact messages a person editing a plan and a planner model repairing one get."""

from __future__ import annotations

from typing import Any

import pytest
from jsonschema import Draft202012Validator
from pydantic import ValidationError

from stratagem.common.errors import ConfigError, PlanValidationError
from stratagem.domain.plan import Author, AuthorKind, Plan, PlanDraft, Step, StepKind, plan_draft_json_schema
from stratagem.domain.secret_bindings import SecretBinding, bindings_from_env, unbound_secrets
from stratagem.domain.validation import plan_problems, validate_plan
from stratagem.tools import ToolCatalog, ToolRegistry

pytestmark = pytest.mark.unit


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def greet(name: str, greeting: str = "Hello") -> str:
    """Make a greeting."""
    return f"{greeting}, {name}!"


def total(values: list[int]) -> int:
    """Sum a list of integers."""
    return sum(values)


def fetch_profile(user: str) -> dict:
    """Look up a user's profile."""
    return {"name": user}


@pytest.fixture(scope="module")
def catalog() -> ToolCatalog:
    registry = ToolRegistry()
    for fn in (add, greet, total, fetch_profile):
        registry.register(fn)
    return registry.catalog()


def tool_step(step_id: str, tool: str = "add", args: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "id": step_id,
        "title": step_id.upper(),
        "tool": tool,
        "args": {"a": 1, "b": 2} if args is None else args,
        **extra,
    }


def plan(*steps: dict[str, Any]) -> PlanDraft:
    return PlanDraft.model_validate({"goal": "test", "steps": list(steps)})


# --- a valid plan -------------------------------------------------------------------------------


def test_valid_diamond_plan_has_no_problems(catalog: ToolCatalog) -> None:
    draft = plan(
        tool_step("fetch", "fetch_profile", {"user": "ada"}),
        tool_step("left", "greet", {"name": "${fetch.name}"}, depends_on=["fetch"]),
        tool_step("right", "greet", {"name": "${fetch.name}", "greeting": "Hi"}, depends_on=["fetch"]),
        {
            "id": "join",
            "title": "Join",
            "kind": "llm",
            "instructions": "Combine ${left} and ${right} for ${fetch.name}",
            "depends_on": ["left", "right"],
        },
    )
    assert plan_problems(draft, catalog) == []
    validate_plan(draft, catalog)  # does not raise


# --- ids and kinds ------------------------------------------------------------------------------


def test_duplicate_ids(catalog: ToolCatalog) -> None:
    draft = plan(tool_step("a"), tool_step("a"), tool_step("b"))
    assert plan_problems(draft, catalog) == ["duplicate step id 'a' (2 steps share it); step ids must be unique"]


def test_unknown_tool_suggests_the_closest_name_and_lists_available(catalog: ToolCatalog) -> None:
    draft = plan(tool_step("a", "gret", {"name": "x"}))
    assert plan_problems(draft, catalog) == [
        "step 'a' uses unknown tool 'gret' (did you mean 'greet'?) (available: add, fetch_profile, greet, total)"
    ]


def test_unknown_tool_without_a_close_match_or_any_tools() -> None:
    draft = plan(tool_step("a", "launch_rocket", {}))
    assert plan_problems(draft, ToolCatalog()) == ["step 'a' uses unknown tool 'launch_rocket' (available: none)"]


def test_tool_step_with_no_tool(catalog: ToolCatalog) -> None:
    draft = plan({"id": "a", "title": "A"})
    assert plan_problems(draft, catalog) == ["step 'a' is a tool step but names no tool"]


def test_llm_step_with_tool_args_and_no_instructions(catalog: ToolCatalog) -> None:
    draft = plan({"id": "a", "title": "A", "kind": "llm", "tool": "add", "args": {"a": 1}, "instructions": "   "})
    assert plan_problems(draft, catalog) == [
        "step 'a' is an llm step but names tool 'add'; only tool steps call tools",
        "step 'a' is an llm step but has args; put inputs in its instructions",
        "step 'a' is an llm step with no instructions; say what the executor should do",
    ]


def test_human_step_with_tool_args_and_no_instructions(catalog: ToolCatalog) -> None:
    draft = plan({"id": "ask", "title": "Ask", "kind": "human", "tool": "greet", "args": {"name": "x"}})
    assert plan_problems(draft, catalog) == [
        "step 'ask' is a human step but names tool 'greet'; only tool steps call tools",
        "step 'ask' is a human step but has args; put inputs in its instructions",
        "step 'ask' is a human step with no instructions; say the question to ask",
    ]


def test_llm_and_human_steps_with_instructions_only_are_fine(catalog: ToolCatalog) -> None:
    draft = plan(
        {"id": "ask", "title": "Ask", "kind": "human", "instructions": "Which region?"},
        {"id": "write", "title": "Write", "kind": "llm", "instructions": "Write for ${ask}", "depends_on": ["ask"]},
    )
    assert plan_problems(draft, catalog) == []


def test_llm_step_refused_without_an_executor_but_human_step_is_not(catalog: ToolCatalog) -> None:
    draft = plan(
        {"id": "think", "title": "Think", "kind": "llm", "instructions": "Think hard"},
        {"id": "ask", "title": "Ask", "kind": "human", "instructions": "Is it fine?"},
    )
    assert plan_problems(draft, catalog, has_executor=False) == [
        "step 'think' is an llm step, but the run has no executor model; set one or use a tool step"
    ]
    assert plan_problems(draft, catalog, has_executor=True) == []


# --- arguments ----------------------------------------------------------------------------------


def test_argument_type_mismatch(catalog: ToolCatalog) -> None:
    draft = plan(tool_step("a", args={"a": "three", "b": 2}))
    assert plan_problems(draft, catalog) == [
        "step 'a': argument 'a' of tool 'add' is invalid: 'three' is not of type 'integer'"
    ]


def test_nested_argument_type_mismatch_names_the_path(catalog: ToolCatalog) -> None:
    draft = plan(tool_step("a", "total", {"values": [1, "two"]}))
    assert plan_problems(draft, catalog) == [
        "step 'a': argument 'values.1' of tool 'total' is invalid: 'two' is not of type 'integer'"
    ]


def test_missing_required_argument(catalog: ToolCatalog) -> None:
    draft = plan(tool_step("a", args={"a": 1}))
    assert plan_problems(draft, catalog) == ["step 'a': tool 'add' is missing required argument 'b'"]


def test_optional_argument_may_be_left_out(catalog: ToolCatalog) -> None:
    assert plan_problems(plan(tool_step("a", "greet", {"name": "x"})), catalog) == []


def test_unexpected_argument_lists_what_the_tool_takes(catalog: ToolCatalog) -> None:
    draft = plan(tool_step("a", args={"a": 1, "b": 2, "c": 3}))
    assert plan_problems(draft, catalog) == [
        "step 'a': tool 'add' got unexpected arguments: Additional properties are not allowed "
        "('c' was unexpected) (it takes: a, b)"
    ]


def test_every_argument_problem_of_a_step_is_reported(catalog: ToolCatalog) -> None:
    problems = plan_problems(plan(tool_step("a", args={"a": "x", "c": 1})), catalog)
    assert len(problems) == 3
    assert any("unexpected arguments" in p and "'c' was unexpected" in p for p in problems)
    assert "step 'a': tool 'add' is missing required argument 'b'" in problems
    assert "step 'a': argument 'a' of tool 'add' is invalid: 'x' is not of type 'integer'" in problems


def test_reference_value_passes_schema_checks_even_for_an_integer(catalog: ToolCatalog) -> None:
    draft = plan(
        tool_step("first"),
        tool_step("second", args={"a": "${first}", "b": 2}, depends_on=["first"]),
        tool_step("third", "total", {"values": ["${first}", 5]}, depends_on=["first"]),
        tool_step("fourth", "total", {"values": "${first}"}, depends_on=["first"]),
    )
    assert plan_problems(draft, catalog) == []


def test_escaped_reference_is_a_plain_string_and_is_type_checked(catalog: ToolCatalog) -> None:
    draft = plan(tool_step("a", args={"a": "$${x}", "b": 2}))
    assert plan_problems(draft, catalog) == [
        "step 'a': argument 'a' of tool 'add' is invalid: '$${x}' is not of type 'integer'"
    ]


# --- dependencies and cycles --------------------------------------------------------------------


def test_dependency_on_a_missing_step_suggests_a_close_id(catalog: ToolCatalog) -> None:
    draft = plan(tool_step("fetch"), tool_step("use", depends_on=["fetsh", "zzz"]))
    assert plan_problems(draft, catalog) == [
        "step 'use' depends on missing step 'fetsh' (did you mean 'fetch'?)",
        "step 'use' depends on missing step 'zzz'",
    ]


def test_self_dependency_is_reported_once_and_not_as_a_cycle(catalog: ToolCatalog) -> None:
    draft = plan(tool_step("a", depends_on=["a"]))
    assert plan_problems(draft, catalog) == ["step 'a' depends on itself"]


def test_cycle_is_named_in_order_starting_at_the_smallest_id(catalog: ToolCatalog) -> None:
    # c -> a -> b -> c, listed so the walk starts at 'c': the message still starts at 'a'.
    draft = plan(
        tool_step("c", depends_on=["a"]),
        tool_step("a", depends_on=["b"]),
        tool_step("b", depends_on=["c"]),
    )
    assert plan_problems(draft, catalog) == ["dependency cycle: a -> b -> c -> a"]


def test_two_separate_cycles_are_both_reported(catalog: ToolCatalog) -> None:
    draft = plan(
        tool_step("a", depends_on=["b"]),
        tool_step("b", depends_on=["c"]),
        tool_step("c", depends_on=["a"]),
        tool_step("x", depends_on=["y"]),
        tool_step("y", depends_on=["x"]),
        tool_step("free"),
    )
    assert plan_problems(draft, catalog) == [
        "dependency cycle: a -> b -> c -> a",
        "dependency cycle: x -> y -> x",
    ]


def test_validate_plan_raises_with_every_problem_in_the_message(catalog: ToolCatalog) -> None:
    draft = plan(tool_step("a", depends_on=["b"]), tool_step("b", depends_on=["a"]), tool_step("c", "nope", {}))
    with pytest.raises(PlanValidationError) as caught:
        validate_plan(draft, catalog)
    problems = caught.value.problems
    assert problems == plan_problems(draft, catalog)
    assert len(problems) == 2
    assert str(caught.value) == "invalid plan:\n" + "\n".join(f"  - {p}" for p in problems)


def test_plan_validation_error_with_one_problem_is_one_line() -> None:
    error = PlanValidationError(["step 'a' depends on itself"])
    assert str(error) == "invalid plan: step 'a' depends on itself"
    assert error.problems == ["step 'a' depends on itself"]


# --- references ---------------------------------------------------------------------------------


def test_reference_to_a_sibling_is_refused(catalog: ToolCatalog) -> None:
    draft = plan(
        tool_step("root"),
        tool_step("left", depends_on=["root"]),
        tool_step("right", "greet", {"name": "${left}"}, depends_on=["root"]),
    )
    assert plan_problems(draft, catalog) == [
        "step 'right' references ${left}, but 'left' is not among its dependencies; "
        "add 'left' to depends_on (directly or through another step)"
    ]


def test_reference_to_an_unknown_step_suggests_a_close_id(catalog: ToolCatalog) -> None:
    draft = plan(
        tool_step("fetch", "fetch_profile", {"user": "ada"}),
        tool_step("use", "greet", {"name": "${fetsh.name}"}, depends_on=["fetch"]),
    )
    assert plan_problems(draft, catalog) == [
        "step 'use' references ${fetsh.name}, but there is no step 'fetsh' (did you mean 'fetch'?)"
    ]


def test_reference_to_its_own_output(catalog: ToolCatalog) -> None:
    draft = plan({"id": "loop", "title": "Loop", "kind": "llm", "instructions": "Improve ${loop}"})
    assert plan_problems(draft, catalog) == ["step 'loop' references its own output ${loop}"]


def test_reference_through_a_transitive_ancestor_is_allowed(catalog: ToolCatalog) -> None:
    draft = plan(
        tool_step("a", "fetch_profile", {"user": "ada"}),
        tool_step("b", depends_on=["a"]),
        tool_step("c", "greet", {"name": "${a.name}", "greeting": "${b}"}, depends_on=["b"]),
    )
    assert plan_problems(draft, catalog) == []


def test_references_are_found_in_instructions_and_nested_args(catalog: ToolCatalog) -> None:
    draft = plan(
        tool_step("a"),
        tool_step("b"),
        tool_step("c", "total", {"values": [1, "${b}"]}, instructions="after ${a}"),
    )
    problems = plan_problems(draft, catalog)
    assert len(problems) == 2
    assert problems[0].startswith("step 'c' references ${a}, but 'a' is not among its dependencies")
    assert problems[1].startswith("step 'c' references ${b}, but 'b' is not among its dependencies")


def test_escaped_reference_in_instructions_is_not_a_reference(catalog: ToolCatalog) -> None:
    draft = plan({"id": "a", "title": "A", "kind": "llm", "instructions": "Write $${nothing} literally"})
    assert plan_problems(draft, catalog) == []


# --- the plan model -----------------------------------------------------------------------------


@pytest.mark.parametrize("bad_id", ["1st", "has space", "dot.ted", "", "x" * 65, "${a}", "é"])
def test_step_refuses_bad_ids(bad_id: str) -> None:
    with pytest.raises(ValidationError) as caught:
        Step(id=bad_id, title="T")
    assert caught.value.errors()[0]["loc"] == ("id",)


@pytest.mark.parametrize("good_id", ["a", "_private", "fetch-profile_2", "A" * 64])
def test_step_accepts_good_ids(good_id: str) -> None:
    assert Step(id=good_id, title="T").id == good_id


def test_step_refuses_extra_fields() -> None:
    with pytest.raises(ValidationError) as caught:
        Step.model_validate({"id": "a", "title": "A", "command": "rm -rf /"})
    (error,) = caught.value.errors()
    assert error["loc"] == ("command",)
    assert error["type"] == "extra_forbidden"


def test_draft_refuses_no_steps_and_extra_fields() -> None:
    with pytest.raises(ValidationError) as caught:
        PlanDraft.model_validate({"goal": "g", "steps": [], "owner": "me"})
    assert {e["loc"] for e in caught.value.errors()} == {("steps",), ("owner",)}


def test_step_defaults_and_step_approval() -> None:
    step = Step(id="a", title="A")
    assert step.kind is StepKind.tool
    assert step.needs_step_approval is False
    assert Step(id="a", title="A", risk="high").needs_step_approval is True
    assert Step(id="a", title="A", requires_approval=True).needs_step_approval is True


def test_plan_from_draft_keeps_steps_and_fills_reason_only_when_empty() -> None:
    draft = plan(tool_step("a"))
    author = Author(kind=AuthorKind.human, name="alice")
    first = Plan.from_draft(draft, revision=1, author=author, reason="initial plan")
    assert (first.revision, first.reason, first.step_ids, str(first.author)) == (
        1,
        "initial plan",
        ["a"],
        "human:alice",
    )
    kept = Plan.from_draft(draft.model_copy(update={"reason": "mine"}), revision=1, author=author, reason="other")
    assert kept.reason == "mine"


def test_plan_from_draft_accepts_an_existing_plan() -> None:
    author = Author(kind=AuthorKind.model, name="scripted:plan.yaml")
    first = Plan.from_draft(plan(tool_step("a")), revision=1, author=author)
    second = Plan.from_draft(first, revision=2, author=Author(kind=AuthorKind.human, name="bob"))
    assert second.revision == 2
    assert str(second.author) == "human:bob"
    assert second.draft() == first.draft()


def test_plan_draft_json_schema_describes_steps() -> None:
    schema = plan_draft_json_schema()
    assert schema["type"] == "object"
    assert set(schema["required"]) == {"goal", "steps"}
    step = schema["$defs"]["Step"]
    assert {"id", "title", "kind", "tool", "args", "depends_on", "instructions"} <= set(step["properties"])
    assert step["properties"]["id"]["pattern"] == "^[A-Za-z_][A-Za-z0-9_-]{0,63}$"
    assert step["properties"]["depends_on"]["type"] == "array"
    assert step["properties"]["depends_on"]["items"] == {"type": "string"}
    assert step["additionalProperties"] is False
    assert schema["$defs"]["StepKind"]["enum"] == ["tool", "llm", "human"]


def test_plan_draft_json_schema_accepts_a_plan_and_refuses_a_bad_kind() -> None:
    validator = Draft202012Validator(plan_draft_json_schema())
    good = {"goal": "g", "steps": [{"id": "a", "title": "A", "kind": "llm", "depends_on": []}]}
    bad = {"goal": "g", "steps": [{"id": "a", "title": "A", "kind": "robot"}]}
    assert list(validator.iter_errors(good)) == []
    errors = list(validator.iter_errors(bad))
    assert len(errors) == 1
    assert list(errors[0].absolute_path) == ["steps", 0, "kind"]


def test_long_chains_validate_without_recursion_and_long_cycles_stay_readable():
    from stratagem.domain.plan import PlanDraft
    from stratagem.domain.validation import plan_problems
    from stratagem.tools import ToolRegistry

    catalog = ToolRegistry.from_modules([], builtins=True).catalog()
    n = 5000
    steps = [{"id": "s0", "title": "s", "kind": "human", "instructions": "start"}]
    steps += [
        {
            "id": f"s{i}",
            "title": "s",
            "kind": "human",
            "instructions": f"after ${{s{i - 1}}}",
            "depends_on": [f"s{i - 1}"],
        }
        for i in range(1, n)
    ]
    steps[-1]["instructions"] = "uses the far ancestor ${s0}"
    assert plan_problems(PlanDraft.model_validate({"goal": "g", "steps": steps}), catalog) == []

    steps[0]["depends_on"] = [f"s{n - 1}"]
    [problem] = [
        p for p in plan_problems(PlanDraft.model_validate({"goal": "g", "steps": steps}), catalog) if "cycle" in p
    ]
    assert problem.startswith("dependency cycle: s0 -> s4999 -> s4998")
    assert f"({n + 1 - 10} more)" in problem and len(problem) < 200


def llm_step(step_id: str, **extra: Any) -> dict[str, Any]:
    return {"id": step_id, "title": step_id, "kind": "llm", "instructions": "think", **extra}


def test_an_llm_steps_tools_must_exist(catalog):
    problems = plan_problems(plan(llm_step("x", tools=["add", "gret", "add"])), catalog)
    assert problems == [
        "step 'x' lists tool 'add' 2 times",
        "step 'x' allows unknown tool 'gret' (did you mean 'greet'?) (available: add, fetch_profile, greet, total)",
    ]


def test_only_llm_steps_have_tools_and_tiers(catalog):
    problems = plan_problems(plan(tool_step("t", tools=["add"], tier="fast")), catalog, tiers=["fast"])
    assert problems == [
        "step 't' lists tools for an executor, but only llm steps have one",
        "step 't' names model tier 'fast', but only llm steps run on a model",
    ]


def test_a_tier_must_be_routed(catalog):
    draft = plan(llm_step("x", tier="strnog"), llm_step("y", tier="strong"))
    assert plan_problems(draft, catalog, tiers=["fast", "strong"]) == [
        "step 'x' names model tier 'strnog', which the run does not route (configured tiers: fast, strong) (did you mean 'strong'?)"
    ]


def test_a_step_with_a_tier_needs_no_default_executor(catalog):
    draft = plan(llm_step("x", tier="fast"), llm_step("y"))
    assert plan_problems(draft, catalog, has_executor=False, tiers=["fast"]) == [
        "step 'y' is an llm step, but the run has no executor model; set one or use a tool step"
    ]


def test_a_literal_credential_in_headers_is_refused_and_a_secret_reference_is_not():
    catalog = ToolRegistry.from_modules([]).catalog()

    def plan(value):
        return PlanDraft.model_validate(
            {
                "goal": "g",
                "steps": [
                    {
                        "id": "call",
                        "title": "t",
                        "tool": "http_request",
                        "args": {
                            "method": "GET",
                            "url": "https://api.example.com",
                            "headers": {"Authorization": value},
                        },
                    }
                ],
            }
        )

    [problem] = plan_problems(plan("Bearer sk-live-0123456789"), catalog)
    assert "header 'Authorization' holds a literal credential" in problem and "${secret:NAME}" in problem
    assert plan_problems(plan("Bearer ${secret:CRM_TOKEN}"), catalog) == []


def http_plan(url: str, headers: dict[str, str], *, source: bool = False) -> PlanDraft:
    steps: list[dict[str, Any]] = []
    if source:
        steps.append({"id": "where", "title": "t", "tool": "render_template", "args": {"template": "x", "values": {}}})
    steps.append(
        {
            "id": "call",
            "title": "t",
            "tool": "http_request",
            "args": {"method": "GET", "url": url, "headers": headers},
            "depends_on": ["where"] if source else [],
        }
    )
    return PlanDraft.model_validate({"goal": "g", "steps": steps})


def test_a_secret_is_refused_in_a_request_to_a_host_the_worker_did_not_bind_it_to():
    plain = ToolRegistry.from_modules([]).catalog()
    bound = plain.model_copy(
        update={
            "secrets": {
                "CRM": SecretBinding(hosts=["crm.example.com", "api.crm.example.com:8443"]),
                "BILLING": SecretBinding(hosts=["*.billing.example"], headers=["Authorization"]),
            }
        }
    )
    crm = {"Authorization": "Bearer ${secret:crm}"}
    assert plan_problems(http_plan("https://crm.example.com/v1/deals", crm), bound) == []
    assert plan_problems(http_plan("https://api.crm.example.com:8443/x?q=${where}", crm, source=True), bound) == []
    assert plan_problems(http_plan("https://eu.billing.example/", {"authorization": "${secret:billing}"}), bound) == []

    [elsewhere] = plan_problems(http_plan("https://logs.example.com/ingest", crm), bound)
    assert elsewhere == (
        "step 'call': header 'Authorization': secret 'CRM' may be sent only to crm.example.com, "
        "api.crm.example.com:8443, not to 'logs.example.com' (STRATAGEM_SECRET_CRM_HOSTS)"
    )
    # A port the binding does not name, and a userinfo trick that leads elsewhere.
    assert plan_problems(http_plan("https://crm.example.com:8443/", crm), bound)
    assert plan_problems(http_plan("https://crm.example.com@logs.example.com/", crm), bound)
    [header] = plan_problems(http_plan("https://eu.billing.example/", {"X-Debug": "${secret:billing}"}), bound)
    assert "may be sent only in Authorization, not in 'X-Debug'" in header
    [unbound] = plan_problems(http_plan("https://crm.example.com/", {"X-Api-Key": "${secret:other}"}), bound)
    assert "secret 'OTHER' is bound to no host; set STRATAGEM_SECRET_OTHER_HOSTS on the workers" in unbound
    [reserved] = plan_problems(http_plan("https://crm.example.com/", {"X-Api-Key": "${secret:crm_hosts}"}), bound)
    assert "reserved for bindings" in reserved

    # A host that comes from a step's output is known only when the request is sent.
    assert plan_problems(http_plan("${where}/v1", crm, source=True), bound) == []
    assert plan_problems(http_plan("https://${where}/v1", crm, source=True), bound) == []
    # A worker that binds nothing refuses every secret; a catalogue recorded before bindings
    # existed (no field: None) leaves secrets to the check when the request is sent.
    nothing = plain.model_copy(update={"secrets": {}})
    assert plan_problems(http_plan("https://crm.example.com/", crm), nothing)
    assert plain.secrets is None and plan_problems(http_plan("https://logs.example.com/", crm), plain) == []


def test_a_catalogue_recorded_before_bindings_reads_as_the_worker_not_saying():
    old = ToolCatalog.model_validate_json('{"tools": [], "notify": true}')
    assert old.secrets is None
    said = ToolCatalog(secrets={})
    assert ToolCatalog.model_validate_json(said.model_dump_json()).secrets == {}


def test_bindings_come_from_the_environment_and_a_malformed_one_is_one_line():
    env = {
        "STRATAGEM_SECRET_CRM": "the value, never read here",
        "STRATAGEM_SECRET_CRM_HOSTS": " crm.example.com , API.crm.example.com:8443,[::1]:9000",
        "STRATAGEM_SECRET_CRM_HEADERS": "Authorization",
        "STRATAGEM_SECRET_LOOSE": "held but bound nowhere",
    }
    bindings = bindings_from_env(env)
    assert bindings == {
        "CRM": SecretBinding(
            hosts=["crm.example.com", "api.crm.example.com:8443", "[::1]:9000"], headers=["Authorization"]
        )
    }
    assert "the value" not in ToolCatalog(secrets=bindings).model_dump_json()
    assert unbound_secrets(env) == ["LOOSE"]
    hosts = {"STRATAGEM_SECRET_X_HOSTS": "x.example"}
    for malformed, expected in [
        ({"STRATAGEM_SECRET_X_HOSTS": "https://x.example/"}, "is not a host"),
        ({"STRATAGEM_SECRET_X_HOSTS": "x.example:99999"}, "is not a host"),
        ({"STRATAGEM_SECRET_X_HEADERS": "Authorization"}, "STRATAGEM_SECRET_X_HOSTS is not"),
        ({**hosts, "STRATAGEM_SECRET_X_HEADERS": " , "}, "names no header"),
        ({**hosts, "STRATAGEM_SECRET_X_HEADERS": "Bad Header"}, "is not a header name"),
        ({"STRATAGEM_SECRET_x_HOSTS": "x.example"}, "in capitals"),
    ]:
        with pytest.raises(ConfigError, match=expected) as refused:
            bindings_from_env(malformed)
        assert "\n" not in str(refused.value)
