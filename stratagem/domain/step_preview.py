"""What a gated step will run, as its approver is shown it: a tool step's arguments and an llm
step's instructions and tools, with every reference filled from the outputs before it and
credentials masked, and the digest of the unmasked values an approval is bound to.

The digest is worked out by the same function when the approval is asked and again when the
step is dispatched, so a step never runs with values other than those approved: a revision or a
repaired input that changes them asks again (workflows/waits.py, workflows/step_runner.py).

A reference into an output kept in the store cannot be filled here (only an activity reads the
store): it is shown as written (the others beside it are filled), beside a description of that output, and the digest covers the
stored output's reference, whose sha256 fixes its content.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

from pydantic import Field

from stratagem.domain.compact import CompactModel
from stratagem.domain.plan import Step, StepKind
from stratagem.domain.redaction import masked, redact
from stratagem.domain.references import references_in, resolve, resolve_step
from stratagem.domain.stored import describe, is_stored


class StepPreview(CompactModel):
    """A gated step as it will run (PendingDecision.preview)."""

    tool: str | None = Field(default=None, description="A tool step's tool.")
    args: dict[str, Any] | None = Field(
        default=None, description="A tool step's arguments, references filled, credentials masked; every one of them."
    )
    instructions: str | None = Field(
        default=None, description="An llm step's instructions, references filled, credentials masked."
    )
    tools: list[str] = Field(default_factory=list, description="The tools an llm step may call.")
    stored: dict[str, str] = Field(
        default_factory=dict,
        description="Referenced outputs kept in the store, by step id, described: their references are shown "
        "as written and filled by the step's activity from exactly that content.",
    )
    digest: str = Field(description="SHA-256 of what will run (canonical JSON, unmasked): an approval names it.")

    def lines(self) -> list[str]:
        """What will run, one line per value, in full (a terminal folds long lines, nothing cuts them)."""
        out: list[str] = []
        if self.tool is not None:
            out.append(f"{self.tool}(")
            out += [
                f"  {_key(key)}={json.dumps(value, ensure_ascii=False)}" for key, value in (self.args or {}).items()
            ]
            out.append(")")
        if self.instructions is not None:
            out.append(f"instructions: {self.instructions}")
            out.append(f"tools: {', '.join(self.tools) or 'none'}")
        out += [f"${{{sid}}} is {text}" for sid, text in self.stored.items()]
        return out


_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


def _key(key: str) -> str:
    """An argument's name as shown: quoted unless plain, so no name can pass for another line."""
    return key if _PLAIN_KEY.fullmatch(key) else json.dumps(key, ensure_ascii=False)


def preview(step: Step, outputs: Mapping[str, Any]) -> StepPreview:
    """`step` as it will run on `outputs`. ReferenceResolutionError if a reference names nothing."""
    referenced = {ref.step_id for ref in references_in(step.instructions, step.args)}
    stored = {sid: outputs[sid] for sid in sorted(referenced) if is_stored(outputs.get(sid))}
    if stored:  # the rest is filled; what reads a stored output is shown as written, beside it
        args, instructions = resolve(dict(step.args), outputs, stored), str(resolve(step.instructions, outputs, stored))
    else:
        args, instructions = resolve_step(step.args, step.instructions, outputs)
    exact: dict[str, Any] = {"kind": step.kind.value, "stored": stored}
    shown = StepPreview(digest="", stored={sid: describe(ref) for sid, ref in stored.items()})
    if step.kind is StepKind.tool:
        exact |= {"tool": step.tool, "args": args}
        shown.tool, shown.args = step.tool, masked(args)
    else:
        exact |= {"instructions": instructions, "tools": list(step.tools)}
        shown.instructions, shown.tools = redact(instructions), list(step.tools)
    text = json.dumps(exact, ensure_ascii=False, default=str, sort_keys=True, separators=(",", ":"))
    shown.digest = hashlib.sha256(text.encode()).hexdigest()
    return shown
