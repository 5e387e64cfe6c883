"""What a new user hit, round 2 (issue #36 item 5): small things, each as the user met it."""

from __future__ import annotations

import httpx
import pytest
from support.cli import TOOLS, acli, write_plan

from stratagem.common.errors import PlanFileError
from stratagem.console import AuthMode, IdentityConfig, create_app
from stratagem.domain.activity_io import LlmStepInput
from stratagem.domain.plan import Step, StepKind
from stratagem.domain.run_types import Phase
from stratagem.io.executor import executor_messages
from stratagem.io.plan_files import parse_plan_data


@pytest.mark.unit
def test_a_model_reads_names_in_their_own_letters():
    """The executor's prompt once said Tom\\u00e1s where the onboarding's buddy is Tomás."""
    step = Step(id="welcome", title="Welcome", kind=StepKind.llm, instructions="Write the email.")
    request = LlmStepInput(
        run_id="r",
        revision=1,
        step=step,
        instructions="Write the email.",
        inputs={"buddy": {"buddy": "Tomás Reyes", "city": "Köln"}},
        model="scripted:x.yaml",
    )
    prompt = executor_messages(request, [])[1].content
    assert "Tomás Reyes" in prompt and "Köln" in prompt and "\\u00" not in prompt


@pytest.mark.workflow
async def test_the_consoles_output_page_shows_letters_not_escapes(harness):
    run = await harness.start(
        {"goal": "g", "steps": [{"id": "city", "title": "City", "tool": "fetch_profile", "args": {"user": "köln"}}]},
        auto_approve=True,
    )
    assert (await run.result()).status is Phase.succeeded
    identity = IdentityConfig(mode=AuthMode.local, secret=b"s", local_user="ops")
    app = create_app(harness.client, identity, store=harness.store)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as http:
        page = await http.get(f"/runs/{run.id}/steps/city/output")
    assert page.status_code == 200 and "köln" in page.text and "\\u00" not in page.text


@pytest.mark.unit
def test_plan_file_errors_come_all_at_once_naming_steps_by_id():
    data = {
        "goal": "g",
        "steps": [
            {"id": "check", "title": "Check", "tool": "x", "risk": "huge"},
            {"tool": "y"},
            {"id": "notify", "title": "Notify", "kind": "robot"},
        ],
    }
    with pytest.raises(PlanFileError) as refused:
        parse_plan_data(data, source="plan file 'p.yaml'")
    message = str(refused.value)
    assert "step 'check' field 'risk'" in message and "step 'notify' field 'kind'" in message
    assert "step #2 field 'id': Field required" in message  # no valid id: named by its place
    assert "\n" not in message


@pytest.mark.system
async def test_status_piped_lays_its_table_out_wide(cli_env, tmp_path):
    """`stratagem status RUN | cat` wrapped the plan table into ten-character columns."""
    env, _ = cli_env
    env = {k: v for k, v in env.items() if k != "COLUMNS"}
    label = "an argument long enough to have wrapped at eighty columns, shown on one line"
    path = write_plan(
        tmp_path / "plan.yaml",
        {"goal": "g", "steps": [{"id": "s", "title": "S", "tool": "record", "args": {"label": label}}]},
    )
    started = await acli("run", *TOOLS, "--plan", path, "--detach", "--id", "piped-status", env=env)
    assert started.returncode == 0, started.stderr
    shown = await acli("status", "piped-status", env=env)
    assert shown.returncode == 0, shown.stderr
    assert label in shown.stdout


@pytest.mark.system
async def test_following_a_run_says_when_a_killed_workers_attempt_is_retried(dev_env, tmp_path):
    """kill -9 of the worker mid-step: nothing said so until the step ended; now `wait` says which
    step's attempt was lost, and why, when its retry starts."""
    import asyncio
    import os
    import signal
    import subprocess
    import sys
    import uuid

    from conftest import keyed_home
    from support import FIXTURE_TOOLS
    from support.cli import ROOT

    from stratagem.client import start_run
    from stratagem.domain.plan import Author, AuthorKind, PlanDraft
    from stratagem.domain.run_types import RunInput, RunOptions

    queue = f"lost-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": dev_env.client.service_client.config.target_host,
        "TEMPORAL_TASK_QUEUE": queue,
        "STRATAGEM_HOME": keyed_home(tmp_path / "home"),
        "STRATAGEM_WORKSPACE": str(tmp_path / "ws"),
        "CLI_CWD": str(tmp_path),
    }

    def worker() -> subprocess.Popen[bytes]:
        command = [sys.executable, "-m", "stratagem.cli", "worker", "--tools", FIXTURE_TOOLS]
        return subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    # A step that works 1 s; its attempt times out (and is retried) 3 s after a worker stops answering.
    steps = [{"id": "work", "title": "Do the work", "tool": "slow", "args": {"label": "w", "seconds": 1}}]
    draft = PlanDraft.model_validate({"goal": "g", "steps": [{**steps[0], "timeout_seconds": 3}]})
    first = worker()
    try:
        run = await start_run(
            dev_env.client,
            RunInput(
                plan=draft, author=Author(kind=AuthorKind.human, name="ops"), options=RunOptions(auto_approve=True)
            ),
            task_queue=queue,
        )
        for _ in range(300):
            if (await run.status()).steps.running:
                break
            await asyncio.sleep(0.05)
        os.kill(first.pid, signal.SIGKILL)
        following = asyncio.create_task(acli("wait", run.id, env=env, timeout=120))
        await asyncio.sleep(5)  # the lost attempt times out, its retry is scheduled and said
        second = worker()
        try:
            waited = await following
        finally:
            second.terminate()
            second.wait(timeout=30)
    finally:
        first.kill()
    assert waited.returncode == 0, waited.stderr
    assert "attempt 1 of step work: Do the work was lost" in waited.stdout + waited.stderr
    assert "attempt 2 starts when a worker takes it" in waited.stdout + waited.stderr
