"""Which models a run uses, what they cost and how much it may spend: a configuration file.

    # stratagem.yaml (pass with --config, or set STRATAGEM_CONFIG)
    planner: anthropic:claude-sonnet-4-5
    executor: openai:gpt-4.1-mini          # default: the planner plays both roles
    synthesizer: openai:gpt-4.1-mini       # optional final summary
    verifier: strong                       # checks success criteria: a tier or a model (default: the step's)
    tiers:                                 # llm steps may name one: tier: strong
      fast: [openai:gpt-4.1-nano, anthropic:claude-haiku-4-5]   # a list fails over, in order
      strong: anthropic:claude-sonnet-4-5
      local: openai:llama3.1:8b@http://127.0.0.1:11434/v1
    escalate: {fast: strong}               # a step that failed on fast runs once more on strong
    final_check: true                      # the verifier judges the outputs against the goal at the end
    budget: {tokens: 500000, cost_usd: 5, model_calls: 200, wall_clock_seconds: 86400}
    max_tool_rounds: 12
    groups: {finance: [dana, lee], finance-leads: [erin]}
    escalate_after: 3600                   # a review or answer left this long (seconds) escalates...
    escalate_to: finance-leads             # ...to this group, whose members may then decide it too
    escalation_timeout: 86400              # and left this long after that (seconds)...
    on_escalation_timeout: reject          # ...is rejected (reject), or stops the run (stop)
    prices:                                # USD per million tokens; extends the built-in table
      openai:llama3.1:8b: {input_per_mtok: 0, output_per_mtok: 0}
    models:                                # how to call a model, where negotiating is not wanted
      openai:llama3.1:8b: {structured_output: json_object+schema, tool_calling: prompted}

Command-line options override the file. API keys never go here: the worker reads them from
its environment (OPENAI_API_KEY, ANTHROPIC_API_KEY).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from stratagem.common.errors import ConfigError, ModelConfigError
from stratagem.domain.model_settings import Capabilities
from stratagem.domain.plan import MAX_QUORUM, MAX_SECONDS
from stratagem.domain.run_types import EscalationTimeoutAction, FailureAction
from stratagem.domain.usage import DEFAULT_PRICES, Budget, Price, price_for
from stratagem.models import split_model_string

CONFIG_ENV = "STRATAGEM_CONFIG"


class ModelConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    planner: str | list[str] | None = None
    executor: str | list[str] | None = None
    synthesizer: str | list[str] | None = None
    verifier: str | None = Field(
        default=None, description="A tier or a model that checks success criteria; default: the step's own model."
    )
    tiers: dict[str, str | list[str]] = Field(default_factory=dict)
    final_check: bool = Field(
        default=False, description="Judge the final outputs against the goal before the run counts as a success."
    )
    escalate: dict[str, str] = Field(
        default_factory=dict,
        description="A tier (or 'executor') whose failed llm steps run once more on another tier before a replan.",
    )
    models: dict[str, Capabilities] = Field(
        default_factory=dict, description="How to call a model (structured_output, tool_calling), by model string."
    )
    budget: Budget = Field(default_factory=Budget)
    max_tool_rounds: int | None = Field(default=None, ge=1, le=1000)
    prices: dict[str, Price] = Field(default_factory=dict)
    approvers: list[str] | None = Field(
        default=None, description="Who may approve, reject, revise or change the budget; none: anyone."
    )
    groups: dict[str, list[str]] = Field(
        default_factory=dict, description="Named groups of approvers a step may name, e.g. finance: [dana, lee]."
    )
    on_failure: FailureAction | None = Field(
        default=None, description="repair (wait for a person) or fail, when a failed step cannot be replanned."
    )
    whole_plan_approval: bool = Field(default=False, description="Review every revision as a whole.")
    quorum: int = Field(
        default=1, ge=1, le=MAX_QUORUM, description="How many different people must approve each plan revision."
    )
    four_eyes: bool = Field(
        default=False, description="The run's starter and a revision's author may not approve the plan or a step."
    )
    escalate_after: float | None = Field(
        default=None,
        gt=0,
        le=MAX_SECONDS,
        allow_inf_nan=False,
        description="Seconds a review or a human step's answer may wait before it escalates to escalate_to.",
    )
    escalate_to: str | None = Field(
        default=None, description="The group (of groups:) an escalation goes to; its members may then decide."
    )
    escalation_timeout: float | None = Field(
        default=None,
        gt=0,
        le=MAX_SECONDS,
        allow_inf_nan=False,
        description="Seconds an escalated decision may wait before on_escalation_timeout; none: it waits on.",
    )
    on_escalation_timeout: EscalationTimeoutAction = Field(
        default=EscalationTimeoutAction.reject,
        description="reject what waited, or stop the run, once escalation_timeout passed.",
    )


def load_config(path: str | Path | None) -> ModelConfig:
    """The file at `path`, else at $STRATAGEM_CONFIG, else an empty configuration."""
    source = path or os.environ.get(CONFIG_ENV) or None
    if source is None:
        return ModelConfig()
    where = f"configuration file '{source}'" + (f" (from {CONFIG_ENV})" if path is None else "")
    try:
        raw = yaml.safe_load(Path(source).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{where} does not exist") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {where}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where} is not valid YAML: {exc}".replace("\n", " ")) from None
    if raw is None:
        return ModelConfig()
    if not isinstance(raw, dict):
        raise ConfigError(f"{where} must be a mapping (planner:, executor:, tiers:, budget:, prices:)")
    mistakes = _mistakes(raw)
    try:
        config = ModelConfig.model_validate(raw)
    except ValidationError as exc:
        found = [
            f"{'.'.join(str(p) for p in e['loc'])}: {str(e['msg']).removeprefix('Value error, ')}" for e in exc.errors()
        ]
        mistakes = found + mistakes
    order = {str(key): number for number, key in enumerate(raw)}  # as they appear in the file
    mistakes.sort(key=lambda mistake: order.get(mistake.partition(":")[0].partition(".")[0], len(order)))
    if len(mistakes) == 1:
        raise ConfigError(f"{where}: {mistakes[0]}")
    if mistakes:
        # Every mistake at once, on one line: fixing them one run at a time wastes the user's time.
        raise ConfigError(f"{where} has {len(mistakes)} mistakes: " + "; ".join(mistakes))
    return config


def _mistakes(raw: dict[Any, Any]) -> list[str]:
    """What the models cannot see: a model string that is not provider:name, a budget limit
    that does not exist (Budget ignores unknown keys, so `tokenz: 500` would set no limit)."""
    mistakes = []
    models = [(key, raw.get(key)) for key in ("planner", "executor", "synthesizer")]
    tiers: dict[Any, Any] = raw["tiers"] if isinstance(raw.get("tiers"), dict) else {}
    models += [(f"tiers.{name}", model) for name, model in tiers.items()]
    models = [
        (f"{place}[{number}]" if isinstance(value, list) else place, model)
        for place, value in models
        for number, model in (enumerate(value) if isinstance(value, list) else [(0, value)])
    ]
    if isinstance(raw.get("escalate"), dict):
        for cheap, strong in raw["escalate"].items():
            for name in (cheap, strong):
                if name != "executor" and name not in tiers:
                    known = ", ".join(["executor", *map(str, tiers)])
                    mistakes.append(f"escalate.{cheap}: '{name}' is not a tier (tiers: {known})")
    groups: dict[Any, Any] = raw["groups"] if isinstance(raw.get("groups"), dict) else {}
    if isinstance(raw.get("escalate_to"), str) and raw["escalate_to"] not in groups:
        known = ", ".join(map(str, groups)) or "none are configured"
        mistakes.append(f"escalate_to: '{raw['escalate_to']}' is not a group (groups: {known})")
    if isinstance(raw.get("verifier"), str) and raw["verifier"] not in tiers:
        models.append(("verifier", raw["verifier"]))
    if isinstance(raw.get("models"), dict):
        models += [(f"models.{name}", name) for name in raw["models"]]
    for place, model in models:
        if isinstance(model, str) and model:
            try:
                split_model_string(model)
            except ModelConfigError as exc:
                mistakes.append(f"{place}: {exc}")
    if isinstance(raw.get("budget"), dict):
        limits = ", ".join(Budget.model_fields)
        mistakes += [
            f"budget.{key}: not a limit (limits: {limits})" for key in raw["budget"] if key not in Budget.model_fields
        ]
    return mistakes


def run_prices(models: list[str], extra: dict[str, Price], *, need_all: bool) -> dict[str, Price]:
    """The price of each of the run's models, from `extra` over the built-in table.

    `need_all` (a cost budget is set) refuses a model without a price: its calls could not
    count against the budget."""
    table = {**DEFAULT_PRICES, **extra}
    prices: dict[str, Price] = {}
    missing = []
    for model in models:
        price = price_for(model, table)
        if price is None:
            missing.append(model)
        else:
            prices[model] = price
    if missing and need_all:
        raise ConfigError(
            f"a cost budget needs a price for every model, and {', '.join(missing)} has none; "
            "add it under prices: in the configuration file (USD per million tokens)"
        )
    return prices
