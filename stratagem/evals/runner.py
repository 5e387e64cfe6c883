"""Running an eval set against one variant: a planner model, and optionally a prompt of its own.

Each case's goal is planned by `stratagem.io.planner.plan_with_repairs`, the loop runs use, with
the goal as a run gives it to the planner (a case's inputs rendered into it and listed after it,
as a process run's are) and against the set's catalogue (the tools' schemas; or the case's own).
The cases are planned one after the other; each call takes the next call index, so one scripted
file answers a whole set, its `planner:` entries in the order of the cases (and of their repairs).

A model call that fails (an error the provider returns, a refused request, a scripted `fail`)
makes that case invalid with its one-line reason; the eval goes on. A model that cannot be
loaded (a wrong model string, a missing scripted file) stops it: ModelConfigError.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, Field

from stratagem.common.errors import ConfigError, ModelConfigError, StratagemError
from stratagem.domain.catalog import ToolCatalog
from stratagem.domain.model_settings import Capabilities
from stratagem.domain.plan import PlanDraft
from stratagem.domain.process import ProcessRecord, planning_goal, render_text
from stratagem.domain.usage import CallUsage
from stratagem.evals.cases import EvalCase, EvalSet
from stratagem.evals.scoring import CheckResult, edge_f1, node_f1, run_checks
from stratagem.io.planner import NAMING, PlanningFailed, plan_with_repairs
from stratagem.models import ModelCallError, load_model
from stratagem.models.base import ModelTimeout, request_timeout_default
from stratagem.tools import ToolRegistry


@dataclass(frozen=True)
class Variant:
    """What is evaluated: a model string, and the system prompt it plans with (None: Stratagem's)."""

    model: str
    prompt_file: str | None = None
    prompt: str | None = None
    load_as: str | None = None
    """The model string to load, where it differs from the one shown (a scripted file made absolute)."""

    @property
    def label(self) -> str:
        return self.model + (f" + {self.prompt_file}" if self.prompt_file else "")


PROMPT_FIELDS = NAMING[True]


def read_prompt(path: str | Path) -> str:
    """A system prompt file: a template with `{tools}` (the catalogue), `{tiers}` and the ways
    steps are named (`{naming}`, `{dependencies}`, `{reference}`: stratagem.io.planner), braces
    meant literally written `{{` and `}}`. ConfigError, one line, when it cannot be used."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"prompt file '{file}' does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read prompt file '{file}': {getattr(exc, 'strerror', None) or exc}") from None
    try:
        text.format(tools="", tiers="", **PROMPT_FIELDS)
    except (KeyError, IndexError, ValueError) as exc:
        raise ConfigError(
            f"prompt file '{file}' is not a template: it may use {{tools}}, {{tiers}}, {{naming}}, "
            f"{{dependencies}} and {{reference}}, "
            f"and braces meant literally are written {{{{ and }}}} ({type(exc).__name__}: {exc})"
        ) from None
    if not text.strip():
        raise ConfigError(f"prompt file '{file}' is empty")
    return text


class CaseResult(BaseModel):
    id: str
    goal: str
    valid: bool
    calls: int = 0
    repairs: int = Field(default=0, description="Answers sent back to the model, and answers the engine mended.")
    input_tokens: int = 0
    output_tokens: int = 0
    seconds: float = 0.0
    node_f1: float | None = Field(default=None, description="Against the reference; None without one.")
    edge_f1: float | None = None
    checks: list[CheckResult] = Field(default_factory=list)
    problems: list[str] = Field(default_factory=list, description="Why no valid plan: the last attempt's problems.")
    error: str | None = Field(default=None, description="The model call that failed, in one line.")
    plan: PlanDraft | None = None

    @property
    def checks_passed(self) -> int:
        return sum(1 for check in self.checks if check.passed)


class Summary(BaseModel):
    cases: int
    valid: int
    valid_rate: float
    repairs: int
    node_f1: float | None = Field(description="Mean over the cases with a reference (an invalid plan scores 0).")
    edge_f1: float | None
    checks_passed: int
    checks_total: int
    calls: int
    input_tokens: int
    output_tokens: int
    seconds: float

    @classmethod
    def of(cls, cases: list[CaseResult]) -> Summary:
        scored = [case for case in cases if case.node_f1 is not None]
        return cls(
            cases=len(cases),
            valid=sum(1 for case in cases if case.valid),
            valid_rate=sum(1 for case in cases if case.valid) / len(cases) if cases else 0.0,
            repairs=sum(case.repairs for case in cases),
            node_f1=sum(c.node_f1 or 0.0 for c in scored) / len(scored) if scored else None,
            edge_f1=sum(c.edge_f1 or 0.0 for c in scored) / len(scored) if scored else None,
            checks_passed=sum(case.checks_passed for case in cases),
            checks_total=sum(len(case.checks) for case in cases),
            calls=sum(case.calls for case in cases),
            input_tokens=sum(case.input_tokens for case in cases),
            output_tokens=sum(case.output_tokens for case in cases),
            seconds=sum(case.seconds for case in cases),
        )


class VariantResult(BaseModel):
    model: str
    prompt: str | None = Field(default=None, description="The prompt file, if the variant has its own.")
    cases: list[CaseResult]

    @property
    def label(self) -> str:
        return self.model + (f" + {self.prompt}" if self.prompt else "")

    @property
    def summary(self) -> Summary:
        return Summary.of(self.cases)


async def run_eval(
    eval_set: EvalSet,
    variant: Variant,
    *,
    max_repairs: int = 2,
    capabilities: Capabilities | None = None,
    on_case: Callable[[CaseResult], None] = lambda _: None,
    time_limit: float | None = None,
) -> VariantResult:
    """Plan every case of `eval_set` with `variant`, in order; `on_case` hears of each result.
    `time_limit`: seconds a planning call may take (default STRATAGEM_REQUEST_TIMEOUT, else 120),
    past which what it wrote is cut and repaired."""
    model = load_model(variant.load_as or variant.model, capabilities=capabilities)
    timeout = time_limit or request_timeout_default()
    shared: ToolCatalog | None = None
    results = []
    index = 0  # the next call's index, across the cases
    for case in eval_set.cases:
        if case.catalog is None and shared is None:
            shared = _catalogue(eval_set.tools)
        catalog = case.catalog or shared or ToolCatalog()
        made: list[CallUsage] = []
        started = time.perf_counter()
        result = CaseResult(id=case.id, goal=case.goal, valid=False)
        failed_call = False
        try:
            outcome = await plan_with_repairs(
                model,
                case_goal(case),
                catalog,
                max_repairs=max_repairs,
                first_call_index=index,
                on_call=made.append,
                model_name=variant.model,
                request_timeout=lambda: timeout,
                system_prompt=variant.prompt,
            )
        except PlanningFailed as exc:
            result.problems = exc.attempts[-1] if exc.attempts else [str(exc)]
            result.repairs = max(len(exc.attempts) - 1, 0) + len(exc.repairs)
        except ModelConfigError:
            raise
        except (ModelCallError, StratagemError) as exc:
            # The call that raised is one more than those that answered (a timed-out one was heard).
            failed_call = not isinstance(exc, ModelTimeout)
            result.error = _one_line(exc)
        else:
            result.valid = True
            result.plan = outcome.draft
            result.repairs = len(outcome.rejected_attempts) + len(outcome.repairs)
        result.seconds = time.perf_counter() - started
        result.calls = len(made) + failed_call
        result.input_tokens = sum(call.input_tokens for call in made)
        result.output_tokens = sum(call.output_tokens for call in made)
        index += result.calls
        _score(result, case, catalog)
        on_case(result)
        results.append(result)
    return VariantResult(model=variant.model, prompt=variant.prompt_file, cases=results)


def case_goal(case: EvalCase) -> str:
    """The goal as a run of a process with these inputs gives it to its planner: `${inputs.NAME}`
    rendered, and the inputs listed after it as data (stratagem.domain.process.planning_goal)."""
    if not case.inputs:
        return case.goal
    try:
        goal = str(render_text(case.goal, case.inputs, escape=False))
    except KeyError:  # a reference to an input the case does not give stays as written
        goal = case.goal
    return planning_goal(goal, ProcessRecord(name=case.id, version="1", digest="", inputs=case.inputs))


def _catalogue(modules: list[str]) -> ToolCatalog:
    try:
        return ToolRegistry.from_modules(modules).catalog()
    except StratagemError as exc:
        raise ConfigError(str(exc)) from None


def _score(result: CaseResult, case: EvalCase, catalog: ToolCatalog) -> None:
    if result.plan is None:
        why = f"no valid plan ({result.error})" if result.error else "no valid plan"
        result.checks = [CheckResult(check=str(check), passed=False, why=why) for check in case.checks]
        if case.reference is not None:
            result.node_f1 = result.edge_f1 = 0.0
        return
    result.checks = run_checks(result.plan, case.checks, catalog)
    if case.reference is not None:
        result.node_f1 = node_f1(result.plan, case.reference).f1
        result.edge_f1 = edge_f1(result.plan, case.reference).f1


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."
