"""Mending a model's plan before it is validated: what the engine can put right without asking again.

Small models name steps carelessly: two steps `write`, an id with a space in it, a dependency on
`fetch_page` when the step is `fetch-page`, or on "2", the second step. Each costs a repair call
(tens of seconds on a CPU) though the intent is plain. So the engine assigns the ids: it keeps a
model's id when it is valid and unique, and otherwise makes one from it (or from the title, or
the tool), unique by a suffix. A dependency then names a step by its id, its position (1 for the
first step), its original id, or an id one slip away (`difflib`, most of the characters right);
anything else stays as written, and validation reports it as before. References in strings
(`${old.field}`) follow the renamed ids. Every change is one line in the outcome's `repairs`,
which the plan's reviewer and `stratagem eval` see.

`close_cut_answer` salvages an answer cut off mid-plan (at its output cap or its deadline): the
steps written whole, in a closed JSON object, without the repetitions a model that runs on
writes until it is stopped.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable
from typing import Any

from stratagem.domain.plan import STEP_ID_PATTERN

_VALID_ID = re.compile(STEP_ID_PATTERN)
_POSITION = re.compile(r"^\s*(?:step\s*[_#-]?\s*)?(\d{1,4})\s*$", re.I)
_REFERENCE = re.compile(r"(?<!\$)\$\{([^}.]+)((?:\.[^}]*)?)\}")  # not `$${...}`, a literal


def mend_steps(data: dict[str, Any], *, positional: bool = False) -> list[str]:
    """Give `data["steps"]` valid, unique ids and resolvable dependencies, in place; what changed.
    `positional`: the model named steps by their places ("step2", planner_schema's `positional`),
    which then come before any id it wrote that looks like one."""
    steps = data.get("steps")
    if not isinstance(steps, list):
        return []
    entries = [s for s in steps if isinstance(s, dict)]
    notes: list[str] = []
    taken: set[str] = set()
    renamed: dict[str, str] = {}  # an original id -> the id of the first step that had it
    final: list[str] = []
    for position, step in enumerate(entries, start=1):
        original = step.get("id")
        new = _unique(_id_for(step, position), taken)
        taken.add(new)
        final.append(new)
        if original != new:
            step["id"] = new
            if original is not None or not positional:  # a first plan's ids are the engine's to make
                shown = json.dumps(original) if original is not None else "no id"
                notes.append(f"step {position} had {shown}: its id is '{new}'")
        if isinstance(original, str) and original not in renamed:
            renamed[original] = new
    tools = _steps_by_tool(entries, final)
    for position, step in enumerate(entries, start=1):
        depends = step.get("depends_on")
        if depends is None:
            continue
        if isinstance(depends, (str, int)) and not isinstance(depends, bool):
            depends = [depends]
        if not isinstance(depends, list):
            continue  # validation says what is wrong with it
        resolved: list[Any] = []
        for entry in depends:
            target = _resolve(entry, final, renamed, tools, own=final[position - 1], positional=positional)
            if target is None:
                resolved.append(entry)
                continue
            by_place = positional and isinstance(entry, str) and _POSITION.match(entry) is not None
            if target != entry and not by_place:
                notes.append(f"step '{final[position - 1]}' depended on {json.dumps(entry)}: read as '{target}'")
            if target != final[position - 1] and target not in resolved:
                resolved.append(target)
        step["depends_on"] = resolved
    for position, step in enumerate(entries, start=1):

        def named(name: str, own: str = final[position - 1]) -> str:
            if name == "inputs":  # a process's inputs, never a step
                return name
            target = _resolve(name, final, renamed, tools, own=own, positional=positional)
            return target if target is not None else name

        for key in ("args", "instructions"):
            if key in step:
                step[key] = _rename_references(step[key], named)
    return notes


def _id_for(step: dict[str, Any], position: int) -> str:
    """The step's own id if valid, else one made from it, its title or its tool."""
    for source in (step.get("id"), step.get("title"), step.get("tool"), step.get("kind")):
        if isinstance(source, (str, int)) and not isinstance(source, bool):
            text = str(source)
            if _VALID_ID.match(text):
                return text
            words = re.findall(r"[A-Za-z0-9]+", text)[:4]  # a title's first words name it well enough
            slug = "_".join(words)[:40].lower()
            if slug and not slug[0].isdigit() and slug[0] != "-":
                return slug
    return f"step_{position}"


def _unique(candidate: str, taken: set[str]) -> str:
    if candidate not in taken:
        return candidate
    number = 2
    while f"{candidate[:60]}_{number}" in taken:
        number += 1
    return f"{candidate[:60]}_{number}"


def _steps_by_tool(entries: list[dict[str, Any]], ids: list[str]) -> dict[str, list[str]]:
    by_tool: dict[str, list[str]] = {}
    for step, sid in zip(entries, ids, strict=True):
        if isinstance(step.get("tool"), str):
            by_tool.setdefault(step["tool"], []).append(sid)
    return by_tool


def _resolve(
    entry: Any,
    ids: list[str],
    renamed: dict[str, str],
    tools: dict[str, list[str]],
    *,
    own: str,
    positional: bool = False,
) -> str | None:
    """The id `entry` stands for, or None when it cannot be told."""
    if isinstance(entry, bool) or not isinstance(entry, (str, int)):
        return None
    text = str(entry).strip()
    position = _POSITION.match(text)
    at = int(position[1]) if position and 1 <= int(position[1]) <= len(ids) else None
    if positional and at is not None:
        return ids[at - 1]
    if text in ids:
        return text
    if text in renamed:
        return renamed[text]
    if at is not None:
        return ids[at - 1]
    users = [sid for sid in tools.get(text, []) if sid != own]
    if len(users) == 1:  # small models write the tool a step calls for the step
        return users[0]
    slug = re.sub(r"[^A-Za-z0-9_-]+", "_", text).strip("_-").lower()
    for sid in ids:
        if sid.lower() == slug or sid.replace("-", "_").lower() == slug.replace("-", "_"):
            return sid
    close = difflib.get_close_matches(text, [sid for sid in ids if sid != own], n=2, cutoff=0.8)
    return close[0] if len(close) == 1 else None


def _rename_references(value: Any, named: Callable[[str], str]) -> Any:
    """`value` with each `${name...}` naming the step `named(name)` says it stands for."""
    if isinstance(value, str):
        return _REFERENCE.sub(lambda m: f"${{{named(m[1])}{m[2]}}}", value)
    if isinstance(value, dict):
        return {k: _rename_references(v, named) for k, v in value.items()}
    if isinstance(value, list):
        return [_rename_references(v, named) for v in value]
    return value


def close_cut_answer(text: str) -> tuple[dict[str, Any] | None, int]:
    """The plan in an answer cut off mid-way: its goal and reason and the steps written whole, in
    order, each only once (a step doing what an earlier one did, whatever its id, title and
    dependencies, is a model running on); and how many repeats were left out. None when not even the start of a plan can be read."""
    start = text.find("{")
    if start < 0:
        return None, 0
    decoder = json.JSONDecoder()
    body = text[start:]
    goal, reason = _field(body, "goal"), _field(body, "reason")
    steps_at = re.search(r'"steps"\s*:\s*\[', body)
    if steps_at is None:
        return None, 0
    position = steps_at.end()
    steps: list[dict[str, Any]] = []
    seen: set[str] = set()
    repeats = 0
    while True:
        while position < len(body) and body[position] in " \t\r\n,":
            position += 1
        if position >= len(body) or body[position] != "{":
            break
        try:
            step, position = decoder.raw_decode(body, position)
        except ValueError:
            break  # the step the answer was cut in
        if not isinstance(step, dict):
            break
        what = {k: v for k, v in step.items() if k not in ("id", "title", "depends_on")}
        key = json.dumps(what, sort_keys=True, default=str)
        if key in seen:
            repeats += 1
            continue
        seen.add(key)
        steps.append(step)
    if not steps:
        return None, repeats
    plan: dict[str, Any] = {"goal": goal or "", "steps": steps}
    if reason:
        plan["reason"] = reason
    return plan, repeats


def _field(body: str, name: str) -> str | None:
    """A top-level string field's value, when it was written whole before the steps."""
    match = re.search(rf'"{name}"\s*:\s*("(?:[^"\\]|\\.)*")', body)
    if match is None:
        return None
    try:
        value = json.loads(match[1])
    except ValueError:
        return None
    return value if isinstance(value, str) else None
