"""What changed between two plan revisions, field by field: for `stratagem show --diff`, the
terminal's review of a new revision, and the console's diff against the approved revision."""

from __future__ import annotations

import difflib
import json
from typing import Any

from stratagem.domain.plan import Plan, Step

DIFF_FIELDS = [name for name in Step.model_fields if name != "id"]


def diff_revisions(old: Plan, new: Plan) -> dict[str, Any]:
    """What changed from `old` to `new`: steps added and removed (in plan order), and for each
    step in both, the fields that differ as [old, new] (JSON values, complete)."""
    old_steps = {s.id: s for s in old.steps}
    new_steps = {s.id: s for s in new.steps}
    changed: dict[str, dict[str, list[Any]]] = {}
    for step_id, after in new_steps.items():
        before = old_steps.get(step_id)
        if before is None:
            continue
        a, b = before.model_dump(mode="json"), after.model_dump(mode="json")
        fields = {name: [a[name], b[name]] for name in DIFF_FIELDS if a[name] != b[name]}
        if fields:
            changed[step_id] = fields
    result: dict[str, Any] = {
        "from": old.revision,
        "to": new.revision,
        "added": [s for s in new_steps if s not in old_steps],
        "removed": [s for s in old_steps if s not in new_steps],
        "changed": changed,
        "revisions": [{"revision": p.revision, "author": str(p.author), "reason": p.reason} for p in (old, new)],
    }
    if old.goal != new.goal:
        result["goal"] = [old.goal, new.goal]
    return result


def shown(value: Any) -> str:
    """A value on one line, in full: a reviewer comparing revisions must see the whole change."""
    text = value if isinstance(value, str) else json.dumps(value, default=str, sort_keys=True, ensure_ascii=False)
    return " ".join(text.split())


def diff_lines(diff: dict[str, Any]) -> list[str]:
    """The diff for people: one line per revision, added, removed, and each changed field."""
    lines = []
    for info, word in zip(diff["revisions"], ("from", "to"), strict=False):
        reason = f": {info['reason']}" if info["reason"] else ""
        lines.append(f"{word} revision {info['revision']} by {info['author']}{reason}")
    if "goal" in diff:
        lines.append(f"goal: {shown(diff['goal'][0])} → {shown(diff['goal'][1])}")
    if not (diff["added"] or diff["removed"] or diff["changed"]):
        lines.append("no step changed")
    for step_id in diff["added"]:
        lines.append(f"+ {step_id}")
    for step_id in diff["removed"]:
        lines.append(f"- {step_id}")
    for step_id, fields in diff["changed"].items():
        lines.append(f"~ {step_id}")
        for name, (before, after) in fields.items():
            lines.extend(f"    {change}" for change in leaf_changes(before, after, name))
    return lines


def leaf_changes(before: Any, after: Any, path: str) -> list[str]:
    """Each changed value inside `before` -> `after`, by its path: the keys and list items that
    were added, removed or changed, old -> new. A reviewer must see the item a list lost, not two
    long lines that look alike."""
    if isinstance(before, dict) and isinstance(after, dict):
        changes = []
        for key in list(before) + [k for k in after if k not in before]:
            where = f"{path}.{key}"
            if key not in after:
                changes.append(f"{where}: removed {shown(before[key])}")
            elif key not in before:
                changes.append(f"{where}: added {shown(after[key])}")
            elif before[key] != after[key]:
                changes.extend(leaf_changes(before[key], after[key], where))
        return changes
    if isinstance(before, list) and isinstance(after, list):
        if len(before) == len(after):
            return [
                c
                for i, (a, b) in enumerate(zip(before, after, strict=False))
                if a != b
                for c in leaf_changes(a, b, f"{path}[{i}]")
            ]
        keys = (
            [json.dumps(item, sort_keys=True, default=str) for item in before],
            [json.dumps(item, sort_keys=True, default=str) for item in after],
        )
        changes = []
        for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=keys[0], b=keys[1], autojunk=False).get_opcodes():
            if op == "equal":
                continue
            if op == "replace" and i2 - i1 == j2 - j1:
                for offset in range(i2 - i1):
                    changes.extend(leaf_changes(before[i1 + offset], after[j1 + offset], f"{path}[{i1 + offset}]"))
                continue
            changes += [f"{path}[{i}]: removed {shown(before[i])}" for i in range(i1, i2)]
            changes += [f"{path}[{j}]: added {shown(after[j])}" for j in range(j1, j2)]
        return changes
    return [f"{path}: {shown(before)} → {shown(after)}"]
