"""The plan: a typed task graph that a planner (model or human) writes and a human approves.

A `PlanDraft` is what a planner produces: a goal and steps. A `Plan` is a draft the run has
accepted as a numbered revision, with its author and the reason for it. The JSON schema that
planner models are given is generated from `PlanDraft`, so the models, the validation and the
prompt never disagree.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from stratagem.domain.compact import CompactModel

# A year: longer limits are surely mistakes, and Python's dates overflow not far above.
MAX_SECONDS = 366 * 24 * 3600
# A plan is validated and scheduled inside workflow tasks, which Temporal expects to finish in
# about two seconds: 10,000 steps take 0.2 s to validate; 30,000 stalled every task of the run.
MAX_PLAN_STEPS = 10_000
# More approvals than this on one decision are surely a mistake.
MAX_QUORUM = 20
STEP_ID_PATTERN = r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$"


class StepKind(str, Enum):
    tool = "tool"
    """Calls a registered tool with arguments."""
    llm = "llm"
    """Asks the executor model to carry out the instructions."""
    human = "human"
    """Waits for a person's answer, which becomes the step's output."""


class Risk(str, Enum):
    low = "low"
    medium = "medium"
    high = "high"
    """High-risk steps wait for their own approval before they run."""


class OutputFormat(str, Enum):
    text = "text"
    json = "json"


class Compensation(CompactModel):
    """How a step's effect is undone, when a run that ends without its goal compensates
    (stratagem.domain.compensation): a tool and its arguments. Arguments may reference the step's
    own output (`${step_id}`, `${step_id.field}`) and its ancestors' outputs."""

    model_config = ConfigDict(extra="forbid")

    tool: str = Field(min_length=1, description="The registered tool that undoes the step's effect.")
    args: dict[str, Any] | None = Field(
        default=None,
        description="The undo's arguments; None: the step's own arguments (and its output, if the undo takes "
        "`original_output`).",
    )


class Step(CompactModel):
    """One node of the task graph."""

    model_config = ConfigDict(extra="forbid", use_enum_values=False)

    id: str = Field(
        pattern=STEP_ID_PATTERN,
        description="Stable identifier, unique in the plan and kept across revisions. "
        "Letters, digits, '_' and '-', starting with a letter or '_'.",
    )
    title: str = Field(min_length=1, description="Short human-readable name of the step.")
    instructions: str = Field(
        default="",
        description="What to do. May reference outputs of ancestor steps as ${step_id} or ${step_id.field}.",
    )
    kind: StepKind = Field(default=StepKind.tool, description="tool, llm or human.")
    tool: str | None = Field(default=None, description="For tool steps: the registered tool's name.")
    args: dict[str, Any] = Field(
        default_factory=dict,
        description="For tool steps: arguments matching the tool's schema. String values may contain references.",
    )
    tools: list[str] = Field(
        default_factory=list,
        description="For llm steps: the tools the executor may call while working (an allowlist). Empty: none.",
    )
    tier: str | None = Field(
        default=None,
        description="For llm steps: the model tier that runs it (for example 'fast' or 'strong'). "
        "Default: the run's executor model.",
    )
    depends_on: list[str] = Field(default_factory=list, description="Ids of steps that must succeed first.")
    success_criteria: list[str] = Field(default_factory=list, description="How to tell the step did what it should.")
    risk: Risk = Field(default=Risk.low, description="low, medium or high. High-risk steps need their own approval.")
    requires_approval: bool = Field(
        default=False, description="If true, a person must approve this step before it runs."
    )
    output_format: OutputFormat = Field(
        default=OutputFormat.text, description="For llm steps: 'json' asks the executor for a JSON value."
    )
    timeout_seconds: float | None = Field(
        default=None,
        gt=0,
        le=MAX_SECONDS,
        allow_inf_nan=False,
        description="Per-attempt time limit (tool and llm steps) or answer deadline (human steps).",
    )
    max_attempts: int | None = Field(
        default=None, ge=1, le=20, description="Attempts before the step counts as failed."
    )
    approvers: list[str] = Field(
        default_factory=list,
        description="Who may approve this step, answer it or approve its tool calls: people's names or groups from "
        "the configuration (e.g. finance), on top of the run's approvers. Naming any makes the step wait for approval.",
    )
    quorum: int | None = Field(
        default=None,
        ge=1,
        le=MAX_QUORUM,
        description="How many different people must approve this step before it runs (default 1). More than one "
        "makes the step wait for approval; a rejection by any one of them rejects it.",
    )
    four_eyes: bool = Field(
        default=False,
        description="If true, the person who started the run and the person who wrote the step may not approve it. "
        "Makes the step wait for approval.",
    )
    output_schema: dict[str, Any] | None = Field(
        default=None,
        description="For llm steps: the JSON Schema the executor's answer must follow (the answer is then JSON). "
        "Checked before the step counts as done; a wrong answer is sent back to the executor to correct.",
    )
    answer_schema: dict[str, Any] | None = Field(
        default=None,
        description="For human steps: what the answer must look like, as a JSON Schema (types, properties, "
        "required, enum, bounds). A wrong answer is refused and the step keeps waiting.",
    )
    compensate: Compensation | None = Field(
        default=None,
        description="How to undo this step's effect if the run ends without its goal: {tool, args}. Default: "
        "the compensation its tool declares, if any.",
    )

    @property
    def wants_json(self) -> bool:
        """Whether the executor's answer is a JSON value (output_format json, or an output schema)."""
        return self.output_format is OutputFormat.json or self.output_schema is not None

    @property
    def needs_step_approval(self) -> bool:
        many = self.quorum is not None and self.quorum > 1
        return self.requires_approval or self.risk is Risk.high or bool(self.approvers) or many or self.four_eyes


class PlanDraft(BaseModel):
    """What a planner writes: a goal and the steps that reach it."""

    model_config = ConfigDict(extra="forbid")

    goal: str = Field(min_length=1, description="The objective the plan achieves.")
    steps: list[Step] = Field(
        min_length=1, max_length=MAX_PLAN_STEPS, description="The task graph, in any order (at most 10,000 steps)."
    )
    reason: str = Field(default="", description="Why this plan (or this revision) looks the way it does.")

    def step(self, step_id: str) -> Step:
        for step in self.steps:
            if step.id == step_id:
                return step
        raise KeyError(step_id)

    @property
    def step_ids(self) -> list[str]:
        return [s.id for s in self.steps]


class AuthorKind(str, Enum):
    model = "model"
    human = "human"


class Author(BaseModel):
    kind: AuthorKind
    name: str = Field(min_length=1, description="A model string such as 'scripted:plan.yaml', or a person's name.")

    def __str__(self) -> str:
        return f"{self.kind.value}:{self.name}" if self.kind is AuthorKind.human else self.name


class Plan(PlanDraft):
    """A draft accepted by a run as a numbered revision."""

    revision: int = Field(ge=1)
    author: Author

    @classmethod
    def from_draft(cls, draft: PlanDraft, *, revision: int, author: Author, reason: str | None = None) -> Plan:
        # The steps are shared with the draft, not copied: steps are never changed in place, and
        # a plan of thousands of steps would otherwise be held twice while the run starts.
        return cls(
            goal=draft.goal,
            steps=list(draft.steps),
            reason=draft.reason or reason or "",
            revision=revision,
            author=author,
        )

    def draft(self) -> PlanDraft:
        return PlanDraft(goal=self.goal, steps=self.steps, reason=self.reason)


def plan_draft_json_schema() -> dict[str, Any]:
    """The JSON schema planner models are asked to follow."""
    return PlanDraft.model_json_schema()
