"""The bare Temporal baselines every Stratagem figure is measured against.

Plain workflows and activities, registered on the same `Worker` as Stratagem's run workflow
(see `bench.common.Bench.make_worker`). The workflow sandbox re-imports the module that defines
a workflow for every workflow run, so this module is kept as small as a user's own workflow
file would be: only temporalio, pydantic and the standard library.
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

from temporalio import activity, workflow

with workflow.unsafe.imports_passed_through():
    from pydantic import BaseModel, Field

# The bare baselines' activity options: a generous start-to-close limit, like Stratagem's
# default step timeout, and Temporal's default retry policy.
BARE_TIMEOUT = timedelta(seconds=300)


@activity.defn(name="bench.noop")
async def bare_noop(i: int) -> int:
    """The bare baseline's step: does nothing, like the `noop` tool."""
    return i


@activity.defn(name="bench.stamp")
async def bare_stamp(label: str) -> float:
    """Returns the wall-clock time at which the activity started (like the `stamp` tool)."""
    return time.time()


@activity.defn(name="bench.sleep")
async def bare_sleep(seconds: float) -> list[float]:
    """Sleeps; returns the wall-clock start and end times (like the `sleep_for` tool)."""
    start = time.time()
    await asyncio.sleep(seconds)
    return [start, time.time()]


@workflow.defn(name="BareChain", sandboxed=True)
class BareChain:
    """N no-op activities, one after another."""

    @workflow.run
    async def run(self, n: int) -> int:
        for i in range(n):
            await workflow.execute_activity(bare_noop, i, start_to_close_timeout=BARE_TIMEOUT)
        return n


@workflow.defn(name="BareLocalChain", sandboxed=True)
class BareLocalChain:
    """N no-op local activities, one after another."""

    @workflow.run
    async def run(self, n: int) -> int:
        for i in range(n):
            await workflow.execute_local_activity(bare_noop, i, start_to_close_timeout=BARE_TIMEOUT)
        return n


@workflow.defn(name="BareSignalled", sandboxed=True)
class BareSignalled:
    """Waits for a signal (or an update), then runs one activity that stamps its start time."""

    def __init__(self) -> None:
        self._go = False

    @workflow.run
    async def run(self) -> float:
        await workflow.wait_condition(lambda: self._go)
        return await workflow.execute_activity(bare_stamp, "go", start_to_close_timeout=BARE_TIMEOUT)

    @workflow.signal
    def go(self) -> None:
        self._go = True

    @workflow.update
    def go_update(self) -> bool:
        self._go = True
        return True

    @workflow.query
    def ready(self) -> bool:
        return True


class ChainsInput(BaseModel):
    chains: int
    length: int
    parallel: int
    progress: list[int] = Field(default_factory=list)
    continued: int = 0


class ChainsResult(BaseModel):
    steps: int
    continued: int


@workflow.defn(name="BareChains", sandboxed=True)
class BareChains:
    """`chains` chains of `length` no-op activities, at most `parallel` in flight. Continues as
    new when Temporal suggests it, the way Stratagem does: nothing new starts, the activities
    in flight finish, and the progress is carried."""

    @workflow.run
    async def run(self, input: ChainsInput) -> ChainsResult:
        progress = list(input.progress) or [0] * input.chains
        state = {"in_flight": 0, "stop": False}

        async def chain(c: int) -> None:
            while progress[c] < input.length and not state["stop"]:
                await workflow.wait_condition(lambda: state["in_flight"] < input.parallel or state["stop"])
                if state["stop"]:
                    return
                state["in_flight"] += 1
                try:
                    await workflow.execute_activity(bare_noop, progress[c], start_to_close_timeout=BARE_TIMEOUT)
                finally:
                    state["in_flight"] -= 1
                progress[c] += 1
                if workflow.info().is_continue_as_new_suggested():
                    state["stop"] = True

        await asyncio.gather(*(chain(c) for c in range(input.chains)))
        if any(p < input.length for p in progress):
            workflow.continue_as_new(
                ChainsInput(
                    chains=input.chains,
                    length=input.length,
                    parallel=input.parallel,
                    progress=progress,
                    continued=input.continued + 1,
                )
            )
        return ChainsResult(steps=sum(progress), continued=input.continued)


class DagNode(BaseModel):
    id: str
    seconds: float
    depends_on: list[str] = Field(default_factory=list)


@workflow.defn(name="BareDag", sandboxed=True)
class BareDag:
    """A task graph of sleeping activities, each started as soon as its dependencies finished.
    Returns each node's [start, end] wall-clock times."""

    @workflow.run
    async def run(self, nodes: list[DagNode]) -> dict[str, list[float]]:
        times: dict[str, list[float]] = {}

        async def node(n: DagNode) -> None:
            await workflow.wait_condition(lambda: all(d in times for d in n.depends_on))
            times[n.id] = await workflow.execute_activity(bare_sleep, n.seconds, start_to_close_timeout=BARE_TIMEOUT)

        await asyncio.gather(*(node(n) for n in nodes))
        return times


BARE_WORKFLOWS = [BareChain, BareLocalChain, BareSignalled, BareChains, BareDag]
BARE_ACTIVITIES = [bare_noop, bare_stamp, bare_sleep]
