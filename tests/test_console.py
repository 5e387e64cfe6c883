"""The review console (stratagem.console) over HTTP, against real runs on the dev server.

Requests go through httpx's ASGI transport on the test's own event loop (the app calls the same
Temporal client the harness uses), so each test sees exactly what a browser or a bot would get:
status codes, redirects, headers and the HTML itself.
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from datetime import timedelta
from typing import Any

import httpx
import pytest
from support.plans import step

from stratagem.client import start_run
from stratagem.console import AuthMode, IdentityConfig, Users, create_app
from stratagem.console.identity import SESSION_COOKIE, check_password, hash_password
from stratagem.domain.ledger import DecisionAction
from stratagem.domain.plan import PlanDraft
from stratagem.domain.run_types import Phase, RunInput

SECRET = b"test-secret"
XSS = "<img src=x onerror=alert(1)>"
# A browser sends its page's origin with every post; the console refuses a change without one
# unless it carries an API token (stratagem.console.guard, tests/test_console_attacks.py).
ORIGIN = {"Origin": "http://console.test"}


def console(
    harness: Any, mode: AuthMode = AuthMode.local, users: Users | None = None, *, peer: str | None = None, **extra: Any
) -> httpx.AsyncClient:
    identity = IdentityConfig(mode=mode, secret=SECRET, users=users or Users(), local_user="ops", **extra)
    app = create_app(harness.client, identity, store=harness.store)
    transport = httpx.ASGITransport(app=app, client=(peer or "127.0.0.1", 50000))
    return httpx.AsyncClient(transport=transport, base_url="http://console.test", headers=ORIGIN)


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, "the page carries no CSRF token"
    return found.group(1)


async def until(harness: Any, run: Any, check: Any) -> Any:
    return await harness.wait_for(run, check, timeout=30)


def awaiting(status: Any) -> bool:
    return status.phase is Phase.awaiting_approval


@pytest.mark.system
async def test_the_inbox_and_run_page_render_untrusted_text_as_text(dev_harness):
    plan = {"goal": f"pay {XSS}", "steps": [{**step("pay", "record", label=XSS), "title": XSS}]}
    run = await dev_harness.start(plan)
    await until(dev_harness, run, awaiting)
    async with console(dev_harness) as http:
        inbox = await http.get("/")
        assert inbox.status_code == 200
        assert run.id in inbox.text and "approval of revision 1" in inbox.text
        assert XSS not in inbox.text and "&lt;img src=x onerror=alert(1)&gt;" in inbox.text
        assert "script-src 'self'" in inbox.headers["content-security-policy"]
        page = await http.get(f"/runs/{run.id}")
        assert page.status_code == 200
        assert XSS not in page.text and page.text.count("&lt;img src=x onerror=alert(1)&gt;") >= 2
        assert 'data-kind="plan_approval"' in page.text
        api = await http.get("/api/inbox")
        assert [r["run_id"] for r in api.json()["runs"] if r["run_id"] == run.id] == [run.id]  # the newest first
        assert (await http.get("/openapi.json")).json()["info"]["title"] == "Stratagem review console"
        assert (await http.get("/docs")).status_code == 404  # its scripts would come from a CDN


@pytest.mark.system
async def test_a_form_decision_needs_the_persons_csrf_token_and_records_who_they_are(dev_harness):
    run = await dev_harness.start({"goal": "g", "steps": [step("one", "record", label="x")]})
    await until(dev_harness, run, awaiting)
    async with console(dev_harness) as http:
        page = await http.get(f"/runs/{run.id}")
        form = {"kind": "plan_approval", "revision": "1", "verdict": "approve", "comment": "fine"}
        forged = await http.post(f"/runs/{run.id}/decide", data=form)  # a cross-site form has no token
        assert forged.status_code == 403
        assert (await run.status()).phase is Phase.awaiting_approval
        # A name in the form changes nothing: the console decides who you are.
        done = await http.post(f"/runs/{run.id}/decide", data={**form, "by": "mallory", "csrf": csrf_of(page.text)})
        assert done.status_code == 303 and "done=" in done.headers["location"]
    assert (await run.result()).status is Phase.succeeded
    decision = (await run.ledger()).decisions[0]
    assert (decision.action, decision.by, decision.comment) == (DecisionAction.approve, "ops", "fine")


@pytest.mark.system
async def test_two_approvers_at_once_one_wins_the_other_is_told(dev_harness):
    run = await dev_harness.start({"goal": "g", "steps": [step("one", "record", label="x")]})
    await until(dev_harness, run, awaiting)
    async with console(dev_harness) as http:
        token = (await http.get("/api/whoami")).json()["csrf"]
        headers = {"X-Stratagem-CSRF": token}
        first, second = await asyncio.gather(
            http.post(f"/api/runs/{run.id}/approve", json={"revision": 1}, headers=headers),
            http.post(f"/api/runs/{run.id}/approve", json={"revision": 1}, headers=headers),
        )
    codes = sorted([first.status_code, second.status_code])
    assert codes == [200, 409], (first.text, second.text)
    loser = first if first.status_code == 409 else second
    assert "no plan is waiting for approval" in loser.json()["detail"]
    assert len([d for d in (await run.ledger()).decisions if d.action is DecisionAction.approve]) == 1


@pytest.mark.system
async def test_a_run_nobody_serves_gets_an_answer_not_a_hung_page(dev_env):
    run = await start_run(
        dev_env.client,
        RunInput(plan=PlanDraft.model_validate({"goal": "g", "steps": [step("one", "record", label="x")]})),
        task_queue=f"nobody-{uuid.uuid4().hex[:8]}",
    )
    identity = IdentityConfig(mode=AuthMode.local, secret=SECRET, users=Users(), local_user="ops")
    app = create_app(dev_env.client, identity, run_timeout=timedelta(seconds=1))
    transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 50000))
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://console.test", headers=ORIGIN) as http:
            page = await asyncio.wait_for(http.get(f"/runs/{run.id}"), 10)
            assert page.status_code == 503 and "did not answer the status query in time" in page.text
            events = await asyncio.wait_for(http.get(f"/api/runs/{run.id}/events"), 10)
            assert events.status_code == 503 and "did not answer the events query" in events.json()["detail"]
            stream = await asyncio.wait_for(http.get(f"/api/runs/{run.id}/stream"), 10)
            assert stream.text.startswith("event: error\n") and "did not answer the events query" in stream.text
            token = (await http.get("/api/whoami")).json()["csrf"]
            decision = http.post(
                f"/api/runs/{run.id}/approve", json={"revision": 1}, headers={"X-Stratagem-CSRF": token}
            )
            refused = await asyncio.wait_for(decision, 10)
            assert refused.status_code == 503 and "did not take the decision in time" in refused.json()["detail"]
    finally:
        await run.handle.terminate(reason="test finished")


@pytest.mark.system
async def test_users_sign_in_tokens_decide_over_rest_and_the_approver_list_applies(dev_harness, tmp_path):
    users = Users(path=tmp_path / "users.yaml")
    users.set_password("dana", "correct horse")
    users.set_password("erin", "battery staple")
    token = users.new_token("bot", "dana")
    users.save()
    assert Users.load(tmp_path / "users.yaml").token_user(token) == "dana"
    assert token not in (tmp_path / "users.yaml").read_text()  # only its hash is kept

    plan = {"goal": "g", "steps": [{**step("pay", "record", label="paid"), "requires_approval": True}]}
    run = await dev_harness.start(plan, approvers=["dana"])
    await until(dev_harness, run, awaiting)
    async with console(dev_harness, AuthMode.users, users) as http:
        assert (await http.get("/")).status_code == 303  # to the login form
        assert (await http.get("/api/inbox")).status_code == 401
        wrong = await http.post("/login", data={"name": "dana", "password": "nope", "next": "/"})
        assert "error=" in wrong.headers["location"] and SESSION_COOKIE not in wrong.cookies
        # erin may sign in, but the run's approver list does not name her.
        await http.post("/login", data={"name": "erin", "password": "battery staple", "next": "//evil.example"})
        page = await http.get(f"/runs/{run.id}")
        assert page.status_code == 200
        refused = await http.post(
            f"/runs/{run.id}/decide",
            data={"kind": "plan_approval", "revision": "1", "verdict": "approve", "csrf": csrf_of(page.text)},
        )
        assert "not+on+this+run%27s+approver+list" in refused.headers["location"]
        # With a cookie, the API wants the page's CSRF token too; a bearer token needs none.
        assert (await http.post(f"/api/runs/{run.id}/approve", json={"revision": 1})).status_code == 403
    async with console(dev_harness, AuthMode.users, users) as bot:
        bearer = {"Authorization": f"Bearer {token}"}
        assert (
            await bot.post(f"/api/runs/{run.id}/approve", json={"revision": 1}, headers={"Authorization": "Bearer x"})
        ).status_code == 401
        approved = await bot.post(f"/api/runs/{run.id}/approve", json={"revision": 1}, headers=bearer)
        assert approved.status_code == 200 and approved.json()["phase"] == "running"
        await until(dev_harness, run, lambda s: any(p.kind.value == "step_approval" for p in s.pending))
        step_ok = await bot.post(f"/api/runs/{run.id}/approve", json={"step_id": "pay"}, headers=bearer)
        assert step_ok.status_code == 200, step_ok.text
    assert (await run.result()).status is Phase.succeeded
    assert {d.by for d in (await run.ledger()).decisions} == {"dana"}


@pytest.mark.system
async def test_a_typed_answer_is_refused_then_taken_through_the_form(dev_harness):
    schema = {
        "type": "object",
        "properties": {"days": {"type": "integer", "minimum": 1}, "ok": {"enum": ["yes", "no"]}},
        "required": ["days", "ok"],
    }
    plan = {
        "goal": "g",
        "steps": [
            {"id": "terms", "title": "Terms", "kind": "human", "instructions": "Terms?", "answer_schema": schema}
        ],
    }
    run = await dev_harness.start(plan, auto_approve=True)
    await until(dev_harness, run, lambda s: bool(s.pending))
    async with console(dev_harness) as http:
        page = await http.get(f"/runs/{run.id}")
        assert 'name="field.days"' in page.text and '<option value="yes">' in page.text
        assert "selected>— choose one —</option>" in page.text  # no choice is made for the person
        form = {
            "kind": "human_answer",
            "step_id": "terms",
            "csrf": csrf_of(page.text),
        }
        refused = await http.post(f"/runs/{run.id}/decide", data={**form, "field.days": "0", "field.ok": "yes"})
        # The page again, with what was typed and the problem beside its field (a 303 lost both).
        assert refused.status_code == 422 and "less than the minimum of 1" in refused.text
        assert 'name="field.days" value="0"' in refused.text and '<option value="yes" selected>' in refused.text
        assert (await run.status()).pending  # still waiting
        taken = await http.post(f"/runs/{run.id}/decide", data={**form, "field.days": "30", "field.ok": "yes"})
        assert "done=" in taken.headers["location"]
    assert (await run.result()).outputs == {"terms": {"days": 30, "ok": "yes"}}


@pytest.mark.system
async def test_a_broken_edit_comes_back_with_its_problems_and_nothing_lost(dev_harness):
    run = await dev_harness.start({"goal": "g", "steps": [step("one", "record", label="x")]})
    await until(dev_harness, run, awaiting)
    async with console(dev_harness) as http:
        page = await http.get(f"/runs/{run.id}")
        edit = "goal: g\nsteps:\n  - id: one\n    title: one\n    tool: nope\n"
        broken = await http.post(
            f"/runs/{run.id}/revise", data={"plan": edit, "revision": "1", "csrf": csrf_of(page.text)}
        )
        assert broken.status_code == 422
        assert "unknown tool &#39;nope&#39;" in broken.text or "unknown tool 'nope'" in broken.text
        assert "tool: nope" in broken.text  # the edit is kept
        good = edit.replace("tool: nope", "tool: record\n    args: {label: y}")
        done = await http.post(
            f"/runs/{run.id}/revise", data={"plan": good, "revision": "1", "csrf": csrf_of(page.text)}
        )
        assert done.status_code == 303
    assert (await run.status()).revision == 2


@pytest.mark.system
async def test_the_event_stream_resumes_from_the_last_event_id(dev_harness):
    run = await dev_harness.start({"goal": "g", "steps": [step("one", "record", label="x")]}, auto_approve=True)
    await run.result()
    async with console(dev_harness) as http:
        whole = await http.get(f"/api/runs/{run.id}/stream")
        ids = [int(i) for i in re.findall(r"^id: (\d+)$", whole.text, re.M)]
        assert ids == sorted(ids) and len(ids) >= 5 and "event: end" in whole.text
        later = await http.get(f"/api/runs/{run.id}/stream", headers={"Last-Event-ID": str(ids[2])})
        assert [int(i) for i in re.findall(r"^id: (\d+)$", later.text, re.M)] == ids[3:]
        first = json.loads(re.search(r"^data: (.+)$", whole.text, re.M).group(1))
        assert first["kind"] == "run_started"


@pytest.mark.system
async def test_a_proxy_header_counts_only_from_the_trusted_proxy(dev_harness):
    identity = {"header": "X-Forwarded-User", "proxies": ["10.0.0.0/8"]}
    async with console(dev_harness, AuthMode.header, **identity, peer="10.1.2.3") as proxied:
        who = await proxied.get("/api/whoami", headers={"X-Forwarded-User": "lee"})
        assert who.json()["user"] == "lee"
    async with console(dev_harness, AuthMode.header, **identity, peer="192.168.1.9") as direct:
        assert (await direct.get("/api/whoami", headers={"X-Forwarded-User": "lee"})).status_code == 401


@pytest.mark.unit
def test_local_mode_refuses_a_non_loopback_address_and_passwords_are_hashed():
    from stratagem.common.errors import ConfigError

    with pytest.raises(ConfigError, match="loopback"):
        IdentityConfig(mode=AuthMode.local, secret=SECRET).check("0.0.0.0")
    IdentityConfig(mode=AuthMode.local, secret=SECRET).check("127.0.0.1")
    stored = hash_password("s3cret-pass")
    assert stored.startswith("scrypt$") and "s3cret" not in stored
    assert check_password("s3cret-pass", stored) and not check_password("s3cret-pas", stored)
    identity = IdentityConfig(mode=AuthMode.users, secret=SECRET)
    identity.users.set_password("dana", "correct horse")
    identity.users.set_password("erin", "battery staple")
    cookie = identity.session_cookie("dana")
    assert identity.session_user(cookie) == "dana"
    body, signature = cookie.rsplit(".", 1)
    forged = identity.session_cookie("erin").rsplit(".", 1)[0] + "." + signature  # erin's body, dana's signature
    assert identity.session_user(forged) is None and identity.session_user(body + ".x") is None
    assert identity.session_user(identity.session_cookie("dana", now=0)) is None  # expired


@pytest.mark.system
async def test_where_decisions_are_signed_the_console_signs_for_the_person_it_signed_in(dev_env, tmp_path, monkeypatch):
    from conftest import harness_for

    from stratagem.common.signing import Signer

    console_key = Signer.generate("console")
    monkeypatch.setenv("STRATAGEM_ISSUER_KEYS", console_key.public_line())
    monkeypatch.delenv("STRATAGEM_SIGNING_KEY", raising=False)
    async with harness_for(dev_env, tmp_path) as harness:
        run = await harness.start({"goal": "g", "steps": [step("one", "record", label="x")]})
        await until(harness, run, awaiting)
        identity = IdentityConfig(mode=AuthMode.local, secret=SECRET, local_user="ops")
        # A console whose key the workers were not given: its decisions are refused.
        rogue = create_app(harness.client, identity, signer=Signer.generate("rogue-console"), store=harness.store)
        signed = create_app(harness.client, identity, signer=console_key, store=harness.store)
        headers = {"X-Stratagem-CSRF": identity.csrf_token("ops")}
        for app, expected in ((rogue, 409), (signed, 200)):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://console.test", headers=ORIGIN) as http:
                answer = await http.post(f"/api/runs/{run.id}/approve", json={"revision": 1}, headers=headers)
                assert answer.status_code == expected, answer.text
        assert (await run.result()).status is Phase.succeeded
        [approval] = (await run.ledger()).decisions
        assert (approval.by, approval.signed_by) == ("ops", "console")


@pytest.mark.system
async def test_the_console_command_as_a_new_user_runs_it(cli_env, tmp_path):
    """`stratagem console-user`, `console-token` and `console` as processes: a person added, a
    token made and shown once, the console serving a sign-in, and its refusals one line each."""
    import subprocess
    import sys

    from support.cli import acli, one_line_error
    from support.ports import free_port_pair, wait_listening

    env, _ = cli_env
    users = str(tmp_path / "users.yaml")
    one_line_error(await acli("console", "--auth", "users", "--users", users, env=env), "names nobody yet")
    one_line_error(await acli("console", "--host", "0.0.0.0", env=env), "listens only on a loopback address")
    one_line_error(await acli("console", "--auth", "header", env=env), "--auth header needs --trusted-proxy")
    behind_proxy = ("console", "--auth", "header", "--trusted-proxy", "127.0.0.1")
    one_line_error(await acli(*behind_proxy, env=env), "--auth header needs --public-url")
    one_line_error(await acli(*behind_proxy, "--public-url", "review.example.com", env=env), "scheme, host and port")
    one_line_error(await acli("console-user", "nobody", "--remove", "--users", users, env=env), "is not in")
    added = subprocess.run(
        [sys.executable, "-m", "stratagem.cli", "console-user", "dana", "--users", users, "--password-stdin"],
        input="short\n",
        capture_output=True,
        text=True,
        env=env,
    )
    assert added.returncode == 2 and "at least 8 characters" in added.stderr
    added = subprocess.run(
        [sys.executable, "-m", "stratagem.cli", "console-user", "dana", "--users", users, "--password-stdin"],
        input="correct horse\n",
        capture_output=True,
        text=True,
        env=env,
    )
    assert added.returncode == 0, added.stderr
    token = await acli("console-token", "bot", "--user", "dana", "--users", users, env=env)
    assert token.returncode == 0 and token.stdout.startswith("stg_")
    assert token.stdout.strip() not in (tmp_path / "users.yaml").read_text()

    port = free_port_pair()
    process = subprocess.Popen(
        [sys.executable, "-m", "stratagem.cli", "console", "--auth", "users", "--users", users, "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        await asyncio.to_thread(wait_listening, port, 30)
        origin = {"Origin": f"http://127.0.0.1:{port}"}
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", headers=origin) as http:
            assert (await http.get("/login")).status_code == 200
            assert (await http.get("/api/inbox")).status_code == 401
            me = await http.get("/api/whoami", headers={"Authorization": f"Bearer {token.stdout.strip()}"})
            assert me.json()["user"] == "dana" and "server" not in me.headers
            signed_in = await http.post("/login", data={"name": "dana", "password": "correct horse", "next": "/"})
            assert signed_in.status_code == 303 and SESSION_COOKIE in signed_in.cookies
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.mark.workflow
async def test_a_console_signs_with_its_homes_issuer_key_which_that_homes_workers_trust(harness):
    """Nothing configured (the quickstart): the console signs as its home's issuer, and the run
    records the person it signed in with that issuer as the proof."""
    run = await harness.start({"goal": "g", "steps": [step("one", "record", label="x")]})
    await until(harness, run, awaiting)
    identity = IdentityConfig(mode=AuthMode.local, secret=SECRET, local_user="ops")
    app = create_app(harness.client, identity, store=harness.store)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://console.test", headers=ORIGIN) as http:
        headers = {"X-Stratagem-CSRF": identity.csrf_token("ops")}
        answer = await http.post(f"/api/runs/{run.id}/approve", json={"revision": 1}, headers=headers)
        assert answer.status_code == 200, answer.text
    assert (await run.result()).status is Phase.succeeded
    [approval] = (await run.ledger()).decisions
    assert (approval.by, approval.signed_by) == ("ops", "console")


@pytest.mark.system
def test_a_command_that_serves_no_console_does_not_import_its_web_framework() -> None:
    """FastAPI took 0.3 s of every command's 1.5 s start (`stratagem mcp` reads the console's
    guard and users file, which once loaded the whole app); only `stratagem console` needs it."""
    import subprocess
    import sys

    code = (
        "import sys, stratagem.cli, stratagem.worker; print('fastapi' in sys.modules);"
        " from stratagem.console import create_app, Users; print('fastapi' in sys.modules)"
    )
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert shown.stdout.split() == ["False", "True"]
