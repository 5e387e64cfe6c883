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

- input: the messages Stratagem builds (`stratagem.planner.planning_messages`, which holds the
  tool catalogue and the plan schema; `stratagem.executor.executor_messages` plus the turns so
  far), plus the JSON schemas of the tools offered with the call, plus 4 tokens per message;
- output: the answer's text (the plan as JSON, the executor's answer), or the tool calls as JSON.

The tool results in those prompts are the real outputs of the tools in bench/tools.py, and after
each run the executors' stored transcripts are compared with the conversations modelled here, so
a drift between the model of the prompt and the real prompt shows up (`transcript_check`).

Not modelled: provider tokenizers (4 chars/token is an approximation), the token cost of the
structured-output schema beyond the prompt text, prompt caching (which discounts the joint
loop's repeated prefix on some providers), reasoning tokens, failed calls and repairs, and the
quality of the outcome. Wall time is meaningless here (the models answer at once).
"""

from __future__ import annotations

import json
import math
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from stratagem import activity_io
from stratagem.catalog import ToolSpec
from stratagem.executor import executor_messages
from stratagem.models.base import Message, ToolCall
from stratagem.plan import PlanDraft, Step, StepKind
from stratagem.planner import planning_messages
from stratagem.references import resolve
from stratagem.run import JOINT_STEP_ID
from stratagem.store import is_stored, load_value
from stratagem.tools import ToolContext, ToolRegistry
from stratagem.usage import Price

from . import tools as bench_tools
from .common import Bench, Row, log, ratio

NAME = "model_economics"
CHARS_PER_TOKEN = 4
MESSAGE_OVERHEAD_TOKENS = 4

PLANNER_AS = ("openai:gpt-4.1", Price(input_per_mtok=2.0, output_per_mtok=8.0))
EXECUTOR_AS = ("openai:gpt-4.1-mini", Price(input_per_mtok=0.40, output_per_mtok=1.60))
JOINT_AS = ("openai:gpt-4.1", Price(input_per_mtok=2.0, output_per_mtok=8.0))


# ---------------------------------------------------------------------------- the tasks


@dataclass
class Task:
    name: str
    goal: str
    plan: dict[str, Any]
    # The executor's turns for each llm step of the plan: tool calls ({"calls": [...]}) or a final answer ({"text": ...}).
    executor_turns: dict[str, list[dict[str, Any]]]
    # The joint model's turns, in order.
    joint_turns: list[dict[str, Any]]
    expected: dict[str, Any] = field(default_factory=dict)


MEMO = """# Due diligence: Nordwind Logistics GmbH

**Register.** Active GmbH, registered at Amtsgericht Hamburg under HRB 148213 since 2011, share capital EUR 250,000.
Directors Katrin Vollmer (since 2016) and Henrik Albers (since 2021). Annual accounts for 2024 were filed on time
(2025-06-30). Industry code NACE 52.29 fits a logistics supplier.

**Sanctions.** Screened against the EU, UN, UK OFSI and US OFAC SDN lists. One weak partial match (score 0.41,
threshold 0.85) against NORDWIND SHIPPING LTD in Cyprus: a different entity in a different country. Clear.

**VAT.** DE811907980 is valid in VIES; the registered name and address match the register extract.

**Bank account.** IBAN DE89 3704 0044 0532 0130 00 at Commerzbank AG (COBADEFFXXX) passes the format and checksum
tests, and the verification of payee confirms Nordwind Logistics GmbH as the account holder. SEPA reachable.

**Recommendation: approve.** All four checks are clean. Keep the sanctions screening result with the vendor file
and repeat the screening at the annual vendor review."""

COMMENTARY_TEMPLATE = """# Sales KPIs, October 2025

| KPI | Value |
|---|---|
| Revenue | EUR {revenue:,.2f} |
| Gross margin | EUR {gross_margin:,.2f} ({gross_margin_pct}%) |
| Operating result | EUR {operating_result:,.2f} |
| Orders | {orders} (average EUR {average_order_value:,.2f}) |

**Commentary.** October revenue came from {orders} orders, led by {top1} and {top2}. The gross margin of
{gross_margin_pct}% is healthy, but fixed warehouse costs (rent and staff) absorb most of it, so the operating
result is sensitive to volume: a weaker month would turn it negative. {cust1} and {cust2} were the largest
customers; together they account for a large share of revenue, a concentration risk worth watching.

**Recommendation.** Push the high-margin consumables (wrap film, strapping) with the top customers in November,
and review the freight-out contract, the largest variable cost after goods."""

TRIAGE = [
    {
        "ticket_id": "T-4811",
        "team": "billing-ops",
        "priority": "P1",
        "reason": "duplicate charge, refund needed before month close",
    },
    {"ticket_id": "T-4812", "team": "finance", "priority": "P3", "reason": "VAT number change for future invoices"},
    {
        "ticket_id": "T-4813",
        "team": "portal-engineering",
        "priority": "P2",
        "reason": "invoice download fails with error 500 for all invoices",
    },
    {
        "ticket_id": "T-4814",
        "team": "account-management",
        "priority": "P3",
        "reason": "cancellation at end of term, written confirmation",
    },
    {
        "ticket_id": "T-4815",
        "team": "billing-ops",
        "priority": "P2",
        "reason": "retry a failed payment to avoid suspension",
    },
    {
        "ticket_id": "T-4816",
        "team": "account-management",
        "priority": "P4",
        "reason": "volume discount question for 40 more seats",
    },
]
TRIAGE_SUMMARY = "Billing queue triaged: 6 tickets routed. P1: T-4811 (duplicate charge) to billing-ops. P2: T-4813 (portal invoice download error) to portal-engineering, T-4815 (failed payment retry) to billing-ops. P3: T-4812 (VAT change) to finance, T-4814 (cancellation) to account-management. P4: T-4816 (volume discount) to account-management."


def _route_calls() -> list[dict[str, Any]]:
    return [
        {
            "tool": "route_ticket",
            "args": {"ticket_id": t["ticket_id"], "team": t["team"], "priority": t["priority"], "note": t["reason"]},
        }
        for t in TRIAGE
    ]


def tasks(registry: ToolRegistry) -> list[Task]:
    vendor = {
        "name": "Nordwind Logistics GmbH",
        "country": "DE",
        "vat": "DE811907980",
        "iban": "DE89370400440532013000",
    }
    memo_path = "vendors/nordwind-logistics/due-diligence.md"
    kpis = bench_tools.compute_kpis(bench_tools.fetch_sales("2025-10"), bench_tools.fetch_costs("2025-10"))
    commentary = COMMENTARY_TEMPLATE.format(
        **kpis,
        top1=kpis["top_products"][0]["product"],
        top2=kpis["top_products"][1]["product"],
        cust1=kpis["top_customers"][0]["customer"],
        cust2=kpis["top_customers"][1]["customer"],
    )
    report_path = "reports/kpi-2025-10.md"
    return [
        Task(
            name="vendor due diligence",
            goal=(
                f"Run due diligence on the new vendor {vendor['name']} (Germany, VAT {vendor['vat']}, IBAN {vendor['iban']}) "
                "before onboarding: look the company up in the business register, screen it against the sanctions lists, "
                "validate the VAT number and verify the bank account holder, then write a risk memo for procurement to "
                f"{memo_path}."
            ),
            plan={
                "goal": f"Due diligence on {vendor['name']} before onboarding",
                "reason": "The four checks are independent and run in parallel; the memo needs all of them; saving needs the memo.",
                "steps": [
                    {
                        "id": "register",
                        "title": "Look the company up in the business register",
                        "kind": "tool",
                        "tool": "lookup_company",
                        "args": {"name": vendor["name"], "country": "DE"},
                    },
                    {
                        "id": "sanctions",
                        "title": "Screen against sanctions lists",
                        "kind": "tool",
                        "tool": "screen_sanctions",
                        "args": {"name": vendor["name"], "country": "DE"},
                    },
                    {
                        "id": "vat",
                        "title": "Validate the VAT number",
                        "kind": "tool",
                        "tool": "validate_vat",
                        "args": {"vat_id": vendor["vat"]},
                    },
                    {
                        "id": "bank",
                        "title": "Verify the bank account holder",
                        "kind": "tool",
                        "tool": "verify_iban",
                        "args": {"iban": vendor["iban"], "account_holder": vendor["name"]},
                    },
                    {
                        "id": "memo",
                        "title": "Write the due-diligence memo",
                        "kind": "llm",
                        "depends_on": ["register", "sanctions", "vat", "bank"],
                        "instructions": "Write a due-diligence memo for procurement in Markdown: one short paragraph per check "
                        "(register, sanctions, VAT, bank account) stating what was found, then a recommendation "
                        "(approve, approve with conditions, or reject) with its reasons.",
                        "success_criteria": ["Covers all four checks", "Ends with a clear recommendation"],
                    },
                    {
                        "id": "save",
                        "title": "Save the memo",
                        "kind": "tool",
                        "tool": "write_file",
                        "depends_on": ["memo"],
                        "args": {"path": memo_path, "content": "${memo}"},
                    },
                ],
            },
            executor_turns={"memo": [{"text": MEMO}]},
            joint_turns=[
                {
                    "calls": [
                        {"tool": "lookup_company", "args": {"name": vendor["name"], "country": "DE"}},
                        {"tool": "screen_sanctions", "args": {"name": vendor["name"], "country": "DE"}},
                        {"tool": "validate_vat", "args": {"vat_id": vendor["vat"]}},
                        {"tool": "verify_iban", "args": {"iban": vendor["iban"], "account_holder": vendor["name"]}},
                    ]
                },
                {"calls": [{"tool": "write_file", "args": {"path": memo_path, "content": MEMO}}]},
                {
                    "text": f"Due diligence on {vendor['name']} is complete: register, sanctions, VAT and bank checks are clean. "
                    f"Recommendation: approve. The memo is saved to {memo_path}."
                },
            ],
        ),
        Task(
            name="monthly KPI report",
            goal=(
                "Prepare the October 2025 sales KPI report: fetch the sales order lines and the cost ledger for 2025-10, "
                "compute the KPIs, write a short management commentary on the results, and save the report as "
                f"{report_path}."
            ),
            plan={
                "goal": "October 2025 sales KPI report",
                "reason": "Sales and costs are fetched in parallel; the KPIs are computed by a tool from both; a model writes the commentary; the report is saved.",
                "steps": [
                    {
                        "id": "sales",
                        "title": "Fetch October sales lines",
                        "kind": "tool",
                        "tool": "fetch_sales",
                        "args": {"month": "2025-10"},
                    },
                    {
                        "id": "costs",
                        "title": "Fetch October cost ledger",
                        "kind": "tool",
                        "tool": "fetch_costs",
                        "args": {"month": "2025-10"},
                    },
                    {
                        "id": "kpis",
                        "title": "Compute the KPIs",
                        "kind": "tool",
                        "tool": "compute_kpis",
                        "depends_on": ["sales", "costs"],
                        "args": {"sales": "${sales}", "costs": "${costs}"},
                    },
                    {
                        "id": "commentary",
                        "title": "Write the KPI report with commentary",
                        "kind": "llm",
                        "depends_on": ["kpis"],
                        "instructions": "Write October's KPI report in Markdown: a table of the main KPIs, then a management commentary "
                        "of 150 to 250 words on revenue, margin, operating result, top products and customers, and "
                        "one recommendation.",
                        "success_criteria": ["Numbers match the KPIs", "One concrete recommendation"],
                    },
                    {
                        "id": "save",
                        "title": "Save the report",
                        "kind": "tool",
                        "tool": "write_file",
                        "depends_on": ["commentary"],
                        "args": {"path": report_path, "content": "${commentary}"},
                    },
                ],
            },
            executor_turns={"commentary": [{"text": commentary}]},
            joint_turns=[
                {
                    "calls": [
                        {"tool": "fetch_sales", "args": {"month": "2025-10"}},
                        {"tool": "fetch_costs", "args": {"month": "2025-10"}},
                    ]
                },
                # The joint model must hand the data to compute_kpis itself: its output is the data again.
                {
                    "calls": [
                        {
                            "tool": "compute_kpis",
                            "args": {
                                "sales": bench_tools.fetch_sales("2025-10"),
                                "costs": bench_tools.fetch_costs("2025-10"),
                            },
                        }
                    ]
                },
                {"calls": [{"tool": "write_file", "args": {"path": report_path, "content": commentary}}]},
                {
                    "text": f"The October 2025 KPI report is saved to {report_path}: revenue EUR {kpis['revenue']:,.2f}, "
                    f"gross margin {kpis['gross_margin_pct']}%, operating result EUR {kpis['operating_result']:,.2f}."
                },
            ],
        ),
        Task(
            name="support ticket triage",
            goal=(
                "Triage the open tickets in the billing support queue: read them, decide for each the team (billing-ops, "
                "finance, portal-engineering, account-management) and the priority (P1 to P4), route each ticket, and post "
                "a summary of the routing to the #billing-support channel."
            ),
            plan={
                "goal": "Triage the open billing tickets",
                "reason": "Routing needs judgement per ticket, so one executor step reads the tickets and routes them with route_ticket; the summary is posted after.",
                "steps": [
                    {
                        "id": "tickets",
                        "title": "List the open billing tickets",
                        "kind": "tool",
                        "tool": "list_tickets",
                        "args": {"queue": "billing", "status": "open"},
                    },
                    {
                        "id": "triage",
                        "title": "Decide team and priority, and route each ticket",
                        "kind": "llm",
                        "depends_on": ["tickets"],
                        "tools": ["route_ticket"],
                        "output_format": "json",
                        "instructions": "For each ticket in the input, decide the team (billing-ops, finance, portal-engineering, "
                        "account-management) and the priority (P1 urgent to P4 low), and route it with route_ticket "
                        "with a one-line note. Then answer with a JSON list of {ticket_id, team, priority, reason}.",
                        "success_criteria": ["Every ticket routed exactly once"],
                    },
                    {
                        "id": "announce",
                        "title": "Post the routing summary",
                        "kind": "tool",
                        "tool": "post_message",
                        "depends_on": ["triage"],
                        "args": {"channel": "#billing-support", "text": "Billing queue triaged: ${triage}"},
                    },
                ],
            },
            executor_turns={"triage": [{"calls": _route_calls()}, {"text": json.dumps(TRIAGE)}]},
            joint_turns=[
                {"calls": [{"tool": "list_tickets", "args": {"queue": "billing", "status": "open"}}]},
                {"calls": _route_calls()},
                {"calls": [{"tool": "post_message", "args": {"channel": "#billing-support", "text": TRIAGE_SUMMARY}}]},
                {"text": "All 6 open billing tickets are routed and the summary is posted to #billing-support."},
            ],
        ),
    ]


# ---------------------------------------------------------------------------- the token model


def _tokens(chars: int) -> int:
    return math.ceil(chars / CHARS_PER_TOKEN)


def _call_json(call: ToolCall) -> str:
    return json.dumps({"name": call.name, "arguments": call.arguments})


def _message_chars(messages: list[Message]) -> int:
    return sum(len(m.content) + sum(len(_call_json(c)) for c in m.tool_calls) for m in messages)


def _spec_chars(specs: list[ToolSpec]) -> int:
    return sum(
        len(json.dumps({"name": s.name, "description": s.description, "parameters": s.parameters})) for s in specs
    )


def prompt_tokens(messages: list[Message], specs: list[ToolSpec]) -> int:
    return _tokens(_message_chars(messages) + _spec_chars(specs)) + MESSAGE_OVERHEAD_TOKENS * len(messages)


async def _invoke(registry: ToolRegistry, workspace: Path, name: str, args: dict[str, Any], step_id: str) -> Any:
    context = ToolContext(
        run_id="model", step_id=step_id, revision=1, attempt=1, workspace=workspace, execution_id="model"
    )
    return await registry.invoke(name, args, context)


def _tool_text(output: Any) -> str:
    # As the executor hands a tool's result to the model (stratagem/executor.py).
    text = output if isinstance(output, str) else json.dumps(output, default=str)
    return text[:16_000] + (f"\n[cut: {len(text):,} characters in all]" if len(text) > 16_000 else "")


async def conversation(
    registry: ToolRegistry, workspace: Path, request: activity_io.LlmStepInput, turns: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[Message]]:
    """The scripted entries (with usage) of an executor's loop, and the conversation it builds."""
    allowed = list(request.step.tools)
    specs = [registry.get(n).spec() for n in allowed if n in registry]
    messages = executor_messages(request, allowed)
    entries = []
    for round_, turn in enumerate(turns):
        usage_in = prompt_tokens(messages, specs)
        if "calls" in turn:
            calls = [
                ToolCall(id=f"call_{round_}_{i}", name=c["tool"], arguments=c["args"])
                for i, c in enumerate(turn["calls"])
            ]
            out_text = json.dumps([{"name": c.name, "arguments": c.arguments} for c in calls])
            messages.append(Message(role="assistant", content="", tool_calls=calls))
            for call in calls:
                output = await _invoke(registry, workspace, call.name, call.arguments or {}, request.step.id)
                messages.append(Message(role="tool", tool_call_id=call.id, content=_tool_text(output)))
        else:
            out_text = turn["text"]
            messages.append(Message(role="assistant", content=out_text))
        entries.append({**turn, "usage": {"input_tokens": usage_in, "output_tokens": _tokens(len(out_text))}})
    return entries, messages


async def plan_mode_script(
    registry: ToolRegistry, workspace: Path, task: Task
) -> tuple[dict[str, Any], dict[str, Any], dict[str, list[Message]]]:
    """The planner's and the executor's scripts, with usage; and each llm step's modelled conversation."""
    catalog = registry.catalog()
    planner_in = prompt_tokens(planning_messages(task.goal, catalog), [])
    planner_out = _tokens(len(json.dumps(task.plan, default=str)))
    planner = {"planner": [{"plan": task.plan, "usage": {"input_tokens": planner_in, "output_tokens": planner_out}}]}
    draft = PlanDraft.model_validate(task.plan)
    outputs: dict[str, Any] = {}
    executor: dict[str, Any] = {}
    conversations: dict[str, list[Message]] = {}
    for step in draft.steps:  # the plans are written in dependency order
        if step.kind is StepKind.tool:
            outputs[step.id] = await _invoke(registry, workspace, step.tool or "", resolve(step.args, outputs), step.id)
            continue
        request = activity_io.LlmStepInput(
            run_id="model",
            revision=1,
            step=step,
            instructions=str(resolve(step.instructions, outputs)),
            inputs={d: outputs.get(d) for d in step.depends_on},
            model="model",
        )
        entries, messages = await conversation(registry, workspace, request, task.executor_turns[step.id])
        executor[step.id] = entries
        conversations[step.id] = messages
        final = entries[-1]["text"]
        outputs[step.id] = json.loads(final) if step.output_format.value == "json" else final
    return planner, {"executor": executor}, conversations


async def joint_script(registry: ToolRegistry, workspace: Path, task: Task) -> tuple[dict[str, Any], list[Message]]:
    catalog = registry.catalog()
    step = Step(
        id=JOINT_STEP_ID,
        title="Reach the goal in one loop",
        kind=StepKind.llm,
        instructions=task.goal,
        tools=catalog.names,
    )
    request = activity_io.LlmStepInput(
        run_id="model", revision=1, step=step, instructions=task.goal, inputs={}, model="model"
    )
    entries, messages = await conversation(registry, workspace, request, task.joint_turns)
    return {"executor": {JOINT_STEP_ID: entries}}, messages


# ---------------------------------------------------------------------------- the measure


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
        real_chars, model_chars = _message_chars(real), _message_chars(messages)
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
