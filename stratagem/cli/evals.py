"""`stratagem eval`: how well a planner model (or a prompt version) plans a set of goals, in one
command: a table, one row per goal, and a summary; `--json` for machines; `--compare` for two
variants side by side. docs/evals.md is the guide."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from stratagem.cli import render
from stratagem.cli.arguments import Commands, positive
from stratagem.cli.errors import FAILED, CliError
from stratagem.cli.session import open_client, settings
from stratagem.common.errors import ModelConfigError
from stratagem.domain.model_settings import capabilities_for
from stratagem.evals.cases import EvalSet, load_eval_set
from stratagem.evals.from_runs import set_from_runs
from stratagem.evals.report import comparison as comparison_table
from stratagem.evals.report import difference_lines, document, summary_line
from stratagem.evals.report import table as case_table
from stratagem.evals.runner import CaseResult, Variant, VariantResult, read_prompt, run_eval
from stratagem.io.model_config import load_config
from stratagem.models import load_model, split_model_string
from stratagem.models.scripted import allow_dirs

STDOUT = "-"


def add_eval(commands: Commands) -> None:
    command = commands.add(
        "eval",
        cmd_eval,
        "plan a set of goals with a planner model and score the plans (docs/evals.md)",
        json=False,
    )
    command.add_argument("set", nargs="?", metavar="SET", help="the eval set: a YAML file, or JSONL (a case a line)")
    command.add_argument(
        "--model", metavar="MODEL", help="the planner model (default: planner: in --config), e.g. openai:NAME@URL"
    )
    command.add_argument("--prompt", metavar="FILE", help="a system prompt of its own (a template with {tools})")
    other = command.add_mutually_exclusive_group()
    other.add_argument("--compare", metavar="MODEL", help="also plan the set with this model, side by side")
    other.add_argument("--compare-prompt", metavar="FILE", help="also plan the set with this prompt, side by side")
    command.add_argument(
        "--tools",
        action="append",
        default=[],
        metavar="MODULE",
        help="tool module, .py file or mcp: source; repeatable",
    )
    command.add_argument(
        "--max-repairs", type=int, default=2, metavar="N", help="answers sent back per goal (default 2)"
    )
    command.add_argument(
        "--time-limit",
        type=positive(float),
        metavar="SECONDS",
        help="per planning call, past which its answer is cut and repaired (default: STRATAGEM_REQUEST_TIMEOUT or 120)",
    )
    command.add_argument(
        "--min-valid", type=_rate, metavar="RATE", help="exit 1 below this valid-plan rate (0.8 or 80%%)"
    )
    command.add_argument("--config", metavar="FILE", help="the configuration file (default: $STRATAGEM_CONFIG)")
    runs = command.add_argument_group("planning the goals of recorded runs again")
    runs.add_argument("--from-runs", action="store_true", help="the set: the namespace's runs with an approved plan")
    runs.add_argument("--query", metavar="Q", help="only the runs this visibility query matches")
    runs.add_argument("--limit", type=positive(int), metavar="N", help="at most N runs, newest first (default 50)")
    command.add_argument(
        "--json",
        nargs="?",
        const=STDOUT,
        metavar="PATH",
        help="write the figures as JSON to PATH (the table is still printed), or alone to stdout without PATH",
    )


def _rate(text: str) -> float:
    try:
        value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a rate (0.8 or 80%)") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text} is not between 0 and 1 (0% and 100%)")
    return value


async def cmd_eval(args: argparse.Namespace) -> int:
    json_only = args.json == STDOUT
    _check_usage(args)
    eval_set = None if args.from_runs else load_eval_set(args.set, tools=args.tools)
    variants = _variants(args)
    for variant in variants:  # a model that cannot load (a missing file, no API key) stops here, not midway
        load_model(variant.load_as or variant.model)
    if eval_set is None:
        eval_set = await _from_runs(args, json_only=json_only)
    config = load_config(args.config)
    results = []
    for variant in variants:
        if not json_only:  # progress on stderr: stdout holds the table alone
            render.errors.print(f"planning {len(eval_set.cases)} goal(s) with {variant.label} ...")
        results.append(
            await run_eval(
                eval_set,
                variant,
                max_repairs=args.max_repairs,
                capabilities=capabilities_for(variant.model, config.models),
                on_case=lambda case: _progress(case, json_only),
                time_limit=args.time_limit,
            )
        )
    data = document(eval_set.name, results)
    if json_only:
        render.emit_json(data)
    else:
        _print(eval_set.name, results)
        if args.json:
            _write(Path(args.json), data)
    low = [r for r in results if args.min_valid is not None and r.summary.valid_rate < args.min_valid]
    for result in low:
        render.note(
            f"valid-plan rate {result.summary.valid_rate:.0%} is below --min-valid {args.min_valid:.0%} "
            f"({result.label})",
            json_mode=True,
        )
    return FAILED if low else 0


def _check_usage(args: argparse.Namespace) -> None:
    if (
        args.json not in (None, STDOUT)
        and Path(args.json).suffix.lower() in (".yaml", ".yml", ".jsonl")
        and not (args.set or args.from_runs)
    ):
        raise CliError(f"--json took '{args.json}' as the file to write: put the eval set before --json")
    if args.from_runs and args.set:
        raise CliError("give an eval set or --from-runs, not both")
    if not args.from_runs and not args.set:
        raise CliError("give an eval set (a YAML or JSONL file), or --from-runs to plan recorded runs' goals again")
    if not args.from_runs and (args.query or args.limit):
        raise CliError("--query and --limit choose recorded runs: they go with --from-runs")
    if args.max_repairs < 0:
        raise CliError(f"--max-repairs {args.max_repairs} is below zero")
    if args.json not in (None, STDOUT) and not Path(args.json).resolve().parent.is_dir():
        raise CliError(f"--json {args.json}: the folder {Path(args.json).parent} does not exist")


def _variants(args: argparse.Namespace) -> list[Variant]:
    model = args.model or _configured_planner(args.config)
    prompt = _prompt(args.prompt)
    variants = [_variant(model, args.prompt, prompt, "--model")]
    if args.compare:
        variants.append(_variant(args.compare, args.prompt, prompt, "--compare"))
    elif args.compare_prompt:
        variants.append(_variant(model, args.compare_prompt, _prompt(args.compare_prompt), "--model"))
    return variants


def _configured_planner(config_file: str | None) -> str:
    planner = load_config(config_file).planner
    if isinstance(planner, list):
        planner = planner[0] if planner else None
    if not planner:
        raise CliError(
            "give the planner model to evaluate: --model provider:name (for example openai:NAME@http://127.0.0.1:8080/v1), "
            "or planner: in the configuration file"
        )
    return planner


def _prompt(path: str | None) -> str | None:
    return read_prompt(path) if path else None


def _variant(model: str, prompt_file: str | None, prompt: str | None, option: str) -> Variant:
    try:
        provider, name = split_model_string(model)
    except ModelConfigError as exc:
        raise CliError(f"{option}: {exc}") from None
    load_as = None
    if provider == "scripted":
        # The command names this file itself, so it may be read from wherever it is (as `run` allows).
        path = Path(name).resolve()
        allow_dirs([path.parent])
        load_as = f"scripted:{path}"
    return Variant(model=model, prompt_file=prompt_file, prompt=prompt, load_as=load_as)


async def _from_runs(args: argparse.Namespace, *, json_only: bool) -> EvalSet:
    client = await open_client(settings(), json_mode=json_only)
    found = await set_from_runs(client, query=args.query, limit=args.limit or 50)
    if args.tools:
        found = found.model_copy(update={"tools": [*found.tools, *args.tools]})
    return found


def _progress(case: CaseResult, json_only: bool) -> None:
    if json_only:
        return
    shown = "valid" if case.valid else ("model call failed" if case.error else "invalid")
    render.errors.print(f"  {case.id}: {shown} ({case.calls} call(s), {case.seconds:.1f} s)")


def _print(name: str, results: list[VariantResult]) -> None:
    console = render.console
    if len(results) == 1:
        console.print(case_table(results[0], f"eval {name}"))
        console.print(summary_line(results[0].summary))
        return
    a, b = results
    console.print(comparison_table(a, b, f"eval {name}"))
    console.print(f"A {a.label}: {summary_line(a.summary)}")
    console.print(f"B {b.label}: {summary_line(b.summary)}")
    *cases, totals = difference_lines(a, b)
    console.print("A → B:" if cases else "A → B: the same validity, F1, checks and repairs on every case")
    for line in cases:
        console.print(f"  {line}")
    console.print(totals)


def _write(path: Path, data: dict[str, object]) -> None:
    try:
        path.write_text(json.dumps(data, indent=1, default=str, sort_keys=True) + "\n", encoding="utf-8")
    except OSError as exc:
        raise CliError(f"cannot write --json file '{path}': {exc.strerror}") from None
    render.console.print(f"wrote {path}")
