"""The peers measure itself (see bench/peers/__init__.py): every job on every framework, and the rows."""

from __future__ import annotations

import importlib
from typing import Any

from temporalio.client import Client

from ..common import Bench, Goal, Row, log, ratio
from . import INSTALL
from .fake_llm import FakeLLM
from .harness import Variant, env_without_keys, run_job
from .jobs import JOBS, QUICK_JOBS

PEERS = ("pydantic_ai", "openai_agents")
ORDER = ("tool_heavy", "long_horizon", "parallel", "crash", "tool_heavy_200")


def variants() -> list[Variant]:
    """Stratagem planned and joint, then each peer; a peer not installed stops the measure."""
    env_without_keys()
    mine = importlib.import_module("bench.peers.stratagem_job")
    out = [
        Variant("stratagem", "Stratagem, planned", "stratagem", mine),
        Variant("stratagem_joint", "Stratagem, joint loop", "stratagem", mine, joint=True),
    ]
    for name in PEERS:
        try:
            module = importlib.import_module(f"bench.peers.{name}_job")
        except ImportError as exc:
            raise RuntimeError(
                f"the peers bench needs the agent frameworks ({exc.name} is missing): {INSTALL}"
            ) from None
        out.append(Variant(name, module.VERSION.split(" (")[0], name, module))
    return out


def _deadline(name: str, calls: int) -> float:
    return 120.0 + calls * (3.0 if name == "tool_heavy_200" else 1.0)


async def run(bench: Bench) -> dict[str, Any]:
    jobs = QUICK_JOBS if bench.quick else JOBS
    chosen = variants()
    clients: dict[str, Client] = {}
    for v in chosen:
        if v.is_stratagem:
            clients[v.name] = bench.client
        else:
            clients[v.name] = await Client.connect(
                bench.address, namespace=bench.client.namespace, plugins=v.module.client_plugins()
            )
    results: dict[str, dict[str, Any]] = {v.name: {} for v in chosen}
    with FakeLLM() as llm:
        for name in ORDER:
            job = jobs[name]
            for v in chosen:  # interleaved: each job on every framework before the next job
                kill = job.calls // 2 if name == "crash" else None
                try:
                    done = await run_job(
                        bench,
                        llm.base_url,
                        v,
                        clients[v.name],
                        job,
                        name=name,
                        deadline=_deadline(name, job.calls),
                        kill_after=kill,
                    )
                except Exception as exc:  # one framework failing a job must not lose the others
                    done = {"job": job.model, "completed": False, "outcome": f"{type(exc).__name__}: {exc}"}
                results[v.name][name] = done
                log(_line(v, name, done))
    return {
        "rows": [r.as_dict() for r in rows(results, jobs)],
        "details": {
            "versions": {v.name: v.module.VERSION for v in chosen},
            "notes": {v.name: v.module.NOTES for v in chosen},
            "jobs": {name: job.model for name, job in jobs.items()},
            "results": results,
        },
    }


def _line(v: Variant, name: str, done: dict[str, Any]) -> str:
    history = done.get("history") or {}
    return (
        f"{v.name} {name}: {'completed' if done.get('completed') else 'NOT completed'} "
        f"in {done.get('wall_s', 0):.1f} s; history {history.get('events')} events, {history.get('bytes')} bytes "
        f"in {history.get('executions')} execution(s); effects {done.get('effects')} ({done.get('twice')} twice); "
        f"peak {done.get('peak_rss_kib')} KiB; {done.get('outcome', '')[:120]}"
    )


def _per_call(done: dict[str, Any], figure: str) -> float | None:
    if not done.get("completed"):
        return None
    value = done["history"][figure] if figure in ("bytes", "events") else done.get(figure)
    return None if value is None else value / done["tool_calls"]


def _best_peer(results: dict[str, dict[str, Any]], value: Any) -> tuple[str | None, float | None]:
    """The peer with the lowest figure (`value(result)`), among those that have one."""
    found = [(v, name) for name in PEERS if name in results and (v := value(results[name])) is not None]
    if not found:
        return None, None
    figure, name = min(found)
    return name, figure


def rows(results: dict[str, dict[str, Any]], jobs: dict[str, Any]) -> list[Row]:
    out: list[Row] = []
    heavy, long, fan = jobs["tool_heavy"], jobs["long_horizon"], jobs["parallel"]

    def compare(
        metric: str, job: str, value: Any, unit: str, goal: Goal | None = None, joint: bool = True, note: str = ""
    ) -> None:
        peer, figure = _best_peer({k: r.get(job, {}) for k, r in results.items()}, value)
        for key, label in (("stratagem", ""), ("stratagem_joint", "joint loop: ")):
            if key == "stratagem_joint" and not joint:
                continue
            mine = value(results[key].get(job, {}))
            out.append(
                Row(
                    ("  " if label else "") + label + metric,
                    mine,
                    figure,
                    unit,
                    ratio(mine, figure),
                    goal if not label else None,
                    note=f"vs {peer}" + (f"; {note}" if note else "") if peer else "no peer has a figure",
                )
            )

    size = f"{heavy.calls} calls × {heavy.size // 1000} KB"
    compare(
        f"tool-heavy ({size}): history bytes per tool call",
        "tool_heavy",
        lambda r: _per_call(r, "bytes"),
        "B",
        Goal.at_most(0.2),
    )
    compare("  history events per tool call", "tool_heavy", lambda r: _per_call(r, "events"), "")
    compare("  wall time per tool call", "tool_heavy", lambda r: _ms(_per_call(r, "wall_s")), "ms", Goal.at_most(1.1))
    compare("  workflow-task CPU per tool call", "tool_heavy", lambda r: _ms(_per_call(r, "workflow_cpu_s")), "ms")
    big = jobs["tool_heavy_200"]
    for key in ("stratagem", "stratagem_joint"):
        done = results[key].get("tool_heavy_200", {})
        peers = "; ".join(
            f"{p}: {'yes' if results[p].get('tool_heavy_200', {}).get('completed') else 'no'}"
            for p in PEERS
            if p in results
        )
        out.append(
            Row(
                ("" if key == "stratagem" else "  joint loop: ")
                + f"completes {big.calls} calls × {big.size // 1000} KB",
                1.0 if done.get("completed") else 0.0,
                None,
                "yes=1",
                None,
                Goal.at_least(1, margin=1.0),
                goal_on="stratagem",
                note=peers,
            )
        )
    compare(
        f"long horizon ({long.model_calls} model calls): history bytes at the end",
        "long_horizon",
        lambda r: r["history"]["bytes"] if r.get("completed") else None,
        "B",
        note="Stratagem planned makes 1 model call",
    )
    compare("  peak worker memory", "long_horizon", lambda r: _mib(r.get("peak_rss_kib")), "MiB")
    compare(
        f"parallel ({fan.calls} × {fan.ms / 1000:g} s): makespan ÷ critical path",
        "parallel",
        lambda r: r["wall_s"] / (fan.ms / 1000) if r.get("completed") else None,
        "",
    )
    for key in ("stratagem", "stratagem_joint"):
        done = results[key].get("crash", {})
        peers = "; ".join(f"{p}: {results[p].get('crash', {}).get('twice')}" for p in PEERS if p in results)
        out.append(
            Row(
                ("" if key == "stratagem" else "  joint loop: ") + "crash: tool calls run twice after the kill",
                done.get("twice"),
                None,
                "",
                None,
                Goal.at_most(0, margin=1.0) if key == "stratagem" else None,
                goal_on="stratagem",
                note=peers,
            )
        )
    compare("  crash: time from the kill to the next tool call", "crash", lambda r: r.get("resume_s"), "s")
    return out


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


def _mib(kib: int | None) -> float | None:
    return None if kib is None else kib / 1024
