"""Attacks on the review console (issue #35, items 1, 6 and 10), performed against real servers.

The console runs as a person runs it: `stratagem console` as a process, or the same app under
uvicorn on a free loopback port, in front of the dev server and a real worker. Every attack is a
real HTTP request (httpx) carrying what an attacker's page or a former colleague would send: a
rebound Host, another site's Origin, a removed person's cookie, a logged-out cookie, a cookie from
before a password change. Each proves the effect did not happen: the run's plan still waits, and
the `pay` tool's own log (harness.calls()) shows no payment. Each also shows the same request
going through when it is legitimate, so the test would fail if the console let everything pass
or refused everything.

Decisions the console forwards are signed with a console key the worker lists as an issuer, as a
deployment that requires signed decisions configures it.
"""

from __future__ import annotations

import asyncio
import getpass
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import uvicorn
import yaml
from conftest import cli_environment, harness_for
from support.cli import acli
from support.ports import wait_listening

from stratagem.common.signing import Signer
from stratagem.console import AuthMode, IdentityConfig, Site, Users, create_app
from stratagem.console.identity import SESSION_COOKIE
from stratagem.domain.run_types import Phase

pytestmark = pytest.mark.system

PAYMENT = {
    "goal": "pay the vendor",
    "steps": [{"id": "pay", "title": "Pay ACME", "tool": "pay", "args": {"amount": 99999, "to": "ACME"}}],
}
EVIL = "rebind.evil.example"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def payments(harness: Any) -> list[dict[str, Any]]:
    return [call for call in harness.calls() if call["tool"] == "pay"]


async def plan_still_waits(run: Any) -> None:
    status = await run.status()
    assert status.phase is Phase.awaiting_approval, status.phase
    assert [p.kind.value for p in status.pending] == ["plan_approval"]


@pytest.fixture
async def world(dev_env, tmp_path, monkeypatch):
    """A worker that trusts the console's key, a run waiting for its plan's approval, the key."""
    key = Signer.generate("console")
    monkeypatch.setenv("STRATAGEM_ISSUER_KEYS", key.public_line())
    async with harness_for(dev_env, tmp_path) as harness:
        # The console's local user in `local` mode is whoever runs the tests.
        run = await harness.start(PAYMENT, approvers=["dana", "lee", "ops", getpass.getuser()])
        await harness.wait_for(run, lambda s: s.phase is Phase.awaiting_approval)
        yield harness, run, key


@asynccontextmanager
async def serving(app: Any) -> AsyncIterator[str]:
    """The app under uvicorn on a free loopback port, configured as `stratagem console` does."""
    port = free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", proxy_headers=False, server_header=False
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


def users_console(harness: Any, key: Signer, users: Users, site: Site | None = None) -> Any:
    identity = IdentityConfig(mode=AuthMode.users, secret=b"attack-test", users=users)
    return create_app(harness.client, identity, signer=key, store=harness.store, site=site)


def browser(base: str, cookie: str | None = None) -> httpx.AsyncClient:
    """A browser on the console's own page: it sends the page's Origin, and the cookie it holds."""
    return httpx.AsyncClient(
        base_url=base, headers={"Origin": base}, cookies={SESSION_COOKIE: cookie} if cookie else None
    )


async def sign_in(base: str, name: str, password: str) -> tuple[str, str]:
    """A person signing in as a browser does: their session cookie, and the CSRF token a page gives."""
    async with browser(base) as http:
        done = await http.post("/login", data={"name": name, "password": password, "next": "/"})
        assert done.status_code == 303 and SESSION_COOKIE in done.cookies, done.text
        me = await http.get("/api/whoami")  # the browser keeps the cookie it was given
        assert me.json()["user"] == name
        return done.cookies[SESSION_COOKIE], me.json()["csrf"]


async def whoami(base: str, cookie: str) -> int:
    async with browser(base, cookie) as http:
        return (await http.get("/api/whoami")).status_code


async def approve_with(base: str, run: Any, cookie: str, csrf: str) -> httpx.Response:
    async with browser(base, cookie) as http:
        return await http.post(f"/api/runs/{run.id}/approve", json={"revision": 1}, headers={"X-Stratagem-CSRF": csrf})


async def pay_through(base: str, harness: Any, run: Any, headers: dict[str, str]) -> None:
    """The legitimate path: approve the plan, then the payment's own gate if it has one; it pays."""
    async with httpx.AsyncClient(base_url=base, headers=headers) as http:
        plan = await http.post(f"/api/runs/{run.id}/approve", json={"revision": 1})
        assert plan.status_code == 200, plan.text
        status = await harness.wait_for(run, lambda s: s.phase.finished or bool(s.pending))
        if status.pending:
            gate = await http.post(f"/api/runs/{run.id}/approve", json={"step_id": "pay"})
            assert gate.status_code == 200, gate.text
    assert (await run.result()).status is Phase.succeeded
    assert [(p["amount"], p["to"]) for p in payments(harness)] == [(99999, "ACME")]


# ------------------------------------------------------------------ item 1: Host and Origin


async def test_a_rebound_name_gets_neither_the_csrf_token_nor_a_decision(world, tmp_path):
    """`stratagem console` (local mode, as its owner starts it) asked under names an attacker's
    page would use once its DNS points at 127.0.0.1: nothing is read, nothing decided."""
    harness, run, key = world
    (tmp_path / "console.key").write_text(key.private_line())
    env = {
        **cli_environment(harness.env, harness, tmp_path / "home"),
        "STRATAGEM_SIGNING_KEY": str(tmp_path / "console.key"),
    }
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "stratagem.cli", "console", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        await asyncio.to_thread(wait_listening, port, 30)
        async with httpx.AsyncClient(base_url=base) as http:
            own = await http.get("/api/whoami")
            assert own.status_code == 200
            csrf = own.json()["csrf"]  # the attacker's best case: it already holds the token
            for host in (f"{EVIL}:{port}", EVIL, f"localhost.:{port}", f"127.0.0.1.nip.io:{port}", "localhost:1"):
                forged = {"Host": host, "Origin": f"http://{host}"}
                whoami = await http.get("/api/whoami", headers=forged)
                assert whoami.status_code == 421 and "csrf" not in whoami.text, (host, whoami.text)
                assert "does not answer to the name" in whoami.json()["detail"]
                assert (await http.get("/", headers=forged)).status_code == 421
                api = await http.post(
                    f"/api/runs/{run.id}/approve", json={"revision": 1}, headers={**forged, "X-Stratagem-CSRF": csrf}
                )
                assert api.status_code == 421, api.text
                form = {"kind": "plan_approval", "revision": "1", "verdict": "approve", "csrf": csrf}
                assert (await http.post(f"/runs/{run.id}/decide", data=form, headers=forged)).status_code == 421
        await plan_still_waits(run)
        assert payments(harness) == []
        # The console's own names still work, and the same decision pays: the refusals above were the Host's.
        await pay_through(base, harness, run, {"Origin": base, "X-Stratagem-CSRF": csrf, "Host": f"localhost:{port}"})
    finally:
        process.terminate()
        process.wait(timeout=10)


async def test_a_change_from_another_sites_page_is_refused_even_with_the_token(world):
    harness, run, key = world
    identity = IdentityConfig(mode=AuthMode.local, secret=b"attack-test", local_user="ops")
    users = Users()
    token = users.new_token("bot", "ops")
    identity.users = users
    app = create_app(harness.client, identity, signer=key, store=harness.store)
    async with serving(app) as base, httpx.AsyncClient(base_url=base) as http:
        csrf = (await http.get("/api/whoami")).json()["csrf"]
        form = {"kind": "plan_approval", "revision": "1", "verdict": "approve", "csrf": csrf}
        plan = "goal: g\nsteps:\n  - {id: pay, title: pay, tool: pay, args: {amount: 1, to: MALLORY}}\n"
        origins = [
            {"Origin": "http://evil.example"},
            {"Origin": "null"},  # a sandboxed frame, a data: page
            {"Origin": base.replace("http:", "https:")},  # not the console's scheme
            {"Referer": "http://evil.example/page"},  # no Origin: the Referer decides
            {},  # neither, with the local user's ambient identity: a browser's request stripped of both
        ]
        for where in origins:
            with_csrf = {**where, "X-Stratagem-CSRF": csrf}
            asked = [
                await http.post(f"/runs/{run.id}/decide", data=form, headers=where),
                await http.post(f"/runs/{run.id}/revise", data={"plan": plan, "csrf": csrf}, headers=where),
                await http.post(f"/api/runs/{run.id}/reject", json={"reason": "x"}, headers=with_csrf),
                await http.post(f"/api/runs/{run.id}/approve", json={"revision": 1}, headers=with_csrf),
            ]
            if where:  # a token does not make another site's page trusted either
                bearer = {**where, "Authorization": f"Bearer {token}"}
                asked.append(await http.post(f"/api/runs/{run.id}/approve", json={"revision": 1}, headers=bearer))
            for answer in asked:
                assert answer.status_code == 403, (where, answer.request.url, answer.text)
                assert len(answer.json()["detail"].splitlines()) == 1
        await plan_still_waits(run)
        assert (await run.status()).revision == 1 and payments(harness) == []
        # A script with its token and no Origin is what the API is for: it pays.
        await pay_through(base, harness, run, {"Authorization": f"Bearer {token}"})


async def test_signing_in_from_another_site_sets_no_session(world, tmp_path):
    """Login CSRF: another site's page signing the browser in as the attacker's account."""
    harness, run, key = world
    users = Users(path=tmp_path / "users.yaml")
    users.set_password("dana", "correct horse")
    users.save()
    async with serving(users_console(harness, key, users)) as base, httpx.AsyncClient(base_url=base) as http:
        form = {"name": "dana", "password": "correct horse", "next": "/"}
        for where in ({"Origin": "http://evil.example"}, {"Referer": "http://evil.example/"}, {}):
            refused = await http.post("/login", data=form, headers=where)
            assert refused.status_code == 403 and SESSION_COOKIE not in refused.cookies, where
        cookie, _ = await sign_in(base, "dana", "correct horse")  # from the console's own page
        assert cookie


async def test_behind_a_proxy_only_the_public_url_and_the_consoles_own_names_count(world):
    """`--auth header` behind a proxy that forwards the public Host: --public-url names it."""
    harness, run, key = world
    identity = IdentityConfig(mode=AuthMode.header, secret=b"attack-test", proxies=["127.0.0.1"])
    site = Site.configure("127.0.0.1", ["https://review.example.com"])
    app = create_app(harness.client, identity, signer=key, store=harness.store, site=site)
    async with serving(app) as base, httpx.AsyncClient(base_url=base) as proxy:
        who = {"X-Forwarded-User": "dana"}
        csrf = (await proxy.get("/api/whoami", headers={**who, "Host": "review.example.com"})).json()["csrf"]
        for host, origin in (
            ("review.example.com.evil.example", "https://review.example.com.evil.example"),
            ("evil.example", "https://review.example.com"),  # the right Origin does not fix a wrong Host
            ("review.example.com", "http://review.example.com"),  # TLS stripped: another origin
            ("review.example.com", "https://review.example.com:8443"),
        ):
            headers = {**who, "Host": host, "Origin": origin}
            answer = await proxy.post(
                f"/api/runs/{run.id}/approve", json={"revision": 1}, headers={**headers, "X-Stratagem-CSRF": csrf}
            )
            assert answer.status_code in (403, 421), (host, origin, answer.text)
        await plan_still_waits(run)
        assert payments(harness) == []
        public = {**who, "Host": "review.example.com", "Origin": "https://review.example.com", "X-Stratagem-CSRF": csrf}
        await pay_through(base, harness, run, public)


# ------------------------------------------------------------------ item 6: sessions end with their person


async def test_a_removed_persons_cookie_and_token_stop_working_at_once(world, tmp_path):
    harness, run, key = world
    path = tmp_path / "users.yaml"
    users = Users(path=path)
    for name in ("dana", "lee", "erin"):
        users.set_password(name, f"{name}-password")
    token = users.new_token("dana-bot", "dana")
    users.save()
    env = cli_environment(harness.env, harness, tmp_path / "home")
    async with serving(users_console(harness, key, users)) as base:
        dana, dana_csrf = await sign_in(base, "dana", "dana-password")
        lee, lee_csrf = await sign_in(base, "lee", "lee-password")
        removed = await acli("console-user", "dana", "--remove", "--users", str(path), env=env)
        assert removed.returncode == 0 and "with 1 API token" in removed.stdout, removed
        # lee is removed by hand, as an operator might edit the file.
        data = yaml.safe_load(path.read_text())
        del data["users"]["lee"]
        path.write_text(yaml.safe_dump(data))
        for cookie, csrf in ((dana, dana_csrf), (lee, lee_csrf)):
            assert await whoami(base, cookie) == 401
            assert (await approve_with(base, run, cookie, csrf)).status_code in (401, 403)
        async with httpx.AsyncClient(base_url=base) as http:
            bot = await http.post(
                f"/api/runs/{run.id}/approve", json={"revision": 1}, headers={"Authorization": f"Bearer {token}"}
            )
            assert bot.status_code == 401, bot.text
        erin, _ = await sign_in(base, "erin", "erin-password")  # the file still works for everyone else
        assert erin
    # A console started again from the same file refuses them as well.
    async with serving(users_console(harness, key, Users.load(path))) as base:
        assert (await approve_with(base, run, dana, dana_csrf)).status_code in (401, 403)
        await plan_still_waits(run)
        assert payments(harness) == []


async def test_logging_out_ends_every_session_of_that_person(world, tmp_path):
    harness, run, key = world
    users = Users(path=tmp_path / "users.yaml")
    users.set_password("dana", "dana-password")
    users.set_password("lee", "lee-password")
    users.save()
    async with serving(users_console(harness, key, users)) as base:
        laptop, laptop_csrf = await sign_in(base, "dana", "dana-password")
        phone, phone_csrf = await sign_in(base, "dana", "dana-password")  # a second browser
        lee, lee_csrf = await sign_in(base, "lee", "lee-password")
        async with browser(base, laptop) as http:
            out = await http.post("/logout", data={"csrf": laptop_csrf})
            assert out.status_code == 303 and out.headers["location"] == "/login"
        for cookie in (laptop, phone):
            assert await whoami(base, cookie) == 401
        assert (await approve_with(base, run, phone, phone_csrf)).status_code in (401, 403)
        await plan_still_waits(run)
        assert payments(harness) == []
        # Only dana's sessions ended: lee's still decides, and dana can sign in again.
        assert (await sign_in(base, "dana", "dana-password"))[0]
        assert (await approve_with(base, run, lee, lee_csrf)).status_code == 200
    assert "sessions" in (tmp_path / "users.yaml").read_text()


async def test_a_new_password_ends_every_session(world, tmp_path):
    harness, run, key = world
    path = tmp_path / "users.yaml"
    users = Users(path=path)
    users.set_password("dana", "old-password")
    users.save()
    env = cli_environment(harness.env, harness, tmp_path / "home")
    async with serving(users_console(harness, key, users)) as base:
        before, csrf = await sign_in(base, "dana", "old-password")
        changed = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "stratagem.cli", "console-user", "dana", "--users", str(path), "--password-stdin"],
            input="new-password\n",
            capture_output=True,
            text=True,
            env=env,
        )
        assert changed.returncode == 0 and "every session they had has ended" in changed.stdout, changed
        assert await whoami(base, before) == 401
        assert (await approve_with(base, run, before, csrf)).status_code in (401, 403)
        await plan_still_waits(run)
        assert payments(harness) == []
        async with browser(base) as http:
            old = await http.post("/login", data={"name": "dana", "password": "old-password", "next": "/"})
            assert "error=" in old.headers["location"]
        after, csrf = await sign_in(base, "dana", "new-password")
        assert (await approve_with(base, run, after, csrf)).status_code == 200


# ------------------------------------------------------------------ item 10: the event stream's offsets


async def test_a_malformed_last_event_id_is_a_400_with_one_line(world):
    harness, run, key = world
    identity = IdentityConfig(mode=AuthMode.local, secret=b"attack-test", local_user="ops")
    app = create_app(harness.client, identity, signer=key, store=harness.store)
    async with serving(app) as base, httpx.AsyncClient(base_url=base, timeout=10) as http:
        for bad in ("abc", "-1", "1e3", "\u0663", "9" * 5000, "1.5"):
            streamed = await http.get(f"/api/runs/{run.id}/stream", headers={"Last-Event-ID": bad.encode()})
            assert streamed.status_code == 400, (bad[:10], streamed.text[:200])
            detail = streamed.json()["detail"]
            assert "Last-Event-ID must be an event number" in detail and len(detail.splitlines()) == 1
            for path in ("stream", "events"):
                after = await http.get(f"/api/runs/{run.id}/{path}", params={"after": bad})
                assert after.status_code == 400 and "after must be an event number" in after.json()["detail"]
        events = await http.get(f"/api/runs/{run.id}/events", params={"after": "1"})
        assert events.status_code == 200 and all(e["seq"] > 1 for e in events.json()["events"])
        async with http.stream("GET", f"/api/runs/{run.id}/stream", headers={"Last-Event-ID": "1"}) as stream:
            assert stream.status_code == 200
            first = await anext(stream.aiter_lines())
            assert first.startswith("id: ") and int(first[4:]) > 1


async def test_a_call_waiting_for_approval_is_shown_whole_and_approved_only_as_shown(dev_env, tmp_path, monkeypatch):
    """#35 item 3 in the console: a model's long memo cannot push the payee out of sight, and the
    form approves the arguments its page showed (their digest), not whatever waits by then."""
    key = Signer.generate("console")
    monkeypatch.setenv("STRATAGEM_ISSUER_KEYS", key.public_line())
    memo = "Routine settlement of the quarterly invoices. " * 200
    arguments = {"memo": memo, "amount": 99999, "to": "mallory"}
    async with harness_for(dev_env, tmp_path) as harness:
        model = harness.script(
            "memo.yaml", {"executor": {"settle": [{"call": {"tool": "wire_funds", "args": arguments}}, {"text": "ok"}]}}
        )
        step = {"id": "settle", "title": "Settle", "kind": "llm", "instructions": "pay", "tools": ["wire_funds"]}
        run = await harness.start({"goal": "settle", "steps": [step]}, executor=model)
        await harness.wait_for(run, lambda s: s.phase is Phase.awaiting_approval)
        identity = IdentityConfig(mode=AuthMode.local, secret=b"attack-test", local_user="ops")
        app = create_app(harness.client, identity, signer=key, store=harness.store)
        async with serving(app) as base, httpx.AsyncClient(base_url=base, headers={"Origin": base}) as http:
            csrf = (await http.get("/api/whoami")).json()["csrf"]
            headers = {"X-Stratagem-CSRF": csrf}
            assert (await http.post(f"/api/runs/{run.id}/approve", json={"revision": 1}, headers=headers)).is_success
            status = await harness.wait_for(run, lambda s: any(p.call is not None for p in s.pending))
            [call] = [p.call for p in status.pending if p.call is not None]
            page = (await http.get(f"/runs/{run.id}")).text
            # Every argument is on the page (escaped as HTML), the payee and amount after the memo too.
            assert "&#34;to&#34;: &#34;mallory&#34;" in page and "&#34;amount&#34;: 99999" in page
            assert f'name="digest" value="{call.digest}"' in page
            download = await http.get(f"/runs/{run.id}/steps/settle/calls/{call.call_id}/arguments.json")
            assert download.status_code == 200 and download.json() == arguments
            assert download.headers["x-stratagem-digest"] == call.digest
            form = {"kind": "tool_call_approval", "step_id": "settle", "call_id": call.call_id, "csrf": csrf}
            # A page showing other arguments (another digest) approves nothing.
            stale = await http.post(f"/runs/{run.id}/decide", data={**form, "digest": "ab" * 32, "verdict": "approve"})
            assert stale.status_code == 303 and "differ+from+the+ones+approved" in stale.headers["location"]
            assert harness.calls() == []
            done = await http.post(f"/runs/{run.id}/decide", data={**form, "digest": call.digest, "verdict": "approve"})
            assert done.status_code == 303 and "error=" not in done.headers["location"]
        assert (await run.result()).status is Phase.succeeded
        [wire] = harness.calls()
        assert (wire["tool"], wire["amount"], wire["to"]) == ("wire_funds", 99999, "mallory")


async def test_a_right_to_left_override_is_shown_not_obeyed(world):
    """An IBAN written `\\u202e1111-2222-3333` read 3333-2222-1111 in a browser; the CLI already
    wrote such characters out, the console now does too, in every value a page shows."""
    harness, _, key = world
    sneaky = "\u202e1111-2222-3333\u202c"
    run = await harness.start(
        {
            "goal": f"pay {sneaky}",
            "steps": [{"id": "pay", "title": "Pay", "tool": "pay", "args": {"amount": 10, "to": sneaky}}],
        }
    )
    await harness.wait_for(run, lambda s: s.phase is Phase.awaiting_approval)
    identity = IdentityConfig(mode=AuthMode.local, secret=b"attack-test", local_user="ops")
    app = create_app(harness.client, identity, signer=key, store=harness.store)
    async with serving(app) as base, httpx.AsyncClient(base_url=base) as http:
        page = (await http.get(f"/runs/{run.id}")).text
    assert "\u202e" not in page and "\u202c" not in page
    assert "\\u202e1111-2222-3333\\u202c" in page
