"""`scripted`: a deterministic offline model that reads its responses from a YAML or JSON file.

    planner:                 # planner responses, in the order the run asks for them
      - plan: {goal: ..., steps: [...]}     # a plan, sent as JSON text
      - text: "not json"                    # raw text (useful to exercise repairs)
    executor:                # executor responses by step id
      draft_email: "Dear ..."               # the same text on every attempt
      classify:                             # one entry per attempt; the last one repeats
        - fail: "upstream timeout"          # this attempt fails (retryable)
        - json: {label: "urgent"}           # a JSON value, sent as JSON text
    synthesis: "All done."   # the final synthesis, if the run asks for one

Any entry may carry `usage: {input_tokens: N, output_tokens: M}`; otherwise the usage is an
estimate of four characters per token, so budgets and costs see realistic figures.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from ..errors import ModelConfigError, ModelOutputError
from .base import ModelCallError, ModelRequest, ModelResponse, Purpose, Usage


class ScriptedModel:
    def __init__(self, path: str):
        self.name = f"scripted:{path}"
        self.path = Path(path)
        self._script = _load(self.path)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        entry = self._entry(request)
        if isinstance(entry, dict) and "fail" in entry:
            raise ModelCallError(f"scripted failure: {entry['fail']}")
        text = _text(entry, self.path)
        usage = _usage(entry, request, text)
        return ModelResponse(text=text, model=self.name, usage=usage)

    def _entry(self, request: ModelRequest) -> Any:
        if request.purpose is Purpose.plan:
            responses = self._script.get("planner") or []
            if request.call_index >= len(responses):
                raise ModelOutputError(
                    f"scripted model {self.path} has {len(responses)} planner response(s), "
                    f"but the run asked for planner response #{request.call_index + 1}"
                )
            return responses[request.call_index]
        if request.purpose is Purpose.synthesize:
            if "synthesis" not in self._script:
                raise ModelOutputError(f"scripted model {self.path} has no 'synthesis' response")
            return self._script["synthesis"]
        executor = self._script.get("executor") or {}
        if request.step_id not in executor:
            raise ModelOutputError(f"scripted model {self.path} has no executor response for step '{request.step_id}'")
        entry = executor[request.step_id]
        if isinstance(entry, list):
            if not entry:
                raise ModelOutputError(f"scripted model {self.path}: executor response for '{request.step_id}' is empty")
            return entry[min(request.attempt, len(entry)) - 1]
        return entry


def _load(path: Path) -> dict[str, Any]:
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ModelConfigError(f"scripted model file '{path}' does not exist") from None
    except OSError as exc:
        raise ModelConfigError(f"cannot read scripted model file '{path}': {exc.strerror}") from None
    try:
        data = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise ModelConfigError(f"scripted model file '{path}' is not valid YAML/JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ModelConfigError(f"scripted model file '{path}' must hold a mapping with planner/executor/synthesis keys")
    unknown = set(data) - {"planner", "executor", "synthesis"}
    if unknown:
        raise ModelConfigError(f"scripted model file '{path}' has unknown keys: {', '.join(sorted(unknown))}")
    if not isinstance(data.get("planner", []), list):
        raise ModelConfigError(f"scripted model file '{path}': 'planner' must be a list of responses")
    if not isinstance(data.get("executor", {}), dict):
        raise ModelConfigError(f"scripted model file '{path}': 'executor' must map step ids to responses")
    return data


def _text(entry: Any, path: Path) -> str:
    if isinstance(entry, str):
        return entry
    if isinstance(entry, dict):
        if "text" in entry:
            return str(entry["text"])
        for key in ("plan", "json"):
            if key in entry:
                return json.dumps(entry[key], default=str)
    raise ModelConfigError(f"scripted model file '{path}': a response must be text or a mapping with text, plan, json or fail")


def _usage(entry: Any, request: ModelRequest, text: str) -> Usage:
    if isinstance(entry, dict) and isinstance(entry.get("usage"), dict):
        return Usage.model_validate(entry["usage"])
    prompt_chars = sum(len(m.content) for m in request.messages)
    return Usage(input_tokens=max(1, prompt_chars // 4), output_tokens=max(1, len(text) // 4))
