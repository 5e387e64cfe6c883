"""Processes from the command line (issue #40, items 1 to 3), as real processes against the dev
server: inputs refused before anything starts, the library's commands, bulk runs from a CSV file
that start each row once, `list --process`, and a CSV cell that tries to become a reference."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import pytest
import yaml
from google.protobuf.duration_pb2 import Duration
from support.cli import TOOLS, acli, one_line_error
from temporalio.api.workflowservice.v1 import RegisterNamespaceRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from stratagem.client import get_run
from stratagem.domain.run_types import Phase

pytestmark = pytest.mark.system

PAYOUT = {
    "process": {"name": "payout", "version": "2", "description": "Pay a payee, once approved."},
    "inputs": {
        "payee": {"type": "string", "description": "Who is paid"},
        "amount": {"type": "integer", "minimum": 1, "maximum": 5000, "description": "In euros"},
        "note": {"type": "string", "default": "none"},
    },
    "goal": "Pay ${inputs.payee} ${inputs.amount} EUR",
    "steps": [
        {"id": "secret", "title": "Read the secret", "tool": "record", "args": {"label": "s3cr3t"}},
        {
            "id": "pay",
            "title": "Pay ${inputs.payee}",
            "tool": "record",
            "args": {"label": "${inputs.note}"},
            "depends_on": ["secret"],
        },
    ],
}


def write(folder: Path, name: str, document: dict) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return str(path)


async def exists(client: Client, run_id: str) -> bool:
    try:
        await client.get_workflow_handle(run_id).describe()
    except RPCError as exc:
        if exc.status is RPCStatusCode.NOT_FOUND:
            return False
        raise
    return True


async def test_wrong_inputs_are_refused_in_one_line_before_anything_starts(cli_env, tmp_path):
    env, harness = cli_env
    plan = write(tmp_path, "payout.yaml", PAYOUT)
    refused = await acli(
        "run", *TOOLS, "--plan", plan, "--id", "proc-refused", "--detach",
        "--input", "amount=9000", "--input", "colour=red", "--input", "payee",
        env=env,
    )  # fmt: skip
    one_line_error(refused, "payout v2 refused its inputs: ")
    assert len(refused.stderr.strip().splitlines()) == 1
    for problem in (
        "payout has no input 'colour' (its inputs: payee, amount, note)",
        "--input 'payee' is not NAME=VALUE",
        "input 'amount': 9000 is greater than the maximum of 5000",
        "input 'payee' is required (Who is paid)",
    ):
        assert problem in refused.stderr
    not_a_number = await acli(
        "run", *TOOLS, "--plan", plan, "--id", "proc-refused", "--detach", "--input", "amount=lots", env=env
    )
    one_line_error(not_a_number, "input 'amount': 'lots' is not a whole number")
    assert not await exists(harness.client, "proc-refused")

    # --input wins over --inputs FILE; the file's text is typed as the input declares.
    values = write(tmp_path, "values.yaml", {"payee": "ada", "amount": "70"})
    started = await acli(
        "run", *TOOLS, "--plan", plan, "--inputs", values, "--input", "amount=120",
        "--id", "proc-ok", "--detach", "--json", "--auto-approve",
        env=env,
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    run = get_run(harness.client, "proc-ok")
    result = await run.result()
    assert result.status is Phase.succeeded
    status = await run.status()
    assert status.process is not None and status.process.inputs == {"payee": "ada", "amount": 120, "note": "none"}
    description = await run.handle.describe()
    assert await description.memo_value("process") == {"name": "payout", "version": "2"}
    assert description.typed_search_attributes.get(_process_key()) == "payout"

    # --input belongs to a process: on a plain plan or a goal it is a clear error.
    plain = write(tmp_path, "plain.yaml", {"goal": "g", "steps": [{"id": "a", "title": "a", "tool": "record", "args": {"label": "x"}}]})  # fmt: skip
    one_line_error(
        await acli("run", *TOOLS, "--plan", plain, "--input", "a=b", env=env), f"plan file '{plain}' declares no inputs"
    )
    one_line_error(
        await acli("run", "pay the vendor", "--planner", "scripted:x.yaml", "--input", "a=b", env=env),
        "a goal takes no inputs",
    )
    # Nor does --time-zone, which only a process's nominal-time dates read: not silently ignored.
    one_line_error(
        await acli("run", *TOOLS, "--plan", plain, "--time-zone", "Europe/Berlin", env=env),
        "a plain plan or a goal has none",
    )


def _process_key():
    from stratagem.client import PROCESS_KEY

    return PROCESS_KEY


async def test_the_library_lists_and_shows_processes_and_runs_one_by_name(cli_env, tmp_path):
    env, harness = cli_env
    folder = tmp_path / "library"
    write(folder, "payout-2.yaml", PAYOUT)
    write(folder, "payout-10.yaml", {**PAYOUT, "process": {**PAYOUT["process"], "version": "10"}})
    env = {**env, "STRATAGEM_PROCESSES": str(folder)}

    listed = await acli("processes", "list", env=env)
    assert listed.returncode == 0, listed.stderr
    line = next(line for line in listed.stdout.splitlines() if line.startswith("payout"))
    assert line.split()[:2] == ["payout", "10"] and "(+1 older)" in line and "payee, amount, note" in line
    as_json = json.loads((await acli("processes", "list", "--json", env=env)).stdout)
    assert [(p["name"], p["version"], p["versions"]) for p in as_json["processes"]] == [("payout", "10", ["2", "10"])]

    shown = await acli("processes", "show", "payout", "--version", "2", env=env)
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    assert text.startswith("payout v2  (versions: 2, 10)")
    assert "amount  integer >= 1, <= 5000, required  In euros" in " ".join(text.split("\n"))
    assert "note    string, default none" in text
    assert "pay: Pay ${inputs.payee} (tool record, after secret)" in text
    assert "run it: stratagem run payout --input payee=... --input amount=..." in text
    data = json.loads((await acli("processes", "show", "payout", "--json", env=env)).stdout)
    assert data["version"] == "10" and data["inputs_schema"]["required"] == ["payee", "amount"]
    assert len(data["digest"]) == 64

    one_line_error(await acli("processes", "show", "payot", env=env), "did you mean payout?")
    one_line_error(await acli("processes", "show", "payout", "--version", "3", env=env), "its versions: 2, 10")
    # A mistyped name where a goal goes is refused, even with a planner that would plan it.
    typo = await acli("run", "payot", "--planner", "scripted:planner.yaml", "--input", "payee=ada", env=env)
    one_line_error(typo, "no process called 'payot'")
    assert "a goal for the planner is a sentence" in typo.stderr
    one_line_error(await acli("run", plan_path := str(folder / "payout-2.yaml"), env=env), f"write --plan {plan_path}")

    # By name (the highest version), and by --process with --version and --processes DIR.
    started = await acli(
        "run", "payout", *TOOLS, "--input", "payee=bo", "--input", "amount=5",
        "--id", "proc-named", "--detach", "--auto-approve",
        env=env,
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    assert (await get_run(harness.client, "proc-named").result()).status is Phase.succeeded
    status = await get_run(harness.client, "proc-named").status()
    assert status.process is not None and status.process.version == "10"
    other = {k: v for k, v in env.items() if k != "STRATAGEM_PROCESSES"}
    chosen = await acli(
        "run", "--process", "payout", "--version", "2", "--processes", str(folder), *TOOLS,
        "--input", "payee=cy", "--input", "amount=6", "--id", "proc-v2", "--detach", "--auto-approve",
        env=other,
    )  # fmt: skip
    assert chosen.returncode == 0, chosen.stderr
    assert (await get_run(harness.client, "proc-v2").result()).status is Phase.succeeded
    status = await get_run(harness.client, "proc-v2").status()
    assert status.process is not None and status.process.version == "2"


async def test_a_bulk_csv_starts_every_good_row_once_and_reports_the_bad_one_by_line(cli_env, tmp_path):
    env, harness = cli_env
    name = f"payout-{uuid.uuid4().hex[:6]}"  # the dev server is shared: this test's runs alone
    plan = write(tmp_path, "payout.yaml", {**PAYOUT, "process": {**PAYOUT["process"], "name": name}})
    rows = tmp_path / "rows.csv"
    rows.write_text("payee,amount,note\nada,10,first\nbo,lots,second\n\ncy,30,\n")

    first = await acli("run", *TOOLS, "--plan", plan, "--inputs", str(rows), "--auto-approve", env=env)
    assert first.returncode == 2, first
    lines = first.stdout.splitlines()
    assert [line.split(":")[0] for line in lines if line.startswith("line ")] == ["line 2", "line 3", "line 5"]
    assert "line 3: refused: input 'amount': 'lots' is not a whole number" in first.stdout
    assert f"3 rows of {name} v2: 2 started, 0 already started, 1 refused" in first.stdout
    ids = [line.split(": ")[2] for line in lines if ": started: " in line]
    assert len(ids) == 2 and all(i.startswith(f"{name}-") and len(i) == len(name) + 13 for i in ids)
    results = [await get_run(harness.client, i).result() for i in ids]
    assert [r.status for r in results] == [Phase.succeeded, Phase.succeeded]
    # An empty cell gives no value: the default applies.
    assert sorted(c["label"] for c in harness.calls() if c["label"] != "s3cr3t") == ["first", "none"]

    again = await acli("run", *TOOLS, "--plan", plan, "--inputs", str(rows), "--auto-approve", "--json", env=env)
    assert again.returncode == 2
    report = json.loads(again.stdout)
    assert (report["started"], report["already_started"], report["refused"]) == (0, 2, 1)
    assert [r["line"] for r in report["rows"] if r["outcome"] == "already started"] == [2, 5]
    assert [r["run_id"] for r in report["rows"] if r["run_id"]] == ids
    assert len([c for c in harness.calls() if c["label"] == "first"]) == 1  # nothing ran twice

    listed = json.loads((await acli("list", "--process", name, "--json", env=env)).stdout)
    assert sorted(r["run_id"] for r in listed) == sorted(ids)
    assert all(r["process"] == {"name": name, "version": "2"} for r in listed)
    text = await acli("list", "--process", name, env=env)
    assert all(i in text.stdout for i in ids) and "v2" in text.stdout

    # --input gives every row its value (a new value: new ids, new runs); a wrong one refuses the file.
    noted = await acli("run", *TOOLS, "--plan", plan, "--inputs", str(rows), "--input", "note=bulk", "--json", env=env)
    outcome = json.loads(noted.stdout)
    assert (outcome["started"], outcome["refused"]) == (2, 1) and not set(ids) & {r["run_id"] for r in outcome["rows"]}
    one_line_error(
        await acli("run", *TOOLS, "--plan", plan, "--inputs", str(rows), "--input", "amount=x", env=env),
        "input 'amount': 'x' is not a whole number",
    )
    assert len(json.loads((await acli("list", "--process", name, "--json", env=env)).stdout)) == 4
    for row in outcome["rows"]:
        if row["run_id"]:
            await get_run(harness.client, row["run_id"]).cancel()

    # A column no input has: the whole file is refused and nothing starts.
    wrong = tmp_path / "wrong.csv"
    wrong.write_text("payee,amount,iban\nzed,1,DE00\n")
    one_line_error(
        await acli("run", *TOOLS, "--plan", plan, "--inputs", str(wrong), env=env), "column(s) 'iban' name no input"
    )
    assert len(json.loads((await acli("list", "--process", name, "--json", env=env)).stdout)) == 4


async def test_a_csv_cell_that_looks_like_a_reference_reaches_the_tool_as_text(cli_env, tmp_path):
    """The attack: a row of a CSV file (written by whoever fills the spreadsheet) names another
    step's output. The value is data: the tool gets the literal text, never the secret."""
    env, harness = cli_env
    name = f"leak-{uuid.uuid4().hex[:6]}"
    plan = write(tmp_path, "payout.yaml", {**PAYOUT, "process": {**PAYOUT["process"], "name": name}})
    rows = tmp_path / "rows.csv"
    rows.write_text('payee,amount,note\neve,1,${secret}\neve,2,"paid to ${secret.x} and $${secret}"\n')
    done = await acli("run", *TOOLS, "--plan", plan, "--inputs", str(rows), "--auto-approve", "--json", env=env)
    assert done.returncode == 0, done.stderr
    ids = [r["run_id"] for r in json.loads(done.stdout)["rows"]]
    results = [await get_run(harness.client, i).result() for i in ids]
    assert [r.status for r in results] == [Phase.succeeded, Phase.succeeded]
    assert [r.outputs["pay"] for r in results] == ["${secret}", "paid to ${secret.x} and $${secret}"]
    labels = [c["label"] for c in harness.calls()]
    assert labels.count("s3cr3t") == 2 and "${secret}" in labels
    assert "paid to ${secret.x} and $${secret}" in labels


async def test_list_by_process_reads_memos_where_the_namespace_lacks_the_attribute(dev_env, cli_env, tmp_path):
    env, _ = cli_env
    namespace = f"noattr-{uuid.uuid4().hex[:8]}"
    await dev_env.client.workflow_service.register_namespace(
        RegisterNamespaceRequest(namespace=namespace, workflow_execution_retention_period=Duration(seconds=86400))
    )
    env = {**env, "TEMPORAL_NAMESPACE": namespace}
    plan = write(tmp_path, "payout.yaml", PAYOUT)
    for _ in range(50):  # a new namespace is served once the server's cache has it
        started = await acli(
            "run", *TOOLS, "--plan", plan, "--input", "payee=ada", "--input", "amount=1",
            "--id", "proc-memo", "--detach",
            env=env,
        )  # fmt: skip
        if started.returncode == 0:
            break
        await asyncio.sleep(0.2)
    assert started.returncode == 0, started.stderr
    listed = await acli("list", "--process", "payout", "--json", env=env)
    assert [r["run_id"] for r in json.loads(listed.stdout)] == ["proc-memo"]
    assert "has no StratagemProcess search attribute" in listed.stderr
    assert json.loads((await acli("list", "--process", "other", "--json", env=env)).stdout) == []
    client = await Client.connect(dev_env.client.service_client.config.target_host, namespace=namespace)
    await client.get_workflow_handle("proc-memo").terminate(reason="test finished")


async def test_the_vendor_csv_onboards_its_three_vendors_once_each(dev_env, tmp_path):
    """The example as its README runs it: one run per vendor of vendors.csv, each its own vendor
    record, letter and payment; the same command again onboards nobody twice."""
    from conftest import cli_environment, harness_for

    from stratagem.tools import ToolRegistry

    example = Path(__file__).resolve().parent.parent / "examples" / "vendor_onboarding"
    registry = ToolRegistry.from_modules([str(example / "tools.py")])
    async with harness_for(dev_env, tmp_path, registry) as harness:
        env = cli_environment(dev_env, harness, tmp_path / "home")
        plan, rows = str(example / "plan.yaml"), str(example / "vendors.csv")
        done = await acli("run", "--plan", plan, "--inputs", rows, "--auto-approve", "--json", env=env)
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        assert (report["process"], report["started"], report["refused"]) == ("vendor-onboarding", 3, 0)
        results = [await get_run(harness.client, row["run_id"]).result() for row in report["rows"]]
        assert [r.status for r in results] == [Phase.succeeded] * 3
        again = json.loads((await acli("run", "--plan", plan, "--inputs", rows, "--json", env=env)).stdout)
        assert (again["started"], again["already_started"]) == (0, 3)
    vendors = sorted(json.loads(p.read_text())["name"] for p in (harness.workspace / "vendors").glob("*.json"))
    assert vendors == ["ACME Supplies GmbH", "Atelier Lumière SARL", "Van Dijk Transport B.V."]
    ledger = (harness.workspace / "payments" / "ledger.csv").read_text().splitlines()
    assert sorted(line.split(",")[2] for line in ledger[1:]) == ["1200.00", "2400.00", "850.50"]
    letters = sorted(p.read_text().splitlines()[0] for p in (harness.workspace / "letters").glob("*.txt"))
    assert letters[0].startswith("To: ACME Supplies GmbH <accounts@acme-supplies.example>, vendor id V-")
