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


async def measure(model_string: str, schema: str, goals: list[str], max_tokens: int) -> dict[str, Any]:
    if schema == "plandraft":
        # As before: PlanDraft's schema held by the server, and the prompt carrying it and the
        # tools' parameters (the prompt's rules are today's).
        planning.planner_schema = plandraft_schema  # type: ignore[assignment]
        planning.render_tools = as_before  # type: ignore[assignment]
    catalog = ToolRegistry.from_modules([]).catalog()
    model = load_model(model_string)
    results = []
    for number, goal in enumerate(goals, start=1):
        started = time.perf_counter()
        calls, tokens_in, problems, valid = 0, 0, "", False
        spent: list[Any] = []
        try:
            outcome = await planning.plan_with_repairs(
                model, goal, catalog, on_call=spent.append, max_output_tokens=max_tokens
            )
            valid = True
        except ModelOutputError as exc:
            problems = str(exc)
        except (ModelCallError, StratagemError) as exc:
            problems = f"call failed: {exc}"
        calls = len(spent)
        tokens_in = sum(c.input_tokens for c in spent)
        seconds = time.perf_counter() - started
        shown = "valid" if valid else f"invalid: {problems[:160]}"
        print(f"{number:2}. {shown} ({calls} calls, {tokens_in:,} input tokens, {seconds:.1f} s) - {goal}", flush=True)
        results.append(
            {
                "goal": goal,
                "valid": valid,
                "calls": calls,
                "input_tokens": tokens_in,
                "seconds": round(seconds, 1),
                "problems": problems,
                "draft": outcome.draft.model_dump(mode="json") if valid else None,
            }
        )
    valid_count = sum(r["valid"] for r in results)
    return {
        "model": model_string,
        "schema": schema,
        "goals": len(results),
        "valid": valid_count,
        "valid_rate": round(valid_count / len(results), 3) if results else 0.0,
        "calls": sum(r["calls"] for r in results),
        "input_tokens": sum(r["input_tokens"] for r in results),
        "max_tokens": max_tokens,
        "results": results,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.valid_plans", description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="the planner, e.g. openai:smollm2@http://127.0.0.1:8765/v1")
    parser.add_argument("--schema", choices=["catalogue", "plandraft"], default="catalogue")
    parser.add_argument("--goals", type=int, default=len(GOALS), help="how many of the twenty goals to try")
    parser.add_argument("--json", metavar="PATH", help="write the figures here")
    parser.add_argument(
        "--max-tokens", type=int, default=1024, help="output tokens per planning call (a two-step plan needs ~300)"
    )
    args = parser.parse_args(argv)
    try:
        summary = asyncio.run(measure(args.model, args.schema, GOALS[: max(1, args.goals)], args.max_tokens))
    except StratagemError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(
        f"{summary['valid']}/{summary['goals']} valid ({summary['valid_rate']:.0%}) with the {args.schema} schema; "
        f"{summary['calls']} calls, {summary['input_tokens']:,} input tokens"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
