"""E-mail approvals: a run waiting for a person mails the addresses the worker's configuration
gives the people and groups who may decide, through a real SMTP server (aiosmtpd); the link in
the message opens the real console's confirmation page, which decides only on a post, as the
person the link names, once.

Real workflows on the time-skipping server; the console is the real app over the same client.
"""

from __future__ import annotations

import base64
import json
import re
import time
from typing import Any

import httpx
import pytest
from support.mailbox import Mailbox, parts
from support.plans import awaiting, step

from stratagem.common.errors import ConfigError
from stratagem.console import AuthMode, IdentityConfig, Users, create_app
from stratagem.console.users import hash_password
from stratagem.domain import activity_io
from stratagem.domain.ledger import DecisionAction
from stratagem.domain.run_types import ApproveInput, Phase
from stratagem.io.email_links import EmailLink, read_link, sign_link
from stratagem.io.email_notify import EmailConfig, Recipient, SmtpServer
from stratagem.io.store import FileStore

SECRET = "email-secret"
CONSOLE = "http://console.test"
INJECTED = '<img src=x onerror=alert(1)> <a href="https://evil.example/pay">Approve here</a>'


@pytest.fixture
def mailbox(monkeypatch):
    box = Mailbox()
    monkeypatch.delenv("STRATAGEM_NOTIFY_SLACK_URL", raising=False)
    monkeypatch.delenv("STRATAGEM_NOTIFY_WEBHOOK_URL", raising=False)
    monkeypatch.setenv("STRATAGEM_NOTIFY_SMTP_URL", box.url)
    monkeypatch.setenv("STRATAGEM_NOTIFY_EMAIL_FROM", "stratagem@example.com")
    monkeypatch.setenv("STRATAGEM_NOTIFY_EMAIL_TO", "ops@example.com")
    monkeypatch.setenv("STRATAGEM_NOTIFY_EMAIL_GROUPS", "finance=dana@example.com,lee@example.com")
    monkeypatch.setenv("STRATAGEM_NOTIFY_EMAIL_PEOPLE", "dana=dana@example.com")
    monkeypatch.setenv("STRATAGEM_CONSOLE_URL", CONSOLE)
    monkeypatch.setenv("STRATAGEM_CONSOLE_SECRET", SECRET)
    yield box
    box.close()


def console(harness: Any, mode: AuthMode = AuthMode.users, origin: str = CONSOLE) -> httpx.AsyncClient:
    users = Users(passwords={name: hash_password(f"{name}-pw") for name in ("dana", "lee", "erin")})
    identity = IdentityConfig(mode=mode, secret=SECRET.encode(), users=users, local_user="ops")
    app = create_app(harness.client, identity, store=harness.store)
    transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 50000))
    return httpx.AsyncClient(transport=transport, base_url=CONSOLE, headers={"Origin": origin})


async def until_mailed(harness: Any, box: Mailbox, count: int) -> None:
    for _ in range(300):
        if len(box.received) >= count:
            return
        await harness.time_skip(0.1)
    raise AssertionError(f"only {len(box.received)} messages arrived")


def link_in(text: str) -> str:
    found = re.search(rf"{re.escape(CONSOLE)}(/email/[A-Za-z0-9_.-]+)", text)
    assert found, text
    return found.group(1)


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, html
    return found.group(1)


def digest_of(html: str) -> str:
    found = re.search(r'name="digest" value="([^"]+)"', html)
    assert found, html
    return found.group(1)


def tampered(path: str, **changes: Any) -> str:
    """The link with its payload changed and its signature kept: what an attacker can make."""
    token = path.removeprefix("/email/")
    link = read_link(SECRET.encode(), token)
    assert link is not None
    data = {"r": link.run_id, "d": link.decision, "p": link.person, "i": link.link_id, "e": link.expires, **changes}
    forged = base64.urlsafe_b64encode(json.dumps(data, separators=(",", ":")).encode()).decode().rstrip("=")
    return f"/email/{forged}.{token.rsplit('.', 1)[1]}"


GATED = {
    "goal": f"pay acme {INJECTED}",
    "steps": [
        {
            **step("pay", "record", label="pay 9,400 EUR to IBAN DE89 3704 0044 0532 0130 00"),
            "title": "Pay the invoice",
            "approvers": ["finance"],
        }
    ],
}


@pytest.mark.workflow
async def test_an_email_link_shows_on_get_and_approves_once_as_its_person_on_post(harness, mailbox):
    run = await harness.start(GATED, approver_groups={"finance": ["dana", "lee"]})
    await harness.wait_for(run, awaiting)
    await until_mailed(harness, mailbox, 1)
    # The plan names nobody: its approval goes to the default recipients.
    (plan_mail,) = mailbox.to("ops@example.com")
    await run.approve(ApproveInput(by="bob", revision=1))
    await harness.wait_for(run, lambda s: any(p.kind.value == "step_approval" for p in s.pending))
    await until_mailed(harness, mailbox, 3)
    # The step names the finance group: its people are mailed, each with a link of their own.
    assert sorted(r for rcpt, _ in mailbox.received[1:] for r in rcpt) == ["dana@example.com", "lee@example.com"]
    (dana_mail,) = mailbox.to("dana@example.com")
    (lee_mail,) = mailbox.to("lee@example.com")
    assert dana_mail["From"] == "stratagem@example.com" and "approval of step pay" in dana_mail["Subject"]

    plain, html = parts(dana_mail)
    for text in (plain, html):  # what the step will run, whole, in both parts
        assert "pay 9,400 EUR to IBAN DE89 3704 0044 0532 0130 00" in text
        assert "record(" in text and "It is for dana only" in text
    # What the run wrote is text: no tag, no second link, in the HTML; no live URL in either part.
    assert "<img" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html
    assert re.findall(r"<a [^>]*>", html) == [f'<a href="{CONSOLE}{link_in(plain)}">']
    assert "evil.example" not in plain + html and "https[:]//evil[.]example" in plain
    dana, lee = link_in(plain), link_in(parts(lee_mail)[0])
    assert dana != lee and read_link(SECRET.encode(), dana.removeprefix("/email/")).person == "dana"
    assert read_link(SECRET.encode(), lee.removeprefix("/email/")).person is None  # a group's address: no person

    async with console(harness) as http:
        # Opening it (as a mail scanner would, twice) shows the decision and decides nothing.
        for _ in range(2):
            shown = await http.get(dana)
            assert shown.status_code == 200 and shown.headers["cache-control"] == "no-store"
            assert "pay 9,400 EUR" in shown.text and "You decide as <b>dana</b>" in shown.text
            assert "&lt;img src=x" in shown.text and "<img" not in shown.text
        status = await run.status()
        assert status.phase is Phase.running and [p.kind.value for p in status.pending] == ["step_approval"]
        form = {"csrf": csrf_of(shown.text), "digest": digest_of(shown.text), "verdict": "approve", "comment": "ok"}

        # CSRF: no token, another link's token, another site's page: refused, nothing decided.
        assert (await http.post(dana, data={**form, "csrf": ""})).status_code == 403
        signed_in = await http.post("/login", data={"name": "lee", "password": "lee-pw", "next": lee})
        assert signed_in.status_code == 303  # the client keeps lee's session cookie from here on
        lee_page = await http.get(lee)
        assert "You decide as <b>lee</b>" in lee_page.text
        assert (await http.post(dana, data={**form, "csrf": csrf_of(lee_page.text)})).status_code == 403
        cross = await http.post(dana, data=form, headers={"Origin": "https://evil.example"})
        assert cross.status_code == 403
        assert (await run.ledger()).decisions[-1].step_id is None  # only the plan's approval so far

        done = await http.post(dana, data=form)
        assert done.status_code == 200 and "Approved as dana" in done.text
        assert (await run.result()).status is Phase.succeeded
        decisions = (await run.ledger()).decisions
        assert [(d.action, d.by, d.step_id, d.comment) for d in decisions[1:]] == [
            (DecisionAction.approve, "dana", "pay", "ok")
        ]
        assert decisions[-1].signed_by is not None  # the console's issuer key

        # Single use: again, or opened again, answers so and changes nothing.
        again = await http.post(dana, data=form)
        assert again.status_code == 410 and "already used" in again.text
        assert "already used" in (await http.get(dana)).text
        # Lee's link: the decision was taken by someone else.
        taken = await http.get(lee)
        assert taken.status_code == 410 and "approve by dana" in taken.text
    assert len((await run.ledger()).decisions) == 2

    # A fresh console on the same store (a restart) still knows the link was used.
    async with console(harness) as http:
        assert (await http.post(dana, data=form)).status_code == 410
    assert plan_mail["To"] == "ops@example.com"


@pytest.mark.workflow
async def test_two_people_needed_each_approve_from_their_own_link(harness, mailbox):
    plan = {**GATED, "steps": [{**GATED["steps"][0], "quorum": 2}]}
    run = await harness.start(plan, approver_groups={"finance": ["dana", "lee"]})
    await harness.wait_for(run, awaiting)
    await run.approve(ApproveInput(by="bob", revision=1))
    await until_mailed(harness, mailbox, 3)
    dana, lee = (link_in(parts(mailbox.to(f"{name}@example.com")[0])[0]) for name in ("dana", "lee"))
    async with console(harness) as http:
        shown = await http.get(dana)
        form = {"csrf": csrf_of(shown.text), "digest": digest_of(shown.text), "verdict": "approve"}
        assert "Approved as dana" in (await http.post(dana, data=form)).text
        status = await run.status()
        assert status.pending[0].approved_by == ["dana"] and status.phase is Phase.running
        # Dana's link is spent; the decision still waits for one more, from lee's own link.
        assert (await http.post(dana, data=form)).status_code == 410
        await http.post("/login", data={"name": "lee", "password": "lee-pw", "next": lee})
        shown = await http.get(lee)
        assert "You decide as <b>lee</b>" in shown.text and "(the person" not in shown.text
        form = {"csrf": csrf_of(shown.text), "digest": digest_of(shown.text), "verdict": "approve"}
        assert "Approved as lee" in (await http.post(lee, data=form)).text
    assert (await run.result()).status is Phase.succeeded
    approvals = [d.by for d in (await run.ledger()).decisions if d.step_id == "pay"]
    assert approvals == ["dana", "lee"]


@pytest.mark.workflow
async def test_an_escalation_mails_its_group_whose_person_approves_from_the_link(harness, mailbox, monkeypatch):
    monkeypatch.setenv("STRATAGEM_NOTIFY_EMAIL_GROUPS", "finance-leads=erin@example.com,farid@example.com")
    monkeypatch.setenv("STRATAGEM_NOTIFY_EMAIL_PEOPLE", "erin=erin@example.com")
    groups = {"finance": ["dana"], "finance-leads": ["erin", "farid"]}
    run = await harness.start(
        {"goal": "pay acme", "steps": [step("pay", "record", label="paid")]},
        approvers=["bob", "dana"],
        approver_groups=groups,
        escalate_after_seconds=3600,
        escalate_to="finance-leads",
    )
    await harness.wait_for(run, awaiting)
    await until_mailed(harness, mailbox, 1)
    assert mailbox.received[0][0] == ["ops@example.com"]  # the plan's approval names nobody with an address
    await harness.time_skip(3700)
    await until_mailed(harness, mailbox, 3)
    (erin_mail,) = mailbox.to("erin@example.com")
    assert len(mailbox.to("farid@example.com")) == 1
    plain, html = parts(erin_mail)
    assert "Escalated: to finance-leads (erin, farid), who may now decide" in plain and "finance-leads" in html
    ops_link, erin_link = link_in(parts(mailbox.received[0][1])[0]), link_in(plain)
    async with console(harness) as http:
        shown = await http.get(erin_link)
        assert "You decide as <b>erin</b>" in shown.text and "escalated to finance-leads" in shown.text
        done = await http.post(erin_link, data={"csrf": csrf_of(shown.text), "verdict": "approve"})
        assert done.status_code == 200 and "Approved as erin" in done.text
        # The first message's link was about the same decision: it answers that it was taken.
        signed_in = await http.post("/login", data={"name": "lee", "password": "lee-pw", "next": ops_link})
        assert signed_in.status_code == 303
        assert "approve by erin" in (await http.get(ops_link)).text
    assert (await run.result()).status is Phase.succeeded
    assert [(d.action, d.by) for d in (await run.ledger()).decisions] == [(DecisionAction.approve, "erin")]


@pytest.mark.workflow
async def test_altered_expired_and_borrowed_links_decide_nothing(harness, mailbox):
    first = await harness.start(GATED, approver_groups={"finance": ["dana", "lee"]})
    second = await harness.start(GATED, approver_groups={"finance": ["dana", "lee"]})
    for run in (first, second):
        await harness.wait_for(run, awaiting)
    await until_mailed(harness, mailbox, 2)
    links = {link_in(parts(m)[0]).split("/")[-1]: m for m in mailbox.to("ops@example.com")}
    tokens = {read_link(SECRET.encode(), t).run_id: t for t in links}
    link = f"/email/{tokens[first.id]}"

    async with console(harness, mode=AuthMode.local) as http:
        shown = await http.get(link)
        assert shown.status_code == 200 and "You decide as <b>ops</b>" in shown.text
        form = {"csrf": csrf_of(shown.text), "verdict": "approve"}
        # The first run's link, pointed at the second run (or at another decision), is no link.
        for forged in (
            tampered(link, r=second.id),
            tampered(link, d="step_approval/pay/-/r1/x"),
            tampered(link, e=2**40),
        ):
            for answer in (await http.get(forged), await http.post(forged, data=form)):
                assert answer.status_code == 400 and "This link is not valid" in answer.text
        altered = link[:-3] + ("AAA" if not link.endswith("AAA") else "BBB")
        assert (await http.post(altered, data=form)).status_code == 400
        # Values the same secret signs for other purposes are not links either.
        session = IdentityConfig(mode=AuthMode.users, secret=SECRET.encode()).session_cookie("ops")
        assert (await http.get(f"/email/{session}")).status_code == 400
        # Expired: signed as the worker signs, but past its time.
        old = read_link(SECRET.encode(), tokens[first.id])
        stale = sign_link(SECRET.encode(), old.model_copy(update={"expires": int(time.time()) - 1}))
        for answer in (await http.get(f"/email/{stale}"), await http.post(f"/email/{stale}", data=form)):
            assert answer.status_code == 410 and "expired" in answer.text
        # A link never names a decision that is not its own: the first run's works for the first run only.
        assert (await http.post(link, data=form)).status_code == 200
        assert (await second.status()).phase is Phase.awaiting_approval
        assert [d.by for d in (await second.ledger()).decisions] == []
        # Rejecting, with a reason, from the second run's own link.
        other = f"/email/{tokens[second.id]}"
        shown = await http.get(other)
        rejected = await http.post(other, data={"csrf": csrf_of(shown.text), "verdict": "reject", "comment": "no"})
        assert rejected.status_code == 200 and "Rejected as ops" in rejected.text
    assert (await first.status()).phase is not Phase.awaiting_approval
    assert (await second.result()).status is Phase.rejected
    assert [(d.action, d.by, d.comment) for d in (await second.ledger()).decisions] == [
        (DecisionAction.reject, "ops", "no")
    ]


@pytest.mark.unit
async def test_a_retried_email_is_not_sent_twice_and_a_refused_address_is_not_retried(mailbox, tmp_path, monkeypatch):
    from temporalio.exceptions import ApplicationError
    from temporalio.testing import ActivityEnvironment

    from stratagem.activities.notify import NotifyActivities

    notify = NotifyActivities(FileStore(tmp_path))
    request = activity_io.NotifyInput(
        run_id="r",
        goal="g",
        key="r/e/plan_approval/-/-/r1/t",
        waiting="approval",
        kind="plan_approval",
        revision=1,
        prompt="p",
    )
    env = ActivityEnvironment()
    assert await env.run(notify.notify, request) == ["email"]
    assert await env.run(notify.notify, request) == []  # a retry after a crash: already delivered
    assert len(mailbox.received) == 1
    # A permanently refused address fails the activity for good (no retry would help), after
    # the others got theirs.
    mailbox.refuse.add("ops@example.com")
    monkeypatch.setenv("STRATAGEM_NOTIFY_EMAIL_TO", "ops@example.com,kim@example.com")
    with pytest.raises(ApplicationError) as refused:
        await env.run(notify.notify, request.model_copy(update={"key": "r/e/other"}))
    assert refused.value.non_retryable and "refused the recipient ops@example.com (550)" in refused.value.message
    assert [rcpt for rcpt, _ in mailbox.received] == [["ops@example.com"], ["kim@example.com"]]
    # A server nobody answers at is retried.
    monkeypatch.setenv("STRATAGEM_NOTIFY_SMTP_URL", "smtp://127.0.0.1:9")
    with pytest.raises(ApplicationError) as unreachable:
        await env.run(notify.notify, request.model_copy(update={"key": "r/e/third"}))
    assert not unreachable.value.non_retryable


@pytest.mark.unit
def test_a_wrong_mail_configuration_is_one_line_naming_the_variable():
    base = {"STRATAGEM_NOTIFY_SMTP_URL": "smtp://mail.example.com:25", "STRATAGEM_NOTIFY_EMAIL_FROM": "s@example.com"}
    assert EmailConfig.from_env({}) is None
    assert EmailConfig.from_env(base).server == SmtpServer("mail.example.com", 25, "none")
    assert (
        EmailConfig.from_env({**base, "STRATAGEM_NOTIFY_SMTP_URL": "smtps://u:p%40w@m.example.com"}).server.password
        == "p@w"
    )
    wrong = {
        "STRATAGEM_NOTIFY_SMTP_URL": ("http://mail.example.com", "must be smtp://host:port"),
        "STRATAGEM_NOTIFY_EMAIL_FROM": ("nobody", "must be the sender's address"),
        "STRATAGEM_NOTIFY_EMAIL_GROUPS": ("finance", "'finance' is not name=address"),
        "STRATAGEM_NOTIFY_EMAIL_PEOPLE": ("dana=a@example.com,b@example.com", "one person with one address"),
        "STRATAGEM_NOTIFY_EMAIL_TO": ("ops@example.com\r\nBcc: x@evil.example", "is not an e-mail address"),
        "STRATAGEM_NOTIFY_EMAIL_LINK_DAYS": ("0", "number of days"),
    }
    for variable, (value, said) in wrong.items():
        with pytest.raises(ConfigError) as exc:
            EmailConfig.from_env({**base, variable: value})
        assert said in str(exc.value) and "\n" not in str(exc.value), variable
    # A password never goes over a connection without TLS, nor into a message.
    with pytest.raises(ConfigError) as clear:
        EmailConfig.from_env({**base, "STRATAGEM_NOTIFY_SMTP_URL": "smtp://u:hunter2@mail.example.com"})
    assert "in clear text" in str(clear.value) and "hunter2" not in str(clear.value)
    # Names become addresses only through the configuration; a person's address names them.
    mapped = EmailConfig.from_env(
        {
            **base,
            "STRATAGEM_NOTIFY_EMAIL_TO": "ops@example.com",
            "STRATAGEM_NOTIFY_EMAIL_GROUPS": "leads=erin@example.com,shared@example.com",
            "STRATAGEM_NOTIFY_EMAIL_PEOPLE": "erin=Erin@example.com;farid=farid@example.com",
        }
    )
    assert mapped.recipients(["leads", "erin", "farid", "nobody@evil.example"]) == [
        Recipient("erin@example.com", "erin"),
        Recipient("shared@example.com"),
        Recipient("farid@example.com", "farid"),
    ]
    assert mapped.recipients(["nobody"]) == [Recipient("ops@example.com")]
    link = EmailLink(run_id="r", decision="plan_approval/-/-/r1/t", link_id="x", expires=1)
    assert read_link(b"another secret", sign_link(SECRET.encode(), link)) is None
