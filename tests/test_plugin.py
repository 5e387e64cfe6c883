"""StratagemPlugin: one object configures clients, workers and replayers alike. The last test
is the attack it exists for: a worker whose builder names no keys still checks decisions with
the deployment's keys, because the worker takes the plugin from its client."""

from __future__ import annotations

import asyncio
import uuid
import warnings
from pathlib import Path

import pytest
from support import FIXTURE_TOOLS
from support.plans import awaiting
from temporalio.client import WorkflowUpdateFailedError
from temporalio.worker import UnsandboxedWorkflowRunner, Worker, WorkerConfig
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from stratagem.client import connect, start_run
from stratagem.common.config import Settings
from stratagem.common.errors import DecisionRefusedError
from stratagem.common.signing import DecisionPolicy, Signer
from stratagem.common.telemetry import tracing_enabled
from stratagem.domain.plan import Author, AuthorKind, PlanDraft
from stratagem.domain.run_types import ApproveInput, Phase, RunInput
from stratagem.io.store import FileStore
from stratagem.temporal.interceptors import SharedQueues, VerifyDecisions
from stratagem.temporal.plugin import StratagemPlugin, worker_plugins
from stratagem.tools import ToolRegistry
from stratagem.worker import build_worker
from stratagem.workflows import StratagemRun

ALICE = Signer.generate("alice")


@pytest.mark.unit
def test_a_worker_is_configured_to_run_the_workflow_and_check_decisions_after_its_own_interceptors() -> None:
    shared = SharedQueues()
    keys = DecisionPolicy.from_env({"STRATAGEM_APPROVER_KEYS": ALICE.public_line()})
    earlier = VerifyDecisions(DecisionPolicy.from_env({}))  # another plugin's, e.g. the client's
    config: WorkerConfig = {"interceptors": [shared, earlier]}

    out = StratagemPlugin(decision_policy=keys, strict_sandbox=False).configure_worker(config)
    assert isinstance(out["workflow_runner"], UnsandboxedWorkflowRunner)
    interceptors = list(out["interceptors"])
    assert interceptors[0] is shared
    assert (
        isinstance(interceptors[1], VerifyDecisions) and interceptors[1].policy is keys
    )  # the last plugin's keys decide
    tracing = ["OpenTelemetryInterceptor"] if tracing_enabled() else []  # the suite traces (conftest)
    assert [type(i).__name__ for i in interceptors[2:]] == tracing

    strict = StratagemPlugin(strict_sandbox=True).configure_replayer({"interceptors": []})
    assert isinstance(strict["workflow_runner"], SandboxedWorkflowRunner)


@pytest.mark.workflow
async def test_a_worker_needs_its_own_plugin_only_when_its_client_has_none_or_other_keys_are_asked(time_env) -> None:
    bare = time_env.client
    assert [type(p) for p in worker_plugins(bare)] == [StratagemPlugin]
    address = bare.service_client.config.target_host
    client = await connect(Settings(address=address, namespace=bare.namespace))
    assert any(isinstance(p, StratagemPlugin) for p in client.config()["plugins"])
    assert worker_plugins(client) == []
    keys = DecisionPolicy.from_env({})
    # Other keys on a connected client: only the decision check, in its place, and no second
    # StratagemPlugin (Temporal warns that such a plugin runs twice).
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        worker = Worker(
            client,
            task_queue=f"tq-{uuid.uuid4().hex[:8]}",
            workflows=[StratagemRun],
            plugins=worker_plugins(client, keys),
        )
    checks = [i for i in worker.config(active_config=True)["interceptors"] if isinstance(i, VerifyDecisions)]
    assert [check.policy for check in checks] == [keys]


@pytest.mark.workflow
async def test_a_worker_on_a_connected_client_checks_decisions_with_the_deployments_keys(
    time_env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STRATAGEM_APPROVER_KEYS", ALICE.public_line())
    monkeypatch.setenv("STRATAGEM_STORE", str(tmp_path / "store"))
    address = time_env.client.service_client.config.target_host
    client = await connect(Settings(address=address, namespace=time_env.client.namespace))
    task_queue = f"tq-{uuid.uuid4().hex[:8]}"
    registry = ToolRegistry.from_modules([FIXTURE_TOOLS])
    plan = PlanDraft.model_validate(
        {"goal": "g", "steps": [{"id": "a", "title": "a", "tool": "record", "args": {"label": "a"}}]}
    )
    async with build_worker(
        client, task_queue=task_queue, registry=registry, workspace=tmp_path / "ws", store=FileStore(tmp_path / "store")
    ):
        run = await start_run(
            client,
            RunInput(plan=plan, author=Author(kind=AuthorKind.human, name="alice")),
            task_queue=task_queue,
            run_id=f"test-{uuid.uuid4().hex[:10]}",
        )
        for _ in range(200):
            if awaiting(await run.status()):
                break
            await asyncio.sleep(0.05)
        with pytest.raises(WorkflowUpdateFailedError) as claim:  # a claim, not a signature
            await run.handle.execute_update("approve", ApproveInput(by="alice", revision=1))
        assert "only signed decisions" in str(claim.value.cause)
        with pytest.raises(
            DecisionRefusedError, match="does not match"
        ):  # the home's own alice is not the deployment's
            await run.approve(ApproveInput(by="alice", revision=1))
        assert (await run.status()).phase is Phase.awaiting_approval
        signed = await run.approve(
            ALICE.sign(run.id, "approve", ApproveInput(by="alice", revision=1), await run.execution())
        )
        assert signed.phase is Phase.running
        assert (await run.result()).status is Phase.succeeded


@pytest.mark.unit
def test_the_sandbox_imports_the_workflow_package_afresh():
    """A passthrough entry covers its submodules: "stratagem" there would pass stratagem.workflows
    through unsandboxed, and the strict sandbox of the tests would catch nothing."""
    from stratagem.temporal.plugin import PASSTHROUGH_MODULES
    from stratagem.workflows import StratagemRun

    for name in (StratagemRun.__module__, "stratagem.workflows", "stratagem.activities"):
        assert not any(name == entry or name.startswith(f"{entry}.") for entry in PASSTHROUGH_MODULES), name
    # Every other module of stratagem (the run's types, the plan, the interceptors...) is passed through.
    import pkgutil

    import stratagem

    others = {f"stratagem.{m.name}" for m in pkgutil.iter_modules(stratagem.__path__)}
    assert others - {"stratagem.workflows", "stratagem.activities"} <= set(PASSTHROUGH_MODULES)
