"""The configuration file: models, tiers, budget and prices, with one clear error naming every mistake."""

from __future__ import annotations

import pytest

from stratagem.cli import parser
from stratagem.cli.start import run_options
from stratagem.common.errors import ConfigError
from stratagem.domain.usage import Price
from stratagem.io.model_config import load_config, run_prices

pytestmark = pytest.mark.unit


def write(tmp_path, text: str):
    path = tmp_path / "stratagem.yaml"
    path.write_text(text)
    return path


def test_a_full_configuration_loads(tmp_path):
    config = load_config(
        write(
            tmp_path,
            """
planner: anthropic:claude-sonnet-4-5
executor: openai:gpt-4.1-mini
tiers: {fast: "openai:llama3.1:8b@http://127.0.0.1:11434/v1"}
budget: {tokens: 1000, cost_usd: 2.5}
max_tool_rounds: 4
prices: {"openai:llama3.1:8b": {input_per_mtok: 0, output_per_mtok: 0}}
""",
        )
    )
    assert config.tiers["fast"].endswith("/v1") and config.budget.cost_usd == 2.5 and config.max_tool_rounds == 4
    assert config.prices["openai:llama3.1:8b"] == Price(input_per_mtok=0, output_per_mtok=0)


def test_the_environment_names_the_default_file(tmp_path, monkeypatch):
    monkeypatch.setenv("STRATAGEM_CONFIG", str(write(tmp_path, "planner: openai:gpt-4.1\n")))
    assert load_config(None).planner == "openai:gpt-4.1"
    monkeypatch.setenv("STRATAGEM_CONFIG", str(tmp_path / "gone.yaml"))
    with pytest.raises(ConfigError, match=r"gone.yaml' \(from STRATAGEM_CONFIG\) does not exist"):
        load_config(None)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("planner: [x", "is not valid YAML"),
        ("- a\n- b\n", "must be a mapping"),
        ("plannr: openai:x\n", "plannr: Extra inputs are not permitted"),
        ("budget: {tokens: -5}\n", "budget.tokens: Input should be greater than or equal to 1"),
        ("prices: {'m:x': {input_per_mtok: 1}}\n", "prices.m:x.output_per_mtok: Field required"),
    ],
)
def test_mistakes_get_one_line_each(tmp_path, text, message):
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, text))
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_a_model_string_without_a_provider_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="tiers.fast: model 'gpt-4.1' is not of the form provider:name"):
        load_config(write(tmp_path, "tiers: {fast: gpt-4.1}\n"))


def test_every_mistake_in_a_file_is_reported_at_once_in_file_order(tmp_path):
    text = "planner: gpt-4.1\nbudget: {tokens: -1, tokenz: 5}\nmax_tool_rounds: 0\ncolour: blue\n"
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, text))
    message = str(caught.value)
    assert "\n" not in message and "has 5 mistakes: " in message
    expected = [
        "planner: model 'gpt-4.1' is not of the form provider:name",
        "budget.tokens: Input should be greater than or equal to 1",
        "budget.tokenz: not a limit (limits: tokens, cost_usd, model_calls, wall_clock_seconds)",
        "max_tool_rounds: Input should be greater than or equal to 1",
        "colour: Extra inputs are not permitted",
    ]
    assert [message.index(part) for part in expected] == sorted(message.index(part) for part in expected)


def test_the_planner_executes_when_no_executor_is_named():
    """As `stratagem run` builds a run's options (cli/start.run_options), not a copy of the rule."""
    run = parser().parse_args(["run", "g", "--planner", "openai:a"])
    assert run_options(run, None, None).executor == "openai:a"
    both = parser().parse_args(["run", "g", "--planner", "openai:a", "--executor", "openai:b"])
    assert run_options(both, None, None).executor == "openai:b"


def test_a_cost_budget_needs_a_price_for_every_model():
    prices = run_prices(["openai:gpt-4.1-mini", "openai:mystery"], {}, need_all=False)
    assert list(prices) == ["openai:gpt-4.1-mini"]
    with pytest.raises(ConfigError, match="openai:mystery has none; add it under prices:"):
        run_prices(["openai:gpt-4.1-mini", "openai:mystery"], {}, need_all=True)
    extra = {"openai:mystery": Price(input_per_mtok=1, output_per_mtok=1)}
    assert set(run_prices(["openai:mystery"], extra, need_all=True)) == {"openai:mystery"}


def test_model_settings_and_the_verifier_in_the_configuration(tmp_path) -> None:
    from stratagem.domain.model_settings import StructuredOutput, ToolCalling

    good = tmp_path / "good.yaml"
    good.write_text(
        "tiers: {strong: openai:gpt-4.1}\nverifier: strong\n"
        "models:\n  openai:smollm2: {structured_output: json_object+schema, tool_calling: prompted}\n"
    )
    config = load_config(good)
    assert config.verifier == "strong"
    settings = config.models["openai:smollm2"]
    assert (settings.structured_output, settings.tool_calling) == (
        StructuredOutput.json_object_schema,
        ToolCalling.prompted,
    )
    bad = tmp_path / "bad.yaml"
    bad.write_text("verifier: gpt-4.1\nmodels:\n  openai:x: {structured_output: grammar}\n")
    with pytest.raises(ConfigError) as caught:
        load_config(bad)
    message = str(caught.value)
    assert "verifier: model 'gpt-4.1' is not of the form provider:name" in message
    assert "models.openai:x.structured_output: Input should be 'json_schema', 'json_object+schema'" in message
