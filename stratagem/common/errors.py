"""Errors a user or a model can cause. Each message says what is wrong and what to do."""

from __future__ import annotations


class StratagemError(Exception):
    """Base class for every error Stratagem raises on purpose."""


class PlanValidationError(StratagemError):
    """A plan broke one or more rules. `problems` lists each one, in plain words."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__(format_problems(self.problems))


def format_problems(problems: list[str]) -> str:
    if len(problems) == 1:
        return f"invalid plan: {problems[0]}"
    return "invalid plan:\n" + "\n".join(f"  - {p}" for p in problems)


class PlanFileError(StratagemError):
    """A plan file could not be read or parsed."""


class ReferenceResolutionError(StratagemError):
    """A `${step.field}` reference could not be resolved against the outputs at run time."""


class ToolError(StratagemError):
    """Raised by a tool to fail its step with a clear message.

    `retryable=False` tells Temporal not to try again: use it when another attempt cannot help
    (a refused host, a file outside the workspace, bad input).
    """

    def __init__(self, message: str, *, retryable: bool = True):
        self.retryable = retryable
        super().__init__(message)


class NonRetryableToolError(ToolError):
    """A `ToolError(retryable=False)` as the run sees it: activities/errors.py reports such an
    error under this name, which a step's retry policy does not retry."""

    def __init__(self, message: str):
        super().__init__(message, retryable=False)


class UnknownToolError(StratagemError):
    """A plan or a worker named a tool that is not registered."""


class ToolArgumentsError(StratagemError):
    """Arguments did not match a tool's schema."""


class ToolRegistrationError(StratagemError):
    """A function could not be registered as a tool (a parameter without a type, a clash of names...)."""


class ModelConfigError(StratagemError):
    """A model string or a model's configuration is wrong (unknown provider, missing script file...)."""


class ModelOutputError(StratagemError):
    """A model's output could not be used even after the allowed repair attempts."""


class ModelAuthError(StratagemError):
    """The provider refused the credentials (401/403). Another attempt cannot help."""


class ModelRequestError(StratagemError):
    """The provider refused the request itself (400, 404 unknown model, 422). Another attempt cannot help."""

    def __init__(self, message: str, *, status: int | None = None):
        super().__init__(message)
        self.status = status


class DecisionRefusedError(StratagemError):
    """A run refused a decision (a stale revision, an invalid edited plan, a finished run...)."""


class RunAlreadyStartedError(DecisionRefusedError):
    """A run with the id asked for exists (running, or closed where the start refuses closed ids
    too, as bulk runs of a process do): nothing was started."""

    def __init__(self, message: str, run_id: str):
        super().__init__(message)
        self.run_id = run_id


class RunUnresponsiveError(StratagemError):
    """A run did not take a decision or answer a query in time: no worker runs its workflow."""


class ConfigError(StratagemError):
    """Configuration from the environment is invalid."""


class BudgetReachedError(StratagemError):
    """An llm step stopped before a model call: the run's budget left for it is used. The run
    pauses for a person to raise the budget, then the step runs again."""


class CriteriaUnmetError(StratagemError):
    """An llm step's answer did not meet its success criteria, also after the executor was sent back
    to work on it: the run replans (the `criteria_unmet` trigger) rather than retrying it as it was."""


class ForkSourceError(StratagemError):
    """A fork named a source run, or a revision of it, that cannot be read: no such run, not a
    Stratagem run, no such revision. Reported by the fork activity under this name, which its retry
    policy does not retry."""


# Errors another attempt cannot fix: they fail a step (or the planning) at once. An activity
# reports an error under its class's name (activities/errors.py), and a retry policy matches
# that name, so the list Temporal is given is derived from the classes.
NON_RETRYABLE: tuple[type[StratagemError], ...] = (
    UnknownToolError,
    ToolArgumentsError,
    ReferenceResolutionError,
    ModelConfigError,
    ModelOutputError,
    PlanValidationError,
    NonRetryableToolError,
    ModelAuthError,
    ModelRequestError,
    CriteriaUnmetError,
)
NON_RETRYABLE_ERRORS = [error.__name__ for error in NON_RETRYABLE]
