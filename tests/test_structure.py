"""Guards on the shape of the code: every module of `stratagem` is on docs/architecture.md's map,
so a newcomer who reads the map finds where a behaviour lives; and no source file grows past 450
lines, where one module has usually become two concepts (issue #37 found six such files)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
ARCHITECTURE = ROOT / "docs" / "architecture.md"
MAX_LINES = 450


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
    """Whether a line of the map names `module`: its path in backticks (`stratagem/domain/plan.py`), or
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
    assert "stratagem/domain/plan.py" in modules and "stratagem/models/base.py" in modules
    assert not any(m.endswith(("__init__.py", "__main__.py")) for m in modules)


def test_the_rule_reads_a_folder_and_its_file_names_on_one_line():
    lines = [
        "| models | `stratagem/models/`: the interface in `base.py`, `_http.py` |",
        "| x | `stratagem/domain/plan.py` |",
    ]
    assert named("stratagem/models/base.py", lines) and named("stratagem/domain/plan.py", lines)
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


def tracked_sources() -> list[Path]:
    """The Python files git tracks, but the tests' (their fixtures and scenarios run long by
    nature): the package, workflows, activities, the bench, the examples, worker.py. `git
    ls-files` is a process, but a quick one that needs no server."""
    listed = subprocess.run(["git", "ls-files", "-z", "*.py"], cwd=ROOT, capture_output=True, text=True)
    if listed.returncode != 0:
        pytest.skip(f"not a git checkout: {listed.stderr.strip()}")
    names = [name for name in listed.stdout.split("\0") if name and not name.startswith("tests/")]
    return [ROOT / name for name in names if (ROOT / name).is_file()]


def test_the_sources_include_the_package_and_the_links_targets_not_the_tests():
    sources = {str(path.relative_to(ROOT)) for path in tracked_sources()}
    assert {"stratagem/domain/plan.py", "workflows/core.py", "activities/planning.py", "bench/common.py"} <= sources
    assert not any(name.startswith("tests/") for name in sources)


def test_no_source_file_is_over_450_lines():
    lengths = {path: len(path.read_text(encoding="utf-8").splitlines()) for path in tracked_sources()}
    long = sorted((str(path.relative_to(ROOT)), n) for path, n in lengths.items() if n > MAX_LINES)
    assert not long, f"over {MAX_LINES} lines; split each along a seam (one concept per module):\n" + "\n".join(
        f"{name}: {n} lines" for name, n in long
    )
