"""`python -m bench.valid_plans --model MODEL [--schema catalogue|plandraft]`: how often a planner
model reaches a valid plan, over twenty goals, through Stratagem's own planning loop.

Meant for a real local model server, such as llama-cpp-python's serving SmolLM2-135M-Instruct:

    python -m llama_cpp.server --model SmolLM2-135M-Instruct.Q4_1.gguf --model_alias smollm2 --port 8765
    python -m bench.valid_plans --model openai:smollm2@http://127.0.0.1:8765/v1

Each goal gets `plan_with_repairs` as a run does (the first answer and up to two repairs) against
the worker's built-in tools. `--schema plandraft` holds the model to PlanDraft's own JSON schema
(what planners were given before the schema was built from the tools, without its counted
repetitions, which crash llama.cpp's server) and puts that schema and the tools' parameters in
the prompt as before, instead of the schema built from the catalogue, so the two can be
compared on the same server. Prints one line per goal and a
summary; `--json PATH` writes the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from stratagem.common.errors import ModelOutputError, StratagemError
from stratagem.domain.plan import plan_draft_json_schema
from stratagem.io import planner as planning
from stratagem.models import load_model
from stratagem.models.base import ModelCallError
from stratagem.tools import ToolRegistry

GOALS = [
    "Greet the user Ada, then record that she was greeted",
    "Write a welcome note for Ada to welcome.txt",
    "Append a row for the vendor Acme with status new to vendors.csv",
    "Read notes.txt and write a one-line summary of it to summary.txt",
    "List the CSV files in the workspace and write their names to index.txt",
    "Fill the template 'Dear $name' for Grace and save the letter to letter.txt",
    "Fetch https://example.com/status and record the answer in status.txt",
    "Read orders.csv, then write the number of orders to count.txt",
    "Create a file todo.txt holding the line 'call the bank'",
    "Add Bob with role admin to users.csv, then write a note saying so to log.txt",
    "Read the file policy.md and ask a manager whether it is approved",
    "Write a short thank-you note to the supplier Initech in thanks.txt",
    "List every file in the reports folder",
    "Read config.yaml and write a copy of it to backup.yaml",
    "Append today's sales figure of 1200 to sales.csv",
    "Fill the template 'Invoice for $client' for Umbrella Corp and write it to invoice.txt",
    "Read welcome.txt, then greet the reader by name in reply.txt",
    "Write the word 'done' to status.txt, then list the files in the workspace",
    'Post the JSON {"event": "onboarded"} to https://example.com/hooks and record that it was sent',
    "Ask a person for the new employee's name, then write it to employee.txt",
]


def plandraft_schema(_catalog: Any, **_: Any) -> dict[str, Any]:
    """PlanDraft's own schema, without the counted repetitions a grammar cannot hold."""

    def strip(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: strip(v) for k, v in node.items() if k not in ("maxItems", "maxLength")}
        if isinstance(node, list):
            return [strip(v) for v in node]
        return node

    return dict(strip(plan_draft_json_schema()))


def as_before(catalog: Any) -> str:
    """The tools as the planner prompt listed them before the schema was built from them: each
    with its parameters' JSON schema, and PlanDraft's schema after them."""
    lines = [
        f"- {spec.name}: {spec.description.strip() or '(no description)'}\n  parameters: "
        + json.dumps(spec.parameters, separators=(",", ":"), sort_keys=True)
        for spec in catalog.tools
    ]
    schema = json.dumps(plan_draft_json_schema(), separators=(",", ":"))
    return "\n".join(lines) + f"\n\nPlan schema:\n{schema}"


FRESH = Path(__file__).with_name("goals") / "fresh.txt"


def fresh_goals() -> list[str]:
    """The twenty goals written for #44 and never tuned on (bench/goals/fresh.txt)."""
    lines = FRESH.read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


class Timed:
    """The model, each call timed, with its stop reason, and its input counted by the server's own
    tokenizer where the server has one (llama-cpp-python's /extras/tokenize/count): a streamed
    answer from it carries no usage, and the provider's estimate is not a measurement."""

    def __init__(self, model: Any, base_url: str | None):
        self.model, self.name, self.base_url = model, model.name, base_url
        self.calls: list[dict[str, Any]] = []

    async def complete(self, request: Any) -> Any:
        started = time.perf_counter()
        response = await self.model.complete(request)
        seconds = time.perf_counter() - started
        counted = await self._count(request.messages)
        self.calls.append(
            {
                "seconds": round(seconds, 2),
                "stop": response.stop_reason,
                "input_tokens": counted if counted is not None else response.usage.input_tokens,
                "counted_by_server": counted is not None,
                "output_tokens": response.usage.output_tokens,
            }
        )
        return response

    async def _count(self, messages: list[Any]) -> int | None:
        if self.base_url is None:
            return None
        root = self.base_url.rstrip("/").removesuffix("/v1")
        try:
            counts = [await asyncio.to_thread(_count_tokens, root, m.content) for m in messages]
        except (OSError, KeyError, ValueError):
            self.base_url = None  # not llama-cpp-python's server: its own usage figures stand
            return None
        # Each message is wrapped as <|im_start|>role\n ... <|im_end|>\n; the answer's header is 3.
        return sum(counts) + 5 * len(counts) + 3


def _count_tokens(root: str, text: str) -> int:
    request = urllib.request.Request(
        f"{root}/extras/tokenize/count",
        data=json.dumps({"input": text}).encode(),
        headers={"content-type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as reply:
        return int(json.loads(reply.read())["count"])


async def measure(model_string: str, schema: str, goals: list[str], max_tokens: int | None) -> dict[str, Any]:
    if schema == "plandraft":
        # As before: PlanDraft's schema held by the server, and the prompt carrying it and the
        # tools' parameters (the prompt's rules are today's).
        planning.planner_schema = plandraft_schema  # type: ignore[assignment]
        planning.render_tools = as_before  # type: ignore[assignment]
    catalog = ToolRegistry.from_modules([]).catalog()
    base_url = model_string.partition("@")[2] or None
    results = []
    for number, goal in enumerate(goals, start=1):
        model = Timed(load_model(model_string), base_url)
        started = time.perf_counter()
        problems, valid, repairs = "", False, []
        try:
            outcome = await planning.plan_with_repairs(model, goal, catalog, max_output_tokens=max_tokens)
            valid, repairs = True, outcome.repairs
        except planning.PlanningFailed as exc:
            problems, repairs = str(exc), exc.repairs
        except (ModelOutputError, ModelCallError, StratagemError) as exc:
            problems = f"call failed: {exc}"
        seconds = time.perf_counter() - started
        base_url = model.base_url
        calls = model.calls
        tokens_in = sum(c["input_tokens"] for c in calls)
        slowest = max((c["seconds"] for c in calls), default=0.0)
        shown = "valid" if valid else f"invalid: {problems[:160]}"
        print(
            f"{number:2}. {shown} ({len(calls)} calls, {tokens_in:,} input tokens, slowest call {slowest:.1f} s, "
            f"{seconds:.1f} s) - {goal}",
            flush=True,
        )
        results.append(
            {
                "goal": goal,
                "valid": valid,
                "calls": calls,
                "input_tokens": tokens_in,
                "seconds": round(seconds, 1),
                "problems": problems,
                "engine_repairs": repairs,
                "draft": outcome.draft.model_dump(mode="json") if valid else None,
            }
        )
    every = [c for r in results for c in r["calls"]]
    valid_count = sum(r["valid"] for r in results)
    return {
        "model": model_string,
        "schema": schema,
        "goals": len(results),
        "valid": valid_count,
        "valid_rate": round(valid_count / len(results), 3) if results else 0.0,
        "calls": len(every),
        "input_tokens": sum(c["input_tokens"] for c in every),
        "input_tokens_per_call": round(sum(c["input_tokens"] for c in every) / len(every)) if every else 0,
        "most_input_tokens": max((c["input_tokens"] for c in every), default=0),
        "slowest_call_seconds": max((c["seconds"] for c in every), default=0.0),
        "cut_off_calls": sum(c["stop"] in ("length", "deadline") for c in every),
        "engine_repairs": sum(len(r["engine_repairs"]) for r in results),
        "max_tokens": max_tokens,
        "results": results,
    }


# Issue #44's goals for SmolLM2-135M on llama-cpp-python's server, on 2 cores.
GOALS_CHECKED = {"valid_rate": 0.8, "slowest_call_seconds": 60.0, "input_tokens_per_call": 904}


def shortfalls(summary: dict[str, Any]) -> list[str]:
    missed = []
    if summary["valid_rate"] < GOALS_CHECKED["valid_rate"]:
        missed.append(f"valid plans {summary['valid_rate']:.0%} < 80%")
    if summary["slowest_call_seconds"] > GOALS_CHECKED["slowest_call_seconds"]:
        missed.append(f"a call took {summary['slowest_call_seconds']:.1f} s > 60 s")
    if summary["input_tokens_per_call"] > GOALS_CHECKED["input_tokens_per_call"]:
        missed.append(f"{summary['input_tokens_per_call']:,} input tokens per call > 904")
    return missed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.valid_plans", description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="the planner, e.g. openai:smollm2@http://127.0.0.1:8765/v1")
    parser.add_argument("--schema", choices=["catalogue", "plandraft"], default="catalogue")
    parser.add_argument(
        "--set", choices=["bench", "fresh", "both"], default="both", help="which twenty goals (default: both)"
    )
    parser.add_argument("--goals", type=int, default=len(GOALS), help="how many goals of each set to try")
    parser.add_argument("--json", metavar="PATH", help="write the figures here")
    parser.add_argument(
        "--max-tokens", type=int, help="output tokens per planning call (default: sized to the catalogue)"
    )
    parser.add_argument("--check", action="store_true", help="exit 1 unless #44's goals hold on every set")
    args = parser.parse_args(argv)
    sets = {"bench": GOALS, "fresh": fresh_goals()}
    chosen = list(sets) if args.set == "both" else [args.set]
    figures: dict[str, Any] = {}
    missed: list[str] = []
    try:
        for name in chosen:
            print(f"== the {name} goals", flush=True)
            summary = asyncio.run(measure(args.model, args.schema, sets[name][: max(1, args.goals)], args.max_tokens))
            figures[name] = summary
            print(
                f"{name}: {summary['valid']}/{summary['goals']} valid ({summary['valid_rate']:.0%}) with the "
                f"{args.schema} schema; {summary['calls']} calls, {summary['input_tokens_per_call']:,} input tokens "
                f"per call (most {summary['most_input_tokens']:,}), slowest call {summary['slowest_call_seconds']:.1f} s, "
                f"{summary['cut_off_calls']} cut off, {summary['engine_repairs']} mended by the engine",
                flush=True,
            )
            missed += [f"{name}: {m}" for m in shortfalls(summary)]
    except StratagemError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1) + "\n", encoding="utf-8")
    if args.check and missed:
        print("goals missed: " + "; ".join(missed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
