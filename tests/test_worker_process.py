"""`python worker.py` as its own process, configured only through the environment."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from support.plans import GREETING, step

from stratagem.client import start_run
from stratagem.domain.plan import Author, AuthorKind, PlanDraft
from stratagem.domain.run_types import ApproveInput, Phase, RunInput, RunOptions

pytestmark = pytest.mark.system

ROOT = Path(__file__).resolve().parent.parent


async def test_worker_script_runs_a_plan_from_the_environment(dev_env, tmp_path):
    task_queue = f"proc-{uuid.uuid4().hex[:8]}"
    workspace = tmp_path / "ws"
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": dev_env.client.service_client.config.target_host,
        "TEMPORAL_NAMESPACE": "default",
        "TEMPORAL_TASK_QUEUE": task_queue,
        "STRATAGEM_WORKSPACE": str(workspace),
    }
    worker = subprocess.Popen(
        [sys.executable, "worker.py", "--tools", "tests/support/fixture_tools.py"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        plan = PlanDraft.model_validate(
            {
                "goal": "process",
                "steps": [
                    *GREETING["steps"],
                    step("save", "write_file", ["greet"], path="out.txt", content="${greet}"),
                ],
            }
        )
        run = await start_run(
            dev_env.client,
            RunInput(plan=plan, author=Author(kind=AuthorKind.human, name="ops"), options=RunOptions()),
            task_queue=task_queue,
        )
        for _ in range(200):
            if (await run.status()).phase is Phase.awaiting_approval:
                break
            await asyncio.sleep(0.05)
        await run.approve(ApproveInput(by="ops", revision=1))
        result = await asyncio.wait_for(run.result(), timeout=60)
        assert result.status is Phase.succeeded
        assert (workspace / "out.txt").read_text() == "Hello, Ada!"
        calls = [json.loads(line) for line in (workspace / "calls.jsonl").read_text().splitlines()]
        assert calls[0]["key"] == f"{run.id}/{run.handle.first_execution_run_id}/note/r1"
    finally:
        worker.terminate()
        output, _ = worker.communicate(timeout=30)
    assert f"task_queue={task_queue}" in output


def test_worker_script_reports_a_bad_tool_module_in_one_line(tmp_path):
    done = subprocess.run(
        [sys.executable, "worker.py", "--tools", "no_such_tools_module"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "TEMPORAL_ADDRESS": "127.0.0.1:1"},
    )
    assert done.returncode == 2
    assert "cannot import tool module 'no_such_tools_module'" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_worker_process_caps_its_malloc_arenas_unless_the_environment_decides(monkeypatch):
    """glibc's mallopt takes the cap (the worker's peak memory on a long plan: bench long_horizon);
    MALLOC_ARENA_MAX, when set, is glibc's to read, and the worker leaves it alone."""
    from stratagem.worker import limit_malloc_arenas

    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert limit_malloc_arenas() is False
    monkeypatch.delenv("MALLOC_ARENA_MAX")
    code = "from stratagem.worker import limit_malloc_arenas as cap; import sys; sys.exit(0 if cap() else 1)"
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    assert subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT).returncode == 0
