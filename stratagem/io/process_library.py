"""The process library: named, versioned processes a person runs by name.

Where processes come from, in order (an earlier place wins for the same name and version):
the folders in STRATAGEM_PROCESSES (separated like PATH), `processes/` under STRATAGEM_HOME, and
Python packages' entry points in the group `stratagem.processes`, each naming a folder (a
`pathlib.Path` or a string) or a callable that returns one. A folder holds process files
(`*.yaml`, `*.yml`, `*.json` declaring `inputs:` or `process:`; the files beside them, its inputs
or scripted models, are left alone; see docs/processes.md); a name may have several versions,
each its own file, and the highest version is the one a run takes unless asked for another.

A file that cannot be read is not skipped in silence: `problems` lists it, and asking for that
name says why it is not there.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from stratagem.common.config import stratagem_home
from stratagem.common.errors import PlanFileError
from stratagem.domain.process import ProcessSpec
from stratagem.io.plan_files import is_process_file, load_process_file

PROCESSES_ENV = "STRATAGEM_PROCESSES"
ENTRY_POINT_GROUP = "stratagem.processes"
SUFFIXES = (".yaml", ".yml", ".json")


class ProcessNotFound(LookupError):
    """No process of that name (or version) in the library; the message says what there is."""


def version_key(version: str) -> tuple[Any, ...]:
    """Versions compare as numbers where they are numbers: 10 after 9, 1.10 after 1.9."""
    return tuple(
        (0, int(part), "") if part.isdigit() else (1, 0, part) for part in version.replace("-", ".").split(".")
    )


@dataclass
class ProcessLibrary:
    folders: list[Path]
    specs: dict[str, dict[str, ProcessSpec]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, *, extra: Iterable[str | Path] = ()) -> ProcessLibrary:
        env = env if env is not None else os.environ
        folders = [Path(p).expanduser() for p in extra]
        folders += [Path(p).expanduser() for p in env.get(PROCESSES_ENV, "").split(os.pathsep) if p.strip()]
        home = Path(env["STRATAGEM_HOME"]).expanduser() if env.get("STRATAGEM_HOME") else stratagem_home()
        folders.append(home / "processes")
        library = cls(folders=folders)
        for folder in folders:
            library._read_folder(folder, required=folder != home / "processes")
        for point in entry_points(group=ENTRY_POINT_GROUP):
            try:
                target = point.load()
                found = target() if callable(target) else target
                library._read_folder(Path(found), required=True)
            except Exception as exc:  # a broken package must not hide the rest of the library
                library.problems.append(f"entry point '{point.name}' ({point.value}): {exc}")
        return library

    def _read_folder(self, folder: Path, *, required: bool) -> None:
        if not folder.is_dir():
            if required:
                self.problems.append(f"process folder '{folder}' does not exist")
            return
        for file in sorted(folder.iterdir()):
            if file.suffix.lower() not in SUFFIXES or not file.is_file():
                continue
            try:
                # A process's folder may hold what goes with it (its inputs, answers, scripted
                # models, plain plans): only a file declaring inputs: or process: is a process.
                if not is_process_file(file):
                    continue
                spec = load_process_file(file)
            except PlanFileError as exc:
                self.problems.append(str(exc))
                continue
            versions = self.specs.setdefault(spec.name, {})
            if spec.version in versions:
                continue  # the earlier place wins
            versions[spec.version] = spec

    def names(self) -> list[str]:
        return sorted(self.specs)

    def versions(self, name: str) -> list[ProcessSpec]:
        """Every version of `name`, oldest first."""
        return [self.specs[name][v] for v in sorted(self.specs.get(name, {}), key=version_key)]

    def latest(self) -> list[ProcessSpec]:
        return [self.versions(name)[-1] for name in self.names()]

    def get(self, name: str, version: str | None = None) -> ProcessSpec:
        versions = self.specs.get(name)
        if not versions:
            broken = [p for p in self.problems if f"/{name}." in p or f"'{name}" in p]
            if broken:
                raise ProcessNotFound(f"process '{name[:64]}' cannot be read: {broken[0]}")
            known = ", ".join(self.names()[:20]) or "none"
            where = ", ".join(str(f) for f in self.folders[:4])
            raise ProcessNotFound(f"no process called '{name[:64]}' (processes: {known}; looked in {where})")
        if version is None:
            return self.versions(name)[-1]
        if version not in versions:
            have = ", ".join(s.version for s in self.versions(name))
            raise ProcessNotFound(f"process '{name}' has no version '{version[:64]}' (its versions: {have})")
        return versions[version]
