"""docs/python.md, run as written: every Python block of the page, in order and in one namespace
(as `python -m asyncio` runs them), against the dev server and a real worker. The page's program
reads its server and task queue from the environment, as a reader's does."""

from __future__ import annotations

import ast
import asyncio
import inspect
import re
from pathlib import Path
from typing import Any

import pytest

from stratagem.domain.ledger import EventKind
from stratagem.domain.run_types import Phase

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "python.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def python_blocks(text: str) -> list[tuple[int, str]]:
    """Each ```python block of a Markdown page, with the line it starts on."""
    return [(text[: m.start()].count("\n") + 2, m.group(1)) for m in BLOCK.finditer(text)]


async def run_blocks(blocks: list[tuple[int, str]], namespace: dict[str, Any]) -> None:
    for line, source in blocks:
        code = compile(source, f"{PAGE.name}:{line}", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        outcome = eval(code, namespace)
        if inspect.iscoroutine(outcome):
            await asyncio.wait_for(outcome, timeout=60)


@pytest.mark.unit
def test_the_page_has_a_block_for_each_step_of_the_way():
    sources = "\n".join(source for _, source in python_blocks(PAGE.read_text(encoding="utf-8")))
    for used in ("stratagem.connect(", "stratagem.start_run(", "stratagem.load_plan_file(", "run.stream()"):
        assert used in sources, used
    for used in ("stream(after=", "run.approve(", "run.answer(", "run.result()", "stratagem.get_run("):
        assert used in sources, used


@pytest.mark.system
async def test_every_python_block_of_the_page_runs_against_a_real_server_and_worker(
    dev_env, dev_harness, monkeypatch, capsys
):
    monkeypatch.setenv("TEMPORAL_ADDRESS", dev_env.client.service_client.config.target_host)
    monkeypatch.setenv("TEMPORAL_TASK_QUEUE", dev_harness.task_queue)
    monkeypatch.setenv("STRATAGEM_STORE", str(dev_harness.store.root))  # where this worker stores
    monkeypatch.chdir(ROOT)  # the page names examples/ from the repository's root
    namespace: dict[str, Any] = {"__name__": "__main__"}
    try:
        await run_blocks(python_blocks(PAGE.read_text(encoding="utf-8")), namespace)
    finally:
        if "run" in namespace:
            dev_harness.runs.append(namespace["run"])  # replayed at the end, as every test run is
    printed = capsys.readouterr().out

    run, result = namespace["run"], namespace["result"]
    assert result.status is Phase.succeeded
    note = dev_harness.workspace / "notes" / "2.4.md"
    assert note.read_text() == "Version 2.4 adds signed decisions.\n\nReviewed by Dana Whitfield."
    assert result.outputs["publish"]["path"] == "notes/2.4.md"

    # The stream printed every event once, in order, and ended at the run's end.
    seqs = [int(line.split()[0]) for line in printed.splitlines() if re.match(r"^\s*\d+ [a-z_]+", line)]
    ledger = await run.ledger()
    assert seqs == [event.seq for event in ledger.events] == list(range(1, ledger.event_count + 1))
    assert ledger.events[-1].kind is EventKind.run_succeeded
    # dana's three decisions, each signed with her home key, which the worker trusts.
    # dana's decisions and her answer, each signed with her home key, which the worker trusts.
    assert [(d.action.value, d.step_id, d.by, d.signed_by) for d in ledger.decisions] == [
        ("approve", None, "dana", "dana"),
        ("approve", "publish", "dana", "dana"),
    ]
    [answered] = [event for event in ledger.events if event.kind is EventKind.answer_received]
    assert (answered.actor, answered.data["signed_by"]) == ("dana", "dana")
    assert [event.seq for event in namespace["rest"]] == [ledger.event_count - 1, ledger.event_count]
    assert f"run {run.id} has ended" in printed.splitlines()[-1]


@pytest.mark.unit
def test_every_block_compiles():
    """Fast, and names the block: the run above needs a server."""
    for line, source in python_blocks(PAGE.read_text(encoding="utf-8")):
        compile(source, f"{PAGE.name}:{line}", "exec", flags=ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
