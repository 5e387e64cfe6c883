"""model_economics: model calls, tokens and cost of plan-and-execute against the joint loop.

Three business tasks, each run twice through Stratagem on the same worker and tools:

- plan-and-execute (`mode=plan`): a planner (priced as openai:gpt-4.1, $2/$8 per Mtok) writes
  the task graph once; tool steps run with no model at all; `llm` steps run on the executor
  (priced as openai:gpt-4.1-mini, $0.40/$1.60);
- the joint loop (`mode=joint`): one model (priced as openai:gpt-4.1) calls tools in a loop,
  its conversation growing each round (every tool result stays in it, and every call resends
  the whole conversation and every tool's schema).

The models are scripted: each makes the decisions a competent model would make for the task
(no mistakes, no plan repairs, no retries; independent tool calls issued together in one turn).
Each scripted answer carries an explicit `usage:`, computed here from the prompt Stratagem
really sends for that call, at 4 characters per token:

- input: the messages Stratagem builds (`stratagem.io.planner.planning_messages`, which holds the
  tool catalogue and the plan schema; `stratagem.io.executor.executor_messages` plus the turns so
  far), plus the JSON schemas of the tools offered with the call, plus 4 tokens per message;
- output: the answer's text (the plan as JSON, the executor's answer), or the tool calls as JSON.

The tool results in those prompts are the real outputs of the tools in bench/tools.py, and after
each run the executors' stored transcripts are compared with the conversations modelled here, so
a drift between the model of the prompt and the real prompt shows up (`transcript_check`).

Not modelled: provider tokenizers (4 chars/token is an approximation), the token cost of the
structured-output schema beyond the prompt text, prompt caching (which discounts the joint
loop's repeated prefix on some providers), reasoning tokens, failed calls and repairs, and the
quality of the outcome. Wall time is meaningless here (the models answer at once).

The tasks and their scripted decisions are in bench/economics_tasks.py; the token and price model,
which turns them into scripts with usage, in bench/economics_model.py; this module runs them and
reports the ledgers' figures.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import yaml

from stratagem.domain.run_types import JOINT_STEP_ID
from stratagem.io.store import is_stored, load_value
from stratagem.models.base import Message
from stratagem.tools import ToolRegistry

from . import tools as bench_tools
from .common import Bench, Row, log, ratio
from .economics_model import (
    CHARS_PER_TOKEN,
    EXECUTOR_AS,
    JOINT_AS,
    MESSAGE_OVERHEAD_TOKENS,
    PLANNER_AS,
    joint_script,
    message_chars,
    plan_mode_script,
)
from .economics_tasks import tasks

NAME = "model_economics"


def economics_registry() -> ToolRegistry:
    registry = ToolRegistry.from_modules([])  # the built-in tools
    for fn in bench_tools.ECONOMICS_TOOLS:
        registry.register(fn, origin="bench.tools")
    return registry


def _totals(ledger: Any) -> dict[str, Any]:
    usage = ledger.usage
    by_purpose: dict[str, dict[str, Any]] = {}
    for call in ledger.calls:
        p = by_purpose.setdefault(call.purpose, {"calls": 0, "input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0})
        p["calls"] += 1
        p["input_tokens"] += call.input_tokens
        p["output_tokens"] += call.output_tokens
        p["cost_usd"] += call.cost_usd or 0.0
    return {
        "calls": usage.calls,
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cost_usd": usage.cost_usd,
        "unpriced_calls": usage.unpriced_calls,
        "by_purpose": by_purpose,
    }


def _transcript_check(bench: Bench, ledger: Any, modelled: dict[str, list[Message]]) -> dict[str, Any]:
    """Compare each llm step's stored transcript with the conversation modelled for it."""
    out = {}
    for step_id, messages in modelled.items():
        record = ledger.steps[step_id]
        if not is_stored(record.transcript):
            out[step_id] = {"error": "no stored transcript"}
            continue
        real = [Message.model_validate(m) for m in load_value(bench.store, record.transcript)]
        real_chars, model_chars = message_chars(real), message_chars(messages)
        out[step_id] = {
            "real_messages": len(real),
            "modelled_messages": len(messages),
            "real_chars": real_chars,
            "modelled_chars": model_chars,
            "match": len(real) == len(messages) and real_chars == model_chars,
        }
    return out


async def run(bench: Bench) -> dict[str, Any]:
    registry = economics_registry()
    scripts = Path(tempfile.mkdtemp(prefix="scripts-", dir=bench.root))
    scratch = Path(tempfile.mkdtemp(prefix="model-ws-", dir=bench.root))
    rows: list[Row] = []
    details: dict[str, Any] = {
        "assumptions": {
            "chars_per_token": CHARS_PER_TOKEN,
            "message_overhead_tokens": MESSAGE_OVERHEAD_TOKENS,
            "planner_priced_as": [PLANNER_AS[0], PLANNER_AS[1].model_dump()],
            "executor_priced_as": [EXECUTOR_AS[0], EXECUTOR_AS[1].model_dump()],
            "joint_priced_as": [JOINT_AS[0], JOINT_AS[1].model_dump()],
            "tools_in_catalogue": registry.catalog().names,
        },
        "tasks": {},
    }
    sums = {
        "plan": {"calls": 0, "input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0},
        "joint": {"calls": 0, "input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0},
    }
    async with bench.worker(NAME, registry) as tq:
        for i, task in enumerate(tasks(registry)):
            planner, executor, plan_conversations = await plan_mode_script(registry, scratch, task)
            joint, joint_messages = await joint_script(registry, scratch, task)
            files = {}
            for role, content, price in (
                ("planner", planner, PLANNER_AS),
                ("executor", executor, EXECUTOR_AS),
                ("joint", joint, JOINT_AS),
            ):
                path = scripts / f"task{i + 1}-{role}-as-{price[0].split(':', 1)[1]}.yaml"
                path.write_text(yaml.safe_dump(content, sort_keys=False, allow_unicode=True))
                files[role] = (f"scripted:{path}", price[1])
            prices = {model: price for model, price in files.values()}

            plan_run = await bench.start(
                tq,
                goal=task.goal,
                planner=files["planner"][0],
                executor=files["executor"][0],
                auto_approve=True,
                prices=prices,
            )
            plan_result = await plan_run.result()
            joint_run = await bench.start(
                tq, goal=task.goal, mode="joint", executor=files["joint"][0], auto_approve=True, prices=prices
            )
            joint_result = await joint_run.result()
            for label, result in (("plan", plan_result), ("joint", joint_result)):
                if result.status.value != "succeeded":
                    raise RuntimeError(f"{task.name} ({label}) ended {result.status.value}: {result.reason}")
            plan_ledger, joint_ledger = await plan_run.ledger(), await joint_run.ledger()
            p, j = _totals(plan_ledger), _totals(joint_ledger)
            check = {
                **_transcript_check(bench, plan_ledger, plan_conversations),
                "joint": _transcript_check(bench, joint_ledger, {JOINT_STEP_ID: joint_messages})[JOINT_STEP_ID],
            }
            for key in sums["plan"]:
                sums["plan"][key] += p[key]
                sums["joint"][key] += j[key]
            log(
                f"{task.name}: plan {p['calls']} calls, {p['input_tokens']:,}/{p['output_tokens']:,} tokens, ${p['cost_usd']:.4f}; "
                f"joint {j['calls']} calls, {j['input_tokens']:,}/{j['output_tokens']:,} tokens, ${j['cost_usd']:.4f}; "
                f"transcripts match the model: {all(c.get('match') for c in check.values())}"
            )
            rows.append(
                Row(
                    f"{task.name}: cost per task",
                    p["cost_usd"],
                    j["cost_usd"],
                    "USD",
                    ratio(p["cost_usd"], j["cost_usd"]),
                    note=f"calls {p['calls']} vs {j['calls']}",
                )
            )
            rows.append(
                Row(
                    f"{task.name}: tokens in + out",
                    p["input_tokens"] + p["output_tokens"],
                    j["input_tokens"] + j["output_tokens"],
                    "tokens",
                    ratio(p["input_tokens"] + p["output_tokens"], j["input_tokens"] + j["output_tokens"]),
                    note=f"in {p['input_tokens']:,} vs {j['input_tokens']:,}; out {p['output_tokens']:,} vs {j['output_tokens']:,}",
                )
            )
            details["tasks"][task.name] = {
                "goal": task.goal,
                "plan_and_execute": p,
                "joint": j,
                "transcript_check": check,
                "joint_rounds": len(task.joint_turns),
                "plan_steps": len(task.plan["steps"]),
                "llm_steps": [s["id"] for s in task.plan["steps"] if s.get("kind") == "llm"],
                "run_ids": {"plan": plan_run.id, "joint": joint_run.id},
            }
    n = len(details["tasks"])
    sp, sj = sums["plan"], sums["joint"]
    rows.append(
        Row(
            f"mean over {n} tasks: cost per task",
            sp["cost_usd"] / n,
            sj["cost_usd"] / n,
            "USD",
            ratio(sp["cost_usd"], sj["cost_usd"]),
        )
    )
    rows.append(
        Row(
            f"mean over {n} tasks: model calls per task",
            sp["calls"] / n,
            sj["calls"] / n,
            "calls",
            ratio(sp["calls"], sj["calls"]),
        )
    )
    rows.append(
        Row(
            f"mean over {n} tasks: input tokens per task",
            sp["input_tokens"] / n,
            sj["input_tokens"] / n,
            "tokens",
            ratio(sp["input_tokens"], sj["input_tokens"]),
        )
    )
    rows.append(
        Row(
            f"mean over {n} tasks: output tokens per task",
            sp["output_tokens"] / n,
            sj["output_tokens"] / n,
            "tokens",
            ratio(sp["output_tokens"], sj["output_tokens"]),
        )
    )
    # How much of the difference is the cheaper executor model rather than the structure: the
    # joint loop's own tokens at the executor's price.
    mini = EXECUTOR_AS[1]
    joint_as_mini = mini.cost(sj["input_tokens"], sj["output_tokens"]) / n
    rows.append(
        Row(
            f"mean over {n} tasks: cost per task, joint priced as {EXECUTOR_AS[0].split(':', 1)[1]}",
            sp["cost_usd"] / n,
            joint_as_mini,
            "USD",
            ratio(sp["cost_usd"] / n, joint_as_mini),
            note="the joint loop's own tokens at the executor's price: a joint loop on the cheap model",
        )
    )
    details["joint_cost_per_task_if_priced_as_executor"] = joint_as_mini
    details["totals"] = sums
    details["transcripts_match_model"] = all(
        c.get("match") for t in details["tasks"].values() for c in t["transcript_check"].values()
    )
    return {"rows": [r.as_dict() for r in rows], "details": details}
