"""Deciding from Slack (issue #39, item 1): a run's notification is a Block Kit message with
Approve / Reject buttons, and the console's /slack/interactions takes their clicks as the person
the Slack user is mapped to. Requests are signed here exactly as Slack signs them (v0: HMAC-SHA256
of `v0:{timestamp}:{body}` with the app's signing secret); the console runs under uvicorn against
runs on the dev server; the Slack message's webhook, its response_url and Slack's Web API
(views.open) are local HTTP servers that record what they receive.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
from conftest import harness_for
from support.plans import step
from support.webhooks import Receiver
from test_console_attacks import serving

from stratagem.common.signing import Signer
from stratagem.console import AuthMode, IdentityConfig, Users, create_app
from stratagem.console.slack_app import SlackApp
from stratagem.domain.ledger import DecisionAction
from stratagem.domain.run_types import ApproveInput, Phase
from stratagem.io.slack_blocks import APPROVE_ACTION, REJECT_ACTION, REJECT_VIEW, Button

pytestmark = pytest.mark.system

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"  # the shape of a Slack app's signing secret
DANA, NOBODY = "U0DANA1", "U0NOBODY"
LABEL = "pay acme 1200 EUR for invoice 2026-118"


def signed(payload: dict[str, Any], *, secret: str = SECRET, at: float | None = None) -> tuple[bytes, dict[str, str]]:
    """A request as Slack sends it: the form field `payload`, and its v0 signature."""
    body = urlencode({"payload": json.dumps(payload)}).encode()
    timestamp = str(int(time.time() if at is None else at))
    mac = hmac.new(secret.encode(), b"v0:" + timestamp.encode() + b":" + body, hashlib.sha256).hexdigest()
    headers = {
        "Content-Type": "application/x-www-form-urlencoded",
        "X-Slack-Request-Timestamp": timestamp,
        "X-Slack-Signature": f"v0={mac}",
    }
    return body, headers


def click(user: str, action: str, value: str, response_url: str, trigger: str = "trigger-1") -> dict[str, Any]:
    return {
        "type": "block_actions",
        "user": {"id": user, "username": "someone", "team_id": "T0TEAM"},
        "team": {"id": "T0TEAM"},
        "trigger_id": trigger,
        "response_url": response_url,
        "actions": [{"type": "button", "action_id": action, "block_id": "b1", "value": value}],
    }


def submission(user: str, private_metadata: str, reason: str) -> dict[str, Any]:
    state = {"values": {"reason": {"reason": {"type": "plain_text_input", "value": reason}}}}
    view = {"callback_id": REJECT_VIEW, "private_metadata": private_metadata, "state": state}
    return {"type": "view_submission", "user": {"id": user}, "view": view}


async def post(http: httpx.AsyncClient, payload: dict[str, Any], **signing: Any) -> httpx.Response:
    body, headers = signed(payload, **signing)
    return await http.post("/slack/interactions", content=body, headers=headers)


async def received(receiver: Receiver, path: str, count: int = 1) -> list[dict[str, Any]]:
    for _ in range(300):
        found = [r for r in receiver.received if r["path"] == path]
        if len(found) >= count:
            return found
        await asyncio.sleep(0.05)
    raise AssertionError(f"nothing came to {path}: {receiver.received}")


async def notification(receiver: Receiver, kind: str) -> dict[str, Any]:
    """The Slack message announcing the run's wait of `kind`, with its buttons' value."""
    for _ in range(300):
        for hook in [r["body"] for r in receiver.received if r["path"] == "/slack"]:
            for block in hook["blocks"]:
                for element in block.get("elements", []) if block["type"] == "actions" else []:
                    if element.get("action_id") == APPROVE_ACTION and json.loads(element["value"])["kind"] == kind:
                        return {**hook, "value": element["value"]}
        await asyncio.sleep(0.05)
    raise AssertionError(f"no {kind} message with buttons: {receiver.received}")


@pytest.fixture
def slack_env(monkeypatch, tmp_path):
    """The worker's Slack webhook and console URL, a users file mapping dana's Slack user, the
    console's issuer key (which the worker trusts), and one local server for everything Slack."""
    key = Signer.generate("console")
    monkeypatch.setenv("STRATAGEM_ISSUER_KEYS", key.public_line())
    slack = Receiver(answer={"ok": True})
    monkeypatch.setenv("STRATAGEM_NOTIFY_SLACK_URL", slack.url + "/slack")
    monkeypatch.delenv("STRATAGEM_NOTIFY_WEBHOOK_URL", raising=False)
    monkeypatch.setenv("STRATAGEM_CONSOLE_URL", "https://review.example.com")
    monkeypatch.setenv("STRATAGEM_CONSOLE_SECRET", "slack-test")
    users = Users(path=tmp_path / "users.yaml")
    users.set_slack("dana", DANA)  # no password: dana decides from Slack only
    users.save()
    yield key, slack, Users.load(tmp_path / "users.yaml")
    slack.close()


def console_app(harness: Any, key: Signer, users: Users, slack: Receiver, bot_token: str | None = "xoxb-test") -> Any:
    identity = IdentityConfig(mode=AuthMode.users, secret=b"slack-test", users=users)
    app_config = SlackApp(signing_secret=SECRET, bot_token=bot_token, api_url=slack.url + "/api/")
    return create_app(harness.client, identity, signer=key, store=harness.store, slack_app=app_config)


async def test_approve_buttons_decide_as_the_mapped_person_once_and_only_what_was_shown(dev_env, tmp_path, slack_env):
    key, slack, users = slack_env
    plan = {"goal": "pay acme", "steps": [{**step("pay", "record", label=LABEL), "requires_approval": True}]}
    async with harness_for(dev_env, tmp_path) as harness:
        run = await harness.start(plan, approvers=["dana"])
        message = await notification(slack, "plan_approval")
        respond = slack.url + "/respond"
        async with serving(console_app(harness, key, users, slack)) as base, httpx.AsyncClient(base_url=base) as http:
            # Attacks first: nothing they send changes the run.
            approve = click(DANA, APPROVE_ACTION, message["value"], f"{respond}/forged")
            assert (await post(http, approve, secret="not-the-secret")).status_code == 401
            assert (await post(http, approve, at=time.time() - 301)).status_code == 401  # a replay, five minutes on
            body, headers = signed(approve)
            tampered = body.replace(b"U0DANA1", b"U0DANA2")
            assert (await http.post("/slack/interactions", content=tampered, headers=headers)).status_code == 401
            unmapped = await post(http, click(NOBODY, APPROVE_ACTION, message["value"], f"{respond}/nobody"))
            assert unmapped.status_code == 200
            [told] = await received(slack, "/respond/nobody")
            assert told["body"]["response_type"] == "ephemeral" and told["body"]["replace_original"] is False
            assert "stratagem console-user NAME --slack U0NOBODY" in told["body"]["text"]
            assert (await run.status()).phase is Phase.awaiting_approval and not (await run.ledger()).decisions

            # dana approves the plan from its button.
            assert (await post(http, click(DANA, APPROVE_ACTION, message["value"], f"{respond}/plan"))).is_success
            [update] = await received(slack, "/respond/plan")
            assert update["body"]["replace_original"] is True
            assert update["body"]["text"].startswith("Approved by dana: approval of revision 1 on run")
            step_message = await notification(slack, "step_approval")
            [decision] = (await run.ledger()).decisions
            assert (decision.action, decision.by, decision.signed_by) == (DecisionAction.approve, "dana", key.name)
            assert decision.comment == "approved in Slack"

            # The same button again: already decided, nothing recorded.
            await post(http, click(DANA, APPROVE_ACTION, message["value"], f"{respond}/again"))
            [again] = await received(slack, "/respond/again")
            assert "already decided" in again["body"]["text"] and again["body"]["response_type"] == "ephemeral"
            assert len((await run.ledger()).decisions) == 1

            # The step's message shows what it will run, every value, and buttons bound to those lines.
            shown = json.dumps(step_message["blocks"])
            assert f'label=\\"{LABEL}\\"' in shown and "record(" in shown
            button = Button.decode(step_message["value"])
            assert button is not None and button.step == "pay" and button.shown
            stale = button.model_copy(update={"shown": "0" * 64}).encode()
            await post(http, click(DANA, APPROVE_ACTION, stale, f"{respond}/stale"))
            [refused] = await received(slack, "/respond/stale")
            assert "changed since this message" in refused["body"]["text"]
            older = button.model_copy(update={"key": button.key.replace(":", "-")}).encode()  # another wait's
            await post(http, click(DANA, APPROVE_ACTION, older, f"{respond}/older"))
            assert "already decided" in (await received(slack, "/respond/older"))[0]["body"]["text"]
            assert harness.calls() == [] and len((await run.ledger()).decisions) == 1

            await post(http, click(DANA, APPROVE_ACTION, step_message["value"], f"{respond}/step"))
            [done] = await received(slack, "/respond/step")
            assert done["body"]["text"].startswith("Approved by dana: approval of step pay")
        assert (await run.result()).status is Phase.succeeded
        assert [c["label"] for c in harness.calls()] == [LABEL]
        decisions = (await run.ledger()).decisions
        assert [(d.by, d.step_id, d.signed_by) for d in decisions] == [
            ("dana", None, key.name),
            ("dana", "pay", key.name),
        ]


async def test_reject_asks_a_reason_in_a_dialog_and_sends_the_step_back_with_it(dev_env, tmp_path, slack_env):
    key, slack, users = slack_env
    plan = {"goal": "pay acme", "steps": [{**step("pay", "record", label=LABEL), "requires_approval": True}]}
    async with harness_for(dev_env, tmp_path) as harness:
        run = await harness.start(plan)
        await notification(slack, "plan_approval")
        await run.approve(ApproveInput(by="bob", revision=1))
        message = await notification(slack, "step_approval")
        respond = slack.url + "/respond/reject"
        async with serving(console_app(harness, key, users, slack)) as base, httpx.AsyncClient(base_url=base) as http:
            assert (await post(http, click(DANA, REJECT_ACTION, message["value"], respond, "T-42"))).is_success
            [opened] = await received(slack, "/api/views.open")
            assert opened["headers"]["Authorization"] == "Bearer xoxb-test"
            assert opened["body"]["trigger_id"] == "T-42" and opened["body"]["view"]["callback_id"] == REJECT_VIEW
            private = opened["body"]["view"]["private_metadata"]
            assert json.loads(private)["response_url"] == respond

            # The dialog: a person not mapped, or no reason, is told there; nothing is decided.
            refused = await post(http, submission(NOBODY, private, "no"))
            assert (
                refused.json()["response_action"] == "errors"
                and "--slack U0NOBODY" in refused.json()["errors"]["reason"]
            )
            empty = await post(http, submission(DANA, private, "   "))
            assert empty.json() == {"response_action": "errors", "errors": {"reason": "Say why: the run is told."}}
            assert [d.by for d in (await run.ledger()).decisions] == ["bob"]

            closed = await post(http, submission(DANA, private, "wrong vendor: acme ltd, not acme inc"))
            assert closed.status_code == 200 and not closed.content  # the dialog closes
            [update] = await received(slack, "/respond/reject")
            assert update["body"]["text"].startswith("Rejected by dana: approval of step pay")
            assert "wrong vendor" in json.dumps(update["body"]["blocks"])
        rejection = (await run.ledger()).decisions[-1]
        assert (rejection.action, rejection.by, rejection.step_id) == (DecisionAction.reject, "dana", "pay")
        assert rejection.comment == "wrong vendor: acme ltd, not acme inc" and rejection.signed_by == key.name
        # Sent back, never run: with no planner here, the run waits for a repair of the step.
        status = await harness.wait_for(run, lambda s: any(p.kind.value == "repair" for p in s.pending))
        assert [p.step_id for p in status.pending] == ["pay"] and harness.calls() == []


async def test_without_a_bot_token_reject_rejects_the_plan_at_once(dev_env, tmp_path, slack_env):
    key, slack, users = slack_env
    plan = {"goal": "pay acme", "steps": [step("pay", "record", label=LABEL)]}
    async with harness_for(dev_env, tmp_path) as harness:
        run = await harness.start(plan)
        message = await notification(slack, "plan_approval")
        app = console_app(harness, key, users, slack, bot_token=None)
        async with serving(app) as base, httpx.AsyncClient(base_url=base) as http:
            await post(http, click(DANA, REJECT_ACTION, message["value"], slack.url + "/respond/plan"))
            [update] = await received(slack, "/respond/plan")
            assert update["body"]["text"].startswith("Rejected by dana: approval of revision 1")
        result = await run.result()
        assert result.status is Phase.rejected and "rejected in Slack" in (result.reason or "")
        assert [(d.action, d.by) for d in (await run.ledger()).decisions] == [(DecisionAction.reject, "dana")]
        assert not [r for r in slack.received if r["path"].startswith("/api/")]


async def test_a_console_without_a_signing_secret_serves_no_slack(dev_env, tmp_path, monkeypatch):
    monkeypatch.delenv("STRATAGEM_SLACK_SIGNING_SECRET", raising=False)
    async with harness_for(dev_env, tmp_path) as harness:
        identity = IdentityConfig(mode=AuthMode.local, secret=b"s", local_user="ops")
        app = create_app(harness.client, identity, store=harness.store)
        async with serving(app) as base, httpx.AsyncClient(base_url=base) as http:
            answer = await post(http, click(DANA, APPROVE_ACTION, "{}", "http://127.0.0.1:9/"))
            assert answer.status_code == 404 and "STRATAGEM_SLACK_SIGNING_SECRET" in answer.json()["detail"]


async def test_a_step_needing_two_people_keeps_its_buttons_until_the_second_approves(dev_env, tmp_path, slack_env):
    key, slack, users = slack_env
    users.set_slack("kim", "U0KIM01")
    users.save()
    plan = {"goal": "pay acme", "steps": [{**step("pay", "record", label=LABEL), "quorum": 2}]}
    async with harness_for(dev_env, tmp_path) as harness:
        run = await harness.start(plan, approvers=["dana", "kim", "bob"])
        await notification(slack, "plan_approval")
        await run.approve(ApproveInput(by="bob", revision=1))
        message = await notification(slack, "step_approval")
        respond = slack.url + "/respond"
        async with serving(console_app(harness, key, users, slack)) as base, httpx.AsyncClient(base_url=base) as http:
            await post(http, click(DANA, APPROVE_ACTION, message["value"], f"{respond}/dana"))
            [first] = await received(slack, "/respond/dana")
            # Short of the quorum: said in the channel, the message and its buttons stay.
            assert first["body"]["replace_original"] is False and first["body"]["response_type"] == "in_channel"
            assert "Approved by dana" in first["body"]["text"] and "1 of 2" in json.dumps(first["body"]["blocks"])
            await post(http, click(DANA, APPROVE_ACTION, message["value"], f"{respond}/dana-again"))
            [twice] = await received(slack, "/respond/dana-again")
            assert twice["body"]["response_type"] == "ephemeral" and "The run refused it" in twice["body"]["text"]
            assert harness.calls() == []
            await post(http, click("U0KIM01", APPROVE_ACTION, message["value"], f"{respond}/kim"))
            [second] = await received(slack, "/respond/kim")
            assert second["body"]["replace_original"] is True and "Approved by kim" in second["body"]["text"]
        assert (await run.result()).status is Phase.succeeded
        assert [c["label"] for c in harness.calls()] == [LABEL]
        approvals = [(d.by, d.signed_by) for d in (await run.ledger()).decisions if d.step_id == "pay"]
        assert approvals == [("dana", key.name), ("kim", key.name)]
