"""An eval set: goals to plan, each with what a good plan looks like.

    tools: [examples/vendor_onboarding/tools.py]   # the catalogue plans are written against
    cases:
      - id: acme                                   # optional: default case-1, case-2...
        goal: Onboard ACME Supplies as a vendor
        inputs: {vendor: ACME Supplies GmbH}      # optional: the run's inputs, shown to the planner
        reference: plan.yaml                       # optional: a plan file (relative to the set) or an inline plan
        checks:                                    # optional
          - uses: create_vendor_record             # some step calls this tool
          - asks_before: schedule_payment          # a human step (or an approval) comes before it
          - nothing_after: schedule_payment        # no step depends on it, directly or not
          - avoids: delete_vendor                  # no step calls it

A JSONL set holds one case a line (the same fields), and takes its tools from the command line.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from stratagem.domain.catalog import ToolCatalog
from stratagem.domain.plan import PlanDraft


class Check(BaseModel):
    """One thing a plan must do; exactly one field is set. A tool is named by its tool name; a
    step kind (`human`, `llm`) may stand for a tool where a check names one."""

    model_config = ConfigDict(extra="forbid")

    uses: str | None = Field(default=None, description="Some step calls this tool (or is of this kind).")
    avoids: str | None = Field(default=None, description="No step calls this tool (or is of this kind).")
    asks_before: str | None = Field(
        default=None, description="Every step calling this tool has a human step, or waits for approval, before it."
    )
    nothing_after: str | None = Field(
        default=None, description="No step depends, directly or not, on a step calling this tool."
    )


class EvalCase(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1)
    goal: str = Field(min_length=1)
    inputs: dict[str, Any] = Field(default_factory=dict)
    reference: PlanDraft | None = None
    checks: list[Check] = Field(default_factory=list)
    catalog: ToolCatalog | None = Field(
        default=None, description="The catalogue this goal is planned against, where it is its own (a recorded run's)."
    )


class EvalSet(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    tools: list[str] = Field(default_factory=list, description="Tool modules (files or module names).")
    cases: list[EvalCase] = Field(min_length=1)
