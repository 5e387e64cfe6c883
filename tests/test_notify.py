"""Notifications: a run waiting for a person tells the worker's channels once per decision, with a
signed, expiring link the console checks. Real workflows on the time-skipping server; the
webhooks are a local HTTP server that records what it receives."""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import urlparse

import httpx
import pytest
from support.plans import awaiting, step
from support.webhooks import Receiver

from stratagem.console import AuthMode, IdentityConfig, create_app
from stratagem.domain import activity_io
from stratagem.domain.run_types import ApproveInput, Phase
from stratagem.io.notify import NotifyConfig
from stratagem.io.store import FileStore

SECRET = "notify-secret"


@pytest.fixture
def receiver(monkeypatch):
    hook = Receiver()
    monkeypatch.setenv("STRATAGEM_NOTIFY_SLACK_URL", hook.url + "/slack")
    monkeypatch.setenv("STRATAGEM_NOTIFY_WEBHOOK_URL", hook.url + "/hook")
    monkeypatch.setenv("STRATAGEM_CONSOLE_URL", "https://review.example.com/")
    monkeypatch.setenv("STRATAGEM_CONSOLE_SECRET", SECRET)
    yield hook
    hook.close()


@pytest.mark.workflow
async def test_each_decision_a_run_waits_on_is_notified_once_with_a_link_the_console_trusts(harness, receiver):
    plan = {"goal": "pay acme", "steps": [{**step("pay", "record", label="paid"), "requires_approval": True}]}
    run = await harness.start(plan)
    await harness.wait_for(run, awaiting)
    await until_received(harness, receiver, 2)
    await run.approve(ApproveInput(by="bob", revision=1))
    await harness.wait_for(run, lambda s: any(p.kind.value == "step_approval" for p in s.pending))
    await until_received(harness, receiver, 4)
    await run.approve(ApproveInput(by="dana", step_id="pay"))
    assert (await run.result()).status is Phase.succeeded

    hooks = [r for r in receiver.received if r["path"] == "/hook"]
    slack = [r for r in receiver.received if r["path"] == "/slack"]
    assert [h["body"]["kind"] for h in hooks] == ["plan_approval", "step_approval"]
    assert [h["body"]["waiting"] for h in hooks] == ["approval of revision 1", "approval of step pay"]
    assert len({h["headers"]["Idempotency-Key"] for h in hooks}) == 2
    assert "waits for approval of step pay" in slack[1]["body"]["text"]
    # Slack gets Block Kit: the step's resolved call in full, and buttons that name this wait.
    blocks = slack[1]["body"]["blocks"]
    assert any(b["type"] == "section" and b["text"]["text"] == '```\nrecord(\n  label="paid"\n)\n```' for b in blocks)
    buttons = [e for b in blocks if b["type"] == "actions" for e in b["elements"]]
    assert [e.get("action_id") for e in buttons] == ["stratagem_approve", "stratagem_reject", "stratagem_open"]
    value = json.loads(buttons[0]["value"])
    assert (value["run"], value["kind"], value["step"], value["rev"]) == (run.id, "step_approval", "pay", 1)
    assert value["key"] == hooks[1]["body"]["key"] and buttons[2]["url"] == hooks[1]["body"]["link"]
    link = hooks[1]["body"]["link"]
    assert link.startswith(f"https://review.example.com/runs/{run.id}?exp=")

    # The console opens that link as the run's page; an altered one is flagged, not trusted.
    identity = IdentityConfig(mode=AuthMode.local, secret=SECRET.encode(), local_user="ops")
    app = create_app(harness.client, identity, store=harness.store)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://console.test") as http:
        target = urlparse(link)
        good = await http.get(f"{target.path}?{target.query}")
        assert good.status_code == 200 and "expired or was altered" not in good.text and run.id in good.text
        bad = await http.get(f"{target.path}?{target.query.replace('exp=', 'exp=1')}")
        assert "expired or was altered" in bad.text


async def until_received(harness: Any, receiver: Receiver, count: int) -> None:
    for _ in range(200):
        if len(receiver.received) >= count:
            return
        await harness.time_skip(0.1)
    raise AssertionError(f"only {len(receiver.received)} notifications arrived: {receiver.received}")


@pytest.mark.unit
async def test_a_retried_notification_is_not_sent_twice(receiver, tmp_path):
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
    assert await env.run(notify.notify, request) == ["slack", "webhook"]
    assert await env.run(notify.notify, request) == []  # a retry after a crash: already delivered
    assert len(receiver.received) == 2


@pytest.mark.unit
def test_without_channels_a_worker_offers_no_notifications(monkeypatch):
    for name in ("STRATAGEM_NOTIFY_SLACK_URL", "STRATAGEM_NOTIFY_WEBHOOK_URL"):
        monkeypatch.delenv(name, raising=False)
    assert not NotifyConfig.from_env().configured
    assert (
        NotifyConfig(console_url="https://c.example", secret=b"s")
        .link("run/1", now=0)
        .startswith("https://c.example/runs/run%2F1?exp=604800&sig=")
    )


# What a run's starter or its planner could write, that chat services turn into mentions and links.
PAYLOADS = (
    "& <!channel> <!here|here> <@U0123ABCD> <#C0123ABCD> <https://evil.example/pay|Decide in the console> "
    "@here @everyone \u202egnp.exe see https://evil.example/approve or www.evil.example, [Decide](https://evil.example)"
)


@pytest.mark.workflow
async def test_a_goal_cannot_mention_anyone_or_link_anywhere_in_a_notification(harness, receiver):
    plan = {
        "goal": f"pay acme {PAYLOADS}",
        "steps": [{**step("pay", "record", label="paid"), "title": f"Pay {PAYLOADS}", "requires_approval": True}],
    }
    run = await harness.start(plan)
    await harness.wait_for(run, awaiting)
    await until_received(harness, receiver, 2)
    await run.approve(ApproveInput(by="bob", revision=1))  # the step's own approval asks with its title
    await harness.wait_for(run, lambda s: any(p.kind.value == "step_approval" for p in s.pending))
    await until_received(harness, receiver, 4)

    slack = [r["body"] for r in receiver.received if r["path"] == "/slack"]
    hooks = [r["body"] for r in receiver.received if r["path"] == "/hook"]
    assert len(slack) == len(hooks) == 2
    for message, hook in zip(slack, hooks, strict=True):
        text = message["text"]
        assert message["unfurl_links"] is False and message["unfurl_media"] is False
        # Slack's control sequences: the only one is the console's link, on a line of its own.
        assert re.findall(r"<[^>]*>", text) == [f"<{hook['link']}|Decide in the console>"]
        assert hook["link"].startswith(f"https://review.example.com/runs/{run.id}?exp=")
        said, link_line = text.rsplit("\n", 1)
        assert link_line == f"<{hook['link']}|Decide in the console>" and "\n" not in said
        for sequence in ("<", ">", "evil.example", "://", "@here", "@everyone", "](", "\u202e"):
            assert sequence not in said, sequence
        # Shown, inert.
        assert "&amp; &lt;!channel&gt;" in said and "https[:]//evil[.]example" in said, said
        # The generic webhook keeps the run's own text in its fields, for a program; its text is the safe one.
        assert hook["goal"] == plan["goal"] and hook["text"] == text
    assert "Pay &amp; &lt;!channel&gt;" in slack[1]["text"]  # the step's title, in the question
    for block in (b for message in slack for b in message["blocks"] if b["type"] == "section"):
        for sequence in ("<", ">", "evil.example", "://", "@here", "@everyone", "](", "\u202e"):
            assert sequence not in block["text"]["text"], sequence
