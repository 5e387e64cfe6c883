"""`scripted`: a deterministic offline model that reads its responses from a YAML or JSON file.

    planner:                 # planner responses, in the order the run asks for them
      - plan: {goal: ..., steps: [...]}     # a plan, sent as JSON text
      - text: "not json"                    # raw text (useful to exercise repairs)
    executor:                # executor responses by step id
      draft_email: "Dear ..."               # the same text on every call
      classify:                             # one entry per call; the last one repeats
        - fail: "upstream timeout"          # this call fails (retryable)
        - json: {label: "urgent"}           # a JSON value, sent as JSON text
      look_up:
        - call: {tool: read_file, args: {path: vendors.csv}}   # a tool call (also calls: [...])
        - text: "Vendor found."             # the answer once the tool's result is back
    synthesis: "All done."   # the final synthesis, if the run asks for one
    verifier:                # verdicts on steps with success_criteria, by step id, one per check
      look_up:
        - {met: false, reason: "no vendor id in the answer"}
        - {met: true, reason: "the vendor id is there"}
      goal: {met: true, reason: "the report is written"}   # the final check, if the run asks for one

A step with success criteria and no `verifier` entry is judged met (the verdict says so): an
example's script need not spell out the checks it does not exercise.

An executor's calls are counted across attempts: the entry used is the number of model turns
the step's conversation already has plus the number of failed attempts before this one.

Any entry may carry `usage: {input_tokens: N, output_tokens: M}`; otherwise the usage is an
estimate of four characters per token, so budgets and costs see realistic figures.

A request's `max_output_tokens` is honoured as a real model honours it: an answer longer than
that is cut off there (its text at four characters a token, its tool calls' arguments too), it
reports that many output tokens, and its stop reason is `length`. The input it will report it
counts exactly beforehand (`count_input_tokens`), as a provider with its tokenizer at hand could,
so a run's budget holds its calls to the figures its script gives.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import yaml

from stratagem.common.errors import ModelConfigError, ModelOutputError
from stratagem.models.base import ModelCallError, ModelRequest, ModelResponse, Purpose, ToolCall, Usage

SCRIPTED_DIRS_ENV = "STRATAGEM_SCRIPTED_DIRS"


class ScriptedModel:
    def __init__(self, path: str):
        self.name = f"scripted:{path}"
        self.path = Path(path)
        self._script = _load(_allowed(self.path))

    async def complete(self, request: ModelRequest) -> ModelResponse:
        entry = self._entry(request)
        if isinstance(entry, dict) and "fail" in entry:
            raise ModelCallError(f"scripted failure: {entry['fail']}")
        calls = _tool_calls(entry, request, self.path)
        text = "" if calls else _text(entry, self.path)
        usage = _usage(entry, request, text or json.dumps([c.model_dump() for c in calls]))
        response = ModelResponse(text=text, model=self.name, usage=usage, tool_calls=calls)
        cap = request.max_output_tokens
        return response if cap is None or usage.output_tokens <= cap else _cut_off(response, cap)

    def count_input_tokens(self, request: ModelRequest) -> int | None:
        """The input tokens the answer to `request` will report, exactly, as a model with its own
        tokenizer at hand could count them (stratagem.models.budgeted); None when it has none."""
        try:
            entry = self._entry(request)
        except ModelOutputError:
            return None  # the call itself says why
        return _usage(entry, request, "").input_tokens

    def _entry(self, request: ModelRequest) -> Any:
        if request.purpose is Purpose.plan:
            responses = self._script.get("planner") or []
            if request.call_index >= len(responses):
                raise ModelOutputError(
                    f"scripted model {self.path} has {len(responses)} planner response(s), "
                    f"but the run asked for planner response #{request.call_index + 1}"
                )
            return responses[request.call_index]
        if request.purpose is Purpose.verify:
            # A step's verdicts by its id; the run's final check under `goal`.
            verdicts = (self._script.get("verifier") or {}).get(request.step_id or "goal")
            if verdicts is None:
                about = f"step {request.step_id}" if request.step_id else "the final check"
                return {"json": {"met": True, "reason": f"{self.path.name} has no verifier response for {about}"}}
            entries = verdicts if isinstance(verdicts, list) else [verdicts]
            if not entries:
                raise ModelOutputError(
                    f"scripted model {self.path}: verifier response for '{request.step_id}' is empty"
                )
            entry = entries[min(request.call_index, len(entries) - 1)]
            return {"json": entry} if isinstance(entry, dict) and "met" in entry else entry
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
                raise ModelOutputError(
                    f"scripted model {self.path}: executor response for '{request.step_id}' is empty"
                )
            return entry[min(request.round + request.attempt, len(entry)) - 1]
        return entry


# Folders this process allows besides STRATAGEM_SCRIPTED_DIRS (allow_dirs).
_allowed_here: list[Path] = []


def allowed_dirs() -> list[Path]:
    """Folders scripted files may be read from: STRATAGEM_SCRIPTED_DIRS, else the worker's folder;
    and those this process was told to allow (`allow_dirs`).

    The file is named by a run, and anyone who can start a run chooses it; without this a run
    naming `scripted:/etc/shadow` had the worker read that file.
    """
    listed = [Path(d).expanduser() for d in os.environ.get(SCRIPTED_DIRS_ENV, "").split(os.pathsep) if d.strip()]
    return list(dict.fromkeys([*(d.resolve() for d in listed or [Path.cwd()]), *_allowed_here]))


def allow_dirs(folders: list[Path]) -> None:
    """Also read scripted files from `folders`, in this process only. `stratagem run` allows the
    folders of the scripted files its own command line named (an example's models.yaml beside its
    plan), for its checks and for the worker it hosts; never a folder a run names."""
    for folder in folders:
        resolved = Path(folder).expanduser().resolve()
        if resolved not in _allowed_here:
            _allowed_here.append(resolved)


def _allowed(path: Path) -> Path:
    resolved = path.expanduser().resolve()  # follows symlinks, so a link cannot lead out
    folders = allowed_dirs()
    if not any(resolved.is_relative_to(folder) for folder in folders):
        shown = os.pathsep.join(str(f) for f in folders)
        raise ModelConfigError(
            f"scripted model file '{path}' is outside the folders scripted files are read from ({shown}); "
            f"set {SCRIPTED_DIRS_ENV} on the worker to allow another folder"
        )
    if resolved.suffix.lower() not in (".yaml", ".yml", ".json"):
        raise ModelConfigError(f"scripted model file '{path}' must end in .yaml, .yml or .json")
    return resolved


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
        # Where, never what: the message must not carry the file's content.
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ModelConfigError(f"scripted model file '{path}' is not valid YAML/JSON{where}") from None
    if not isinstance(data, dict):
        raise ModelConfigError(f"scripted model file '{path}' must hold a mapping with planner/executor/synthesis keys")
    unknown = set(data) - {"planner", "executor", "synthesis", "verifier"}
    if unknown:
        names = ", ".join(str(key)[:40] for key in sorted(unknown, key=str)[:5])  # names, never values
        raise ModelConfigError(f"scripted model file '{path}' has unknown keys: {names}")
    if not isinstance(data.get("planner", []), list):
        raise ModelConfigError(f"scripted model file '{path}': 'planner' must be a list of responses")
    for key in ("executor", "verifier"):
        if not isinstance(data.get(key, {}), dict):
            raise ModelConfigError(f"scripted model file '{path}': '{key}' must map step ids to responses")
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
    raise ModelConfigError(
        f"scripted model file '{path}': a response must be text or a mapping with text, plan, json or fail"
    )


def _tool_calls(entry: Any, request: ModelRequest, path: Path) -> list[ToolCall]:
    if not isinstance(entry, dict) or not ({"call", "calls"} & set(entry)):
        return []
    raw = [entry["call"]] if "call" in entry else entry["calls"]
    calls = []
    for number, call in enumerate(raw if isinstance(raw, list) else [raw]):
        if not isinstance(call, dict) or not isinstance(call.get("tool"), str):
            raise ModelConfigError(f"scripted model file '{path}': a tool call needs 'tool' (a name) and 'args'")
        args = call.get("args", {})
        calls.append(
            ToolCall(
                id=f"call_{request.round}_{number}",
                name=call["tool"],
                arguments=args if isinstance(args, dict) else None,
                raw_arguments="" if isinstance(args, dict) else str(args),
            )
        )
    return calls


def _usage(entry: Any, request: ModelRequest, text: str) -> Usage:
    if isinstance(entry, dict) and isinstance(entry.get("usage"), dict):
        return Usage.model_validate(entry["usage"])
    prompt_chars = sum(len(m.content) for m in request.messages)
    return Usage(input_tokens=max(1, prompt_chars // 4), output_tokens=max(1, len(text) // 4))


def _cut_off(response: ModelResponse, cap: int) -> ModelResponse:
    """`response` as a model stopped at `cap` output tokens writes it: the text cut at four
    characters a token, a tool call's arguments cut likewise (no longer JSON)."""
    chars = cap * 4
    calls = [
        call.model_copy(update={"arguments": None, "raw_arguments": json.dumps(call.arguments)[:chars]})
        if call.arguments is not None
        else call.model_copy(update={"raw_arguments": call.raw_arguments[:chars]})
        for call in response.tool_calls
    ]
    usage = response.usage.model_copy(update={"output_tokens": cap})
    return response.model_copy(
        update={"text": response.text[:chars], "tool_calls": calls, "usage": usage, "stop_reason": "length"}
    )
