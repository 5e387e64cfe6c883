"""Guards on the shape of the code: every module of `stratagem` is on docs/architecture.md's map,
so a newcomer who reads the map finds where a behaviour lives."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
ARCHITECTURE = ROOT / "docs" / "architecture.md"


def stratagem_modules() -> list[str]:
    """Every module of the package but `__init__` and `__main__`, as a path from the repository's
    root; the modules behind the `stratagem/workflows` and `stratagem/activities` links by their
    own folders (`workflows/core.py`), which is how the map names them."""
    package = ROOT / "stratagem"
    found = []
    # os.walk-style recursion by hand: Path.rglob does not follow the two links on Python 3.11.
    folders = [package]
    while folders:
        folder = folders.pop()
        for path in sorted(folder.iterdir()):
            if path.is_dir() and (path / "__init__.py").exists():
                folders.append(path)
            elif path.suffix == ".py" and path.stem not in ("__init__", "__main__"):
                relative = path.relative_to(package)
                top = relative.parts[0]
                found.append(str(relative) if top in ("workflows", "activities") else f"stratagem/{relative}")
    return sorted(found)


def map_lines() -> list[str]:
    """The lines of the map: the section "Where things live" to the end of the page."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    return text.split("## Where things live", 1)[1].splitlines()


def named(module: str, lines: list[str]) -> bool:
    """Whether a line of the map names `module`: its path in backticks (`stratagem/plan.py`), or
    its file name in backticks on a line that names its folder (`stratagem/models/` or another of
    its modules by path), as in "`stratagem/models/`: the interface in `base.py`"."""
    folder, _, name = module.rpartition("/")
    for line in lines:
        tokens = set(re.findall(r"`([^`]+)`", line))
        if module in tokens:
            return True
        if f"{folder}/" in tokens or any(
            token.startswith(f"{folder}/") and "/" not in token[len(folder) + 1 :] for token in tokens
        ):
            if name in tokens:
                return True
    return False


def test_the_module_list_sees_through_the_links():
    modules = stratagem_modules()
    assert "workflows/stratagem_run.py" in modules and "activities/planning.py" in modules
    assert "stratagem/plan.py" in modules and "stratagem/models/base.py" in modules
    assert not any(m.endswith(("__init__.py", "__main__.py")) for m in modules)


def test_the_rule_reads_a_folder_and_its_file_names_on_one_line():
    lines = ["| models | `stratagem/models/`: the interface in `base.py`, `_http.py` |", "| x | `stratagem/plan.py` |"]
    assert named("stratagem/models/base.py", lines) and named("stratagem/plan.py", lines)
    assert not named("stratagem/models/scripted.py", lines)
    assert not named("stratagem/base.py", lines)  # a file name counts only beside its own folder
    assert not named("stratagem/tools/base.py", ["`stratagem/tools/builtin/` and `base.py`"])


def test_every_module_is_on_the_architecture_map():
    lines = map_lines()
    missing = [module for module in stratagem_modules() if not named(module, lines)]
    assert not missing, (
        "docs/architecture.md's map (## Where things live) does not name these modules; add a line"
        " saying what each does, by its path in backticks (or its file name beside its folder's):\n"
        + "\n".join(missing)
    )
