"""References: finding ${step.path} in strings and resolving them against step outputs."""

from __future__ import annotations

import copy

import pytest

from stratagem.common.errors import ReferenceResolutionError
from stratagem.domain.references import (
    Reference,
    find_references,
    is_single_reference,
    references_in,
    resolve,
    resolve_text,
)

pytestmark = pytest.mark.unit

OUTPUTS = {
    "profile": {"name": "Ada", "emails": ["ada@example.com", "ada@work.example"], "age": 36, "vip": True},
    "summary": "all good",
    "count": 3,
    "rows": [{"id": 1}, {"id": 2}],
    "nothing": None,
}


# --- finding ------------------------------------------------------------------------------------


def test_find_references_parses_ids_and_paths() -> None:
    refs = find_references("Send ${profile.emails.0} to ${summary} about ${rows.1.id}")
    assert refs == [
        Reference("profile", ("emails", "0")),
        Reference("summary", ()),
        Reference("rows", ("1", "id")),
    ]
    assert [str(r) for r in refs] == ["${profile.emails.0}", "${summary}", "${rows.1.id}"]


def test_find_references_skips_escapes_and_non_references() -> None:
    assert find_references("cost: $5, literal $${profile}, {profile}, $ {x}, ${1bad}") == []


def test_references_in_covers_instructions_and_nested_args_but_not_keys() -> None:
    refs = references_in(
        "use ${a}",
        {"${not_a_key_ref}": [{"deep": "${b.x}"}, 7, ("${c}",)], "plain": "no refs"},
    )
    assert [str(r) for r in refs] == ["${a}", "${b.x}", "${c}"]


def test_is_single_reference() -> None:
    assert is_single_reference("${profile.name}") is True
    assert is_single_reference(" ${profile.name}") is False
    assert is_single_reference("${a}${b}") is False
    assert is_single_reference("$${profile}") is False


# --- resolving ----------------------------------------------------------------------------------


def test_whole_output_keeps_its_type() -> None:
    assert resolve_text("${profile}", OUTPUTS) == OUTPUTS["profile"]
    assert resolve_text("${count}", OUTPUTS) == 3
    assert resolve_text("${rows}", OUTPUTS) == [{"id": 1}, {"id": 2}]
    assert resolve_text("${nothing}", OUTPUTS) is None


def test_dotted_field_and_list_index() -> None:
    assert resolve_text("${profile.name}", OUTPUTS) == "Ada"
    assert resolve_text("${profile.age}", OUTPUTS) == 36
    assert resolve_text("${profile.vip}", OUTPUTS) is True
    assert resolve_text("${profile.emails.1}", OUTPUTS) == "ada@work.example"
    assert resolve_text("${rows.0}", OUTPUTS) == {"id": 1}
    assert resolve_text("${rows.1.id}", OUTPUTS) == 2


def test_embedded_references_render_strings_raw_and_others_as_compact_json() -> None:
    text = "Hi ${profile.name} (${profile.age}, vip=${profile.vip}): ${summary}; ${rows}; ${nothing}; ${profile.emails}"
    assert resolve_text(text, OUTPUTS) == (
        'Hi Ada (36, vip=true): all good; [{"id":1},{"id":2}]; null; ["ada@example.com","ada@work.example"]'
    )


def test_embedded_object_is_rendered_with_sorted_keys() -> None:
    assert resolve_text("p=${profile}", {"profile": {"b": 1, "a": [1, 2]}}) == 'p={"a":[1,2],"b":1}'


def test_escape_stays_literal() -> None:
    assert resolve_text("$${x}", OUTPUTS) == "${x}"
    assert resolve_text("$${profile.name} is ${profile.name}", OUTPUTS) == "${profile.name} is Ada"
    # An escaped reference to a step with no output is not an error.
    assert resolve_text("$${missing}", {}) == "${missing}"


def test_text_without_references_is_unchanged() -> None:
    assert resolve_text("costs $5 {not a ref}", OUTPUTS) == "costs $5 {not a ref}"


def test_resolve_nested_args() -> None:
    args = {
        "to": "${profile.emails.0}",
        "items": [{"id": "${rows.0.id}", "note": "n=${count}"}, "${summary}", 4, None, False],
        "meta": {"who": {"name": "${profile.name}"}},
        "tuple": ("${count}",),
    }
    original = copy.deepcopy(args)
    assert resolve(args, OUTPUTS) == {
        "to": "ada@example.com",
        "items": [{"id": 1, "note": "n=3"}, "all good", 4, None, False],
        "meta": {"who": {"name": "Ada"}},
        "tuple": [3],
    }
    assert args == original  # the input is not modified


def test_missing_step_output_is_an_error_naming_the_reference() -> None:
    with pytest.raises(ReferenceResolutionError) as caught:
        resolve_text("${ghost.name}", OUTPUTS)
    assert str(caught.value) == "${ghost.name} refers to step 'ghost', which has no output"


def test_missing_field_is_an_error_naming_the_reference_and_the_field() -> None:
    with pytest.raises(ReferenceResolutionError) as caught:
        resolve_text("${profile.phone}", OUTPUTS)
    assert str(caught.value) == "${profile.phone}: the output of 'profile' (dict) has no field or index 'phone'"


def test_index_out_of_range_names_the_walked_path() -> None:
    with pytest.raises(ReferenceResolutionError) as caught:
        resolve_text("${profile.emails.5}", OUTPUTS)
    assert str(caught.value) == "${profile.emails.5}: the output of 'profile.emails' (list) has no field or index '5'"


def test_field_of_a_string_output_is_an_error() -> None:
    with pytest.raises(ReferenceResolutionError) as caught:
        resolve_text("${summary.length}", OUTPUTS)
    assert str(caught.value) == "${summary.length}: the output of 'summary' (str) has no field or index 'length'"


def test_errors_inside_embedded_text_and_nested_args_are_raised() -> None:
    with pytest.raises(ReferenceResolutionError, match=r"\$\{ghost\} refers to step 'ghost'"):
        resolve_text("Dear ${ghost}", OUTPUTS)
    with pytest.raises(ReferenceResolutionError, match=r"has no field or index 'nope'"):
        resolve({"a": [{"b": "x ${profile.nope} y"}]}, OUTPUTS)
