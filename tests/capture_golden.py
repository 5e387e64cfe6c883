"""Capture the golden histories: `python tests/capture_golden.py [SCENARIO ...] [--generation NAME] [--force]`.

Runs each scenario of tests/support/golden_scenarios.py on the time-skipping server and writes
every execution's history to tests/golden/<generation>/<scenario>[-<n>].json. A generation is the
set of histories one version of the workflow code wrote: when a change alters the commands a run
issues (a new row of stratagem.domain.run_levels.Change, at a new RUN_LEVEL), capture a new generation
beside the old ones, which stand for runs already in flight. Existing files are kept unless
--force (see RELIABILITY.md, "Changing the workflow"). The first generation lies directly in
tests/golden/.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
# As pytest does: tests/ on the path for conftest (whose setup the captures run under) and the
# support package; the repository for stratagem from a checkout.
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from conftest import SESSION_HOME, harness_for  # noqa: E402
from support import FIXTURE_TOOLS  # noqa: E402
from support.golden_scenarios import EXTRA_TOOLS, SCENARIOS  # noqa: E402
from temporalio.testing import WorkflowEnvironment  # noqa: E402

from stratagem.client import execution_histories  # noqa: E402
from stratagem.common.signing import Keyring, Signer  # noqa: E402
from stratagem.io.binaries import temporal_test_server  # noqa: E402
from stratagem.io.payloads import stratagem_data_converter  # noqa: E402
from stratagem.tools import ToolRegistry  # noqa: E402

GOLDEN = HERE / "golden"
# The generation today's code writes: `<date>-level<RUN_LEVEL>`, named anew when RUN_LEVEL is raised.
GENERATION = "2026-11-27-level10"
# From level 7 decisions are signed (stratagem.common.signing): the public keys of the home a scenario's
# capture signed with are kept beside its histories (<scenario>.keys), and its replays trust
# exactly those. Each capture signs with keys of its own, so a scenario captured again keeps its own.
KEYS_SUFFIX = ".keys"


async def capture(names: list[str], force: bool, generation: str = GENERATION) -> None:
    target = GOLDEN / generation
    target.mkdir(parents=True, exist_ok=True)
    env = await WorkflowEnvironment.start_time_skipping(
        data_converter=stratagem_data_converter, test_server_existing_path=str(temporal_test_server())
    )
    try:
        for name in names:
            if not force and any(target.glob(f"{name}*.json")):
                print(f"{name}: kept (use --force to capture it again)")
                continue
            with tempfile.TemporaryDirectory() as tmp:
                extra = EXTRA_TOOLS.get(name)
                registry = ToolRegistry.from_modules([FIXTURE_TOOLS, *extra]) if extra else None
                async with harness_for(env, Path(tmp), registry) as harness:
                    runs = await SCENARIOS[name](harness)
                    histories = []
                    for run in runs:
                        histories += await execution_histories(harness.client, run.id)
            keep_keys(target / f"{name}{KEYS_SUFFIX}")
            for number, history in enumerate(histories, start=1):
                suffix = f"-{number}" if len(histories) > 1 else ""
                path = target / f"{name}{suffix}.json"
                path.write_text(
                    json.dumps({"workflow_id": history.workflow_id, "history": history.to_json_dict()}, indent=1) + "\n"
                )
                print(f"{name}: wrote {path.relative_to(HERE.parent)} ({len(history.events)} events)")
    finally:
        await env.shutdown()


def keep_keys(path: Path) -> None:
    """Write the public keys this capture signed with (never a private key) to `path`."""
    keyring = Keyring.of_home(SESSION_HOME)
    lines = sorted(Signer.from_file(key).public_line() for key in keyring.folder.glob("*.key"))
    path.write_text("".join(f"{line}\n" for line in lines))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenarios", nargs="*", choices=[[], *SCENARIOS], help="default: all")
    parser.add_argument("--force", action="store_true", help="overwrite existing golden files")
    parser.add_argument("--generation", default=GENERATION, help=f"folder under tests/golden/ (default: {GENERATION})")
    args = parser.parse_args()
    asyncio.run(capture(args.scenarios or list(SCENARIOS), args.force, args.generation))
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)
