"""The scripted model: deterministic offline responses read from a YAML or JSON file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from stratagem.common.errors import ModelConfigError, ModelOutputError
from stratagem.models import (
    Message,
    ModelCallError,
    ModelRequest,
    Purpose,
    ScriptedModel,
    Usage,
    load_model,
    split_model_string,
)

pytestmark = pytest.mark.unit


def write_script(tmp_path: Path, content: dict[str, Any], name: str = "script.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(content, sort_keys=False))
    return path


def plan_request(call_index: int, content: str = "plan please") -> ModelRequest:
    return ModelRequest(purpose=Purpose.plan, messages=[Message(role="user", content=content)], call_index=call_index)


def exec_request(step_id: str, attempt: int = 1, content: str = "do it") -> ModelRequest:
    return ModelRequest(
        purpose=Purpose.execute, messages=[Message(role="user", content=content)], step_id=step_id, attempt=attempt
    )


PLAN = {"goal": "g", "steps": [{"id": "a", "title": "A", "kind": "llm", "instructions": "do"}]}


# --- planner responses --------------------------------------------------------------------------


async def test_planner_responses_in_order_by_call_index(tmp_path: Path) -> None:
    model = ScriptedModel(str(write_script(tmp_path, {"planner": ["first", {"text": "second"}, {"plan": PLAN}]})))
    assert (await model.complete(plan_request(0))).text == "first"
    assert (await model.complete(plan_request(1))).text == "second"
    third = await model.complete(plan_request(2))
    assert json.loads(third.text) == PLAN
    # The index decides, not the number of calls made: asking again gives the same answer.
    assert (await model.complete(plan_request(0))).text == "first"


async def test_past_the_end_of_the_planner_responses(tmp_path: Path) -> None:
    path = write_script(tmp_path, {"planner": ["only"]})
    model = ScriptedModel(str(path))
    with pytest.raises(ModelOutputError) as caught:
        await model.complete(plan_request(1))
    assert str(caught.value) == (
        f"scripted model {path} has 1 planner response(s), but the run asked for planner response #2"
    )


async def test_no_planner_section_means_zero_responses(tmp_path: Path) -> None:
    model = ScriptedModel(str(write_script(tmp_path, {"synthesis": "done"})))
    with pytest.raises(ModelOutputError, match=r"has 0 planner response\(s\)"):
        await model.complete(plan_request(0))


async def test_response_model_name_is_the_model_string(tmp_path: Path) -> None:
    path = write_script(tmp_path, {"planner": ["x"]})
    response = await ScriptedModel(str(path)).complete(plan_request(0))
    assert response.model == f"scripted:{path}"


# --- executor responses -------------------------------------------------------------------------


async def test_executor_by_step_id_with_one_entry_for_every_attempt(tmp_path: Path) -> None:
    model = ScriptedModel(str(write_script(tmp_path, {"executor": {"draft": "Dear Ada", "other": "Hi"}})))
    assert (await model.complete(exec_request("draft", attempt=1))).text == "Dear Ada"
    assert (await model.complete(exec_request("draft", attempt=4))).text == "Dear Ada"
    assert (await model.complete(exec_request("other"))).text == "Hi"


async def test_executor_list_is_per_attempt_and_the_last_entry_repeats(tmp_path: Path) -> None:
    script = {"executor": {"classify": [{"fail": "upstream timeout"}, "maybe", {"json": {"label": "urgent"}}]}}
    model = ScriptedModel(str(write_script(tmp_path, script)))
    with pytest.raises(ModelCallError) as caught:
        await model.complete(exec_request("classify", attempt=1))
    assert str(caught.value) == "scripted failure: upstream timeout"
    assert (await model.complete(exec_request("classify", attempt=2))).text == "maybe"
    for attempt in (3, 4, 9):
        response = await model.complete(exec_request("classify", attempt=attempt))
        assert json.loads(response.text) == {"label": "urgent"}


async def test_fail_entry_in_the_planner_list_raises_model_call_error(tmp_path: Path) -> None:
    model = ScriptedModel(str(write_script(tmp_path, {"planner": [{"fail": "rate limited"}, "ok"]})))
    with pytest.raises(ModelCallError, match="scripted failure: rate limited"):
        await model.complete(plan_request(0))
    assert (await model.complete(plan_request(1))).text == "ok"


async def test_json_entries_are_json_text_of_any_value(tmp_path: Path) -> None:
    script = {"executor": {"n": {"json": 42}, "l": {"json": [1, "two"]}, "s": {"json": "quoted"}}}
    model = ScriptedModel(str(write_script(tmp_path, script)))
    assert (await model.complete(exec_request("n"))).text == "42"
    assert json.loads((await model.complete(exec_request("l"))).text) == [1, "two"]
    assert (await model.complete(exec_request("s"))).text == '"quoted"'


async def test_missing_executor_response_names_the_step(tmp_path: Path) -> None:
    path = write_script(tmp_path, {"executor": {"a": "x"}})
    with pytest.raises(ModelOutputError) as caught:
        await ScriptedModel(str(path)).complete(exec_request("b"))
    assert str(caught.value) == f"scripted model {path} has no executor response for step 'b'"


async def test_empty_executor_list_is_an_error(tmp_path: Path) -> None:
    path = write_script(tmp_path, {"executor": {"a": []}})
    with pytest.raises(ModelOutputError, match="executor response for 'a' is empty"):
        await ScriptedModel(str(path)).complete(exec_request("a"))


async def test_unusable_entry_is_a_config_error(tmp_path: Path) -> None:
    path = write_script(tmp_path, {"executor": {"a": {"answer": "x"}}})
    with pytest.raises(ModelConfigError) as caught:
        await ScriptedModel(str(path)).complete(exec_request("a"))
    assert str(caught.value) == (
        f"scripted model file '{path}': a response must be text or a mapping with text, plan, json or fail"
    )


async def test_synthesis(tmp_path: Path) -> None:
    with_synthesis = ScriptedModel(str(write_script(tmp_path, {"synthesis": "All done."}, "a.yaml")))
    request = ModelRequest(purpose=Purpose.synthesize, messages=[Message(role="user", content="sum up")])
    assert (await with_synthesis.complete(request)).text == "All done."
    without = ScriptedModel(str(write_script(tmp_path, {"planner": []}, "b.yaml")))
    with pytest.raises(ModelOutputError, match="has no 'synthesis' response"):
        await without.complete(request)


# --- usage --------------------------------------------------------------------------------------


async def test_scripted_usage_is_honoured(tmp_path: Path) -> None:
    script = {"planner": [{"text": "x", "usage": {"input_tokens": 1234, "output_tokens": 56}}]}
    response = await ScriptedModel(str(write_script(tmp_path, script))).complete(plan_request(0))
    assert response.usage == Usage(input_tokens=1234, output_tokens=56)


async def test_usage_is_estimated_at_four_characters_per_token(tmp_path: Path) -> None:
    model = ScriptedModel(str(write_script(tmp_path, {"planner": ["y" * 40, "z"]})))
    response = await model.complete(plan_request(0, content="x" * 400))
    assert response.usage == Usage(input_tokens=100, output_tokens=10)
    tiny = await model.complete(plan_request(1, content="hi"))
    assert tiny.usage.input_tokens >= 1 and tiny.usage.output_tokens >= 1


# --- loading ------------------------------------------------------------------------------------


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "absent.yaml"
    with pytest.raises(ModelConfigError) as caught:
        ScriptedModel(str(path))
    assert str(caught.value) == f"scripted model file '{path}' does not exist"


def test_bad_yaml(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("planner: [\n  - a: b\n c")
    with pytest.raises(ModelConfigError) as caught:
        ScriptedModel(str(path))
    message = str(caught.value)
    assert message.startswith(f"scripted model file '{path}' is not valid YAML/JSON at line ")
    assert "planner" not in message  # where, never what


def test_not_a_mapping(tmp_path: Path) -> None:
    path = tmp_path / "list.yaml"
    path.write_text("- one\n- two\n")
    with pytest.raises(ModelConfigError, match=r"must hold a mapping with planner/executor/synthesis keys") as caught:
        ScriptedModel(str(path))
    assert str(path) in str(caught.value)


def test_unknown_top_level_keys(tmp_path: Path) -> None:
    path = write_script(tmp_path, {"planner": [], "executer": {}, "extra": 1})
    with pytest.raises(ModelConfigError) as caught:
        ScriptedModel(str(path))
    assert str(caught.value) == f"scripted model file '{path}' has unknown keys: executer, extra"


def test_wrongly_shaped_sections(tmp_path: Path) -> None:
    planner = write_script(tmp_path, {"planner": {"first": "x"}}, "p.yaml")
    with pytest.raises(ModelConfigError, match=r"'planner' must be a list of responses"):
        ScriptedModel(str(planner))
    executor = write_script(tmp_path, {"executor": ["x"]}, "e.yaml")
    with pytest.raises(ModelConfigError, match=r"'executor' must map step ids to responses"):
        ScriptedModel(str(executor))


async def test_json_script_file(tmp_path: Path) -> None:
    path = tmp_path / "script.json"
    path.write_text(json.dumps({"planner": [{"plan": PLAN}]}))
    response = await ScriptedModel(str(path)).complete(plan_request(0))
    assert json.loads(response.text) == PLAN


# --- model strings ------------------------------------------------------------------------------


async def test_load_model_with_a_scripted_string(tmp_path: Path) -> None:
    path = write_script(tmp_path, {"planner": ["hello"]})
    model = load_model(f"scripted:{path}")
    assert isinstance(model.model, ScriptedModel)  # inside the tracing wrapper
    assert model.name == f"scripted:{path}"
    assert (await model.complete(plan_request(0))).text == "hello"


def test_load_model_with_a_missing_script_names_the_path(tmp_path: Path) -> None:
    path = tmp_path / "none.yaml"
    with pytest.raises(ModelConfigError) as caught:
        load_model(f"scripted:{path}")
    assert str(caught.value) == f"scripted model file '{path}' does not exist"


@pytest.mark.parametrize("model", ["nope", ":x", "scripted:", ""])
def test_model_string_without_provider_and_name(model: str) -> None:
    with pytest.raises(ModelConfigError) as caught:
        load_model(model)
    assert (
        str(caught.value)
        == f"model '{model}' is not of the form provider:name (for example openai:gpt-4.1-mini or scripted:script.yaml)"
    )


def test_unknown_provider_lists_known_ones() -> None:
    with pytest.raises(ModelConfigError) as caught:
        load_model("zzz:x")
    message = str(caught.value)
    assert message.startswith("unknown model provider 'zzz' in 'zzz:x' (known: ")
    assert "scripted" in message


def test_split_model_string_keeps_colons_in_the_name() -> None:
    assert split_model_string("scripted:C:/scripts/a.yaml") == ("scripted", "C:/scripts/a.yaml")


# --- attack: a run names a file the worker can read -------------------------------------------


def test_a_file_outside_the_allowed_folders_is_never_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = tmp_path / "elsewhere" / "shadow.yaml"
    secret.parent.mkdir()
    secret.write_text("root: $6$secret-hash-value\n")
    monkeypatch.setenv("STRATAGEM_SCRIPTED_DIRS", str(tmp_path / "scripts"))
    for named in [str(secret), str(tmp_path / "scripts" / ".." / "elsewhere" / "shadow.yaml"), "/etc/shadow"]:
        with pytest.raises(ModelConfigError) as caught:
            ScriptedModel(named)
        message = str(caught.value)
        assert "outside the folders scripted files are read from" in message and "STRATAGEM_SCRIPTED_DIRS" in message
        assert "secret-hash" not in message and "root" not in message.replace(str(tmp_path), "")


def test_a_symlink_out_of_an_allowed_folder_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "scripts").mkdir()
    target = tmp_path / "private.yaml"
    target.write_text("planner: []\n")
    link = tmp_path / "scripts" / "innocent.yaml"
    link.symlink_to(target)
    monkeypatch.setenv("STRATAGEM_SCRIPTED_DIRS", str(tmp_path / "scripts"))
    with pytest.raises(ModelConfigError, match="outside the folders"):
        ScriptedModel(str(link))


def test_content_is_never_echoed_in_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STRATAGEM_SCRIPTED_DIRS", str(tmp_path))
    path = tmp_path / "leak.yaml"
    path.write_text("password: hunter2-secret\nbroken: [\n")
    with pytest.raises(ModelConfigError) as caught:
        ScriptedModel(str(path))
    assert "hunter2" not in str(caught.value)
    path.write_text("password: hunter2-secret\n")
    with pytest.raises(ModelConfigError) as caught:
        ScriptedModel(str(path))
    assert "hunter2" not in str(caught.value) and "password" in str(caught.value)
