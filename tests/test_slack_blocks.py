"""Slack's side without a server (issue #39, item 1): the Block Kit notification (what it shows,
which buttons, nothing a run wrote able to mention or link), a preview too long for one section,
and mapping a Slack user to a console person in the users file and with `console-user --slack`."""

from __future__ import annotations

import json
import os
import time
from typing import Any

import pytest
import yaml
from support.cli import cli, one_line_error

from stratagem.common.errors import ConfigError
from stratagem.console import Users
from stratagem.io.slack_blocks import APPROVE_ACTION, REJECT_ACTION, Button, notification, shown_digest

pytestmark = pytest.mark.unit

PAYLOADS = (
    "& <!channel> <!here|here> <@U0123ABCD> <#C0123ABCD> <https://evil.example/pay|Decide in the console> "
    "@here @everyone \u202egnp.exe see https://evil.example/approve or www.evil.example, [Decide](https://evil.example)"
)
LINK = "https://review.example.com/runs/r-1?exp=9&sig=abc"


def message(kind: str = "step_approval", shows: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "text": "fallback",
        "run_id": "r-1",
        "goal": "pay acme",
        "key": "r-1/x/step_approval/pay/-/r1/2026-11-27T10:00:00+00:00",
        "waiting": "approval of step pay",
        "kind": kind,
        "step_id": "pay" if kind == "step_approval" else None,
        "revision": 1,
        "prompt": "Approve step pay?",
        "link": LINK,
        "shows": ["record(", '  label="pay acme"', ")"] if shows is None else shows,
    }
    return notification(**{**fields, **extra})


def texts(blocks: list[dict[str, Any]]) -> list[str]:
    """Every text Slack renders as mrkdwn in the message."""
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("type") == "mrkdwn":
                found.append(node["text"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(blocks)
    return found


def actions(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for b in blocks if b["type"] == "actions" for e in b["elements"]]


def test_a_gated_step_is_shown_in_full_with_buttons_bound_to_what_was_shown():
    sent = message()
    assert sent["text"] == "fallback" and sent["unfurl_links"] is False and sent["unfurl_media"] is False
    assert '```\nrecord(\n  label="pay acme"\n)\n```' in texts(sent["blocks"])
    approve, reject, open_ = actions(sent["blocks"])
    assert (approve["action_id"], reject["action_id"], open_["url"]) == (APPROVE_ACTION, REJECT_ACTION, LINK)
    assert approve["style"] == "primary" and "confirm" in approve
    button = Button.decode(approve["value"])
    assert button == Button.decode(reject["value"])
    assert button is not None and (button.run, button.kind, button.step, button.rev) == (
        "r-1",
        "step_approval",
        "pay",
        1,
    )
    assert button.shown == shown_digest(["record(", '  label="pay acme"', ")"])


def test_only_approvals_get_buttons_the_rest_a_link_to_the_console():
    plan = actions(message("plan_approval", shows=[])["blocks"])
    assert [e.get("action_id") for e in plan] == [APPROVE_ACTION, REJECT_ACTION, "stratagem_open"]
    assert Button.decode(plan[0]["value"]).shown is None  # type: ignore[union-attr]
    for kind in ("human_answer", "repair", "budget", "tool_call_approval"):
        assert [e.get("url") for e in actions(message(kind, shows=[])["blocks"])] == [LINK], kind
    # A step approval that shows nothing (an older worker's) cannot be approved unseen.
    assert [e.get("url") for e in actions(message("step_approval", shows=[])["blocks"])] == [LINK]
    # Without a console URL: no link, the command to look.
    alone = message("human_answer", shows=[], link=None)["blocks"]
    assert not actions(alone) and alone[-1]["elements"][0]["text"] == "stratagem status r-1"


def test_nothing_a_run_wrote_can_mention_anyone_or_link_anywhere():
    sent = message(
        goal=f"pay {PAYLOADS}",
        prompt=f"Approve {PAYLOADS}?",
        waiting=f"approval of step {PAYLOADS}",
        shows=["record(", f"  label={json.dumps(PAYLOADS)}", ")"],
        escalated_to=f"leads {PAYLOADS}",
        people=[f"erin {PAYLOADS}"],
    )
    for text in texts(sent["blocks"]):
        for sequence in ("<", ">", "evil.example", "://", "@here", "@everyone", "](", "\u202e"):
            assert sequence not in text, (sequence, text)
    everything = "\n".join(texts(sent["blocks"]))
    assert "&amp; &lt;!channel&gt;" in everything and "https[:]//evil[.]example" in everything
    assert [e["url"] for e in actions(sent["blocks"]) if "url" in e] == [LINK]  # the one link


def test_a_long_preview_takes_many_sections_cut_nowhere_and_one_too_long_is_left_to_the_console():
    value = "x" * 4000 + " & " + "y" * 2500
    lines = ["record(", f'  label="{value}"', ")"]
    sent = message(shows=lines)
    code = [t for t in texts(sent["blocks"]) if t.startswith("```")]
    assert len(code) > 1 and all(len(t) <= 3000 for t in code)
    joined = "".join(t.removeprefix("```\n").removesuffix("\n```") for t in code)
    assert joined.replace("\n", "") == "".join(lines).replace("&", "&amp;")
    assert any(e.get("action_id") == APPROVE_ACTION for e in actions(sent["blocks"]))
    huge = message(shows=["record(", *[f"  a{i}={'z' * 2900!r}" for i in range(60)], ")"])
    assert not any(e.get("action_id") == APPROVE_ACTION for e in actions(huge["blocks"]))
    assert any("longer than a Slack message holds" in t for t in texts(huge["blocks"]))
    assert len(huge["blocks"]) <= 50


def test_a_run_of_backticks_cannot_end_the_code_block():
    sent = message(shows=["record(", '  label="a ``` b"', ")"])
    [code] = [t for t in texts(sent["blocks"]) if t.startswith("```")]
    assert code.count("```") == 2 and "ˋˋˋ" in code


def test_a_slack_user_is_one_persons_and_a_person_may_have_no_password(tmp_path):
    path = tmp_path / "users.yaml"
    with Users.editing(path) as users:
        users.set_password("dana", "correct horse")
        users.set_slack("dana", "U0DANA1")
        users.set_slack("erin", "W0ERIN1")
    assert yaml.safe_load(path.read_text())["users"]["erin"] == {"slack": "W0ERIN1"}
    users = Users.load(path)
    assert (users.slack_user("U0DANA1"), users.slack_user("W0ERIN1"), users.slack_user("U0OTHER")) == (
        "dana",
        "erin",
        None,
    )
    assert users.login("erin", "") is None and users.session_key("erin") is None  # Slack only
    assert users.login("dana", "correct horse") == "dana"
    with pytest.raises(ConfigError, match="is dana's; unmap it first"):
        users.set_slack("erin", "U0DANA1")
    with pytest.raises(ConfigError, match="is not a Slack user id"):
        users.set_slack("erin", "dana@example.com")
    assert users.remove("erin") == 0 and users.slack_user("W0ERIN1") is None


def test_console_user_maps_and_unmaps_a_slack_user_with_one_line_errors(tmp_path):
    env = {**os.environ, "STRATAGEM_HOME": str(tmp_path / "home")}
    users = str(tmp_path / "users.yaml")
    mapped = cli("console-user", "dana", "--slack", "U0DANA1", "--users", users, env=env)
    assert mapped.returncode == 0 and "Slack user U0DANA1 decides as dana" in mapped.stdout, mapped
    assert Users.load(tmp_path / "users.yaml").slack_user("U0DANA1") == "dana"
    one_line_error(cli("console-user", "erin", "--slack", "U0DANA1", "--users", users, env=env), "is dana's")
    one_line_error(cli("console-user", "erin", "--slack", "dana", "--users", users, env=env), "not a Slack user id")
    one_line_error(cli("console-user", "erin", "--no-slack", "--users", users, env=env), "has no Slack user")
    both = cli("console-user", "dana", "--slack", "U0DANA1", "--remove", "--users", users, env=env)
    one_line_error(both, "without --slack")
    with_password = cli(
        "console-user",
        "lee",
        "--slack",
        "U0LEE01",
        "--password-stdin",
        "--users",
        users,
        env=env,
        stdin="long enough\n",
    )
    assert with_password.returncode == 0, with_password
    again = Users.load(tmp_path / "users.yaml")
    assert again.slack_user("U0LEE01") == "lee" and again.login("lee", "long enough") == "lee"
    unmapped = cli("console-user", "dana", "--no-slack", "--users", users, env=env)
    assert unmapped.returncode == 0 and "no longer decides from Slack" in unmapped.stdout
    assert yaml.safe_load((tmp_path / "users.yaml").read_text())["users"]["dana"] == {}  # listed, able to do nothing


def test_the_console_believes_only_slacks_signature_made_within_five_minutes():
    from test_slack import SECRET, signed

    from stratagem.console.slack_app import SlackApp

    app = SlackApp(signing_secret=SECRET)
    body, headers = signed({"type": "block_actions"})
    assert app.signed(body, headers)
    assert not app.signed(body + b"&x=1", headers)  # the body changed
    assert not app.signed(*signed({"type": "block_actions"}, at=time.time() - 301))
    assert not app.signed(*signed({"type": "block_actions"}, at=time.time() + 301))
    assert app.signed(*signed({"type": "block_actions"}, at=time.time() - 280))
    assert not app.signed(body, {**headers, "X-Slack-Request-Timestamp": "soon"})
    assert not app.signed(body, {"X-Slack-Signature": headers["X-Slack-Signature"]})


async def test_a_dialog_slack_will_not_open_is_said_not_raised():
    from support.webhooks import Receiver

    from stratagem.console.slack_app import SlackApp

    slack = Receiver(answer={"ok": False, "error": "expired_trigger_id"})
    try:
        app = SlackApp(signing_secret="s", bot_token="xoxb-1", api_url=slack.url + "/api/")
        assert await app.open_view("T-1", {"type": "modal"}) == "Slack said expired_trigger_id"
        assert slack.received[0]["path"] == "/api/views.open"
        assert await SlackApp(signing_secret="s").open_view("T-1", {}) == "the console has no Slack bot token"
        unreachable = SlackApp(signing_secret="s", bot_token="xoxb-1", api_url="http://127.0.0.1:9/api/")
        assert "could not be reached" in (await unreachable.open_view("T-1", {}) or "")
    finally:
        slack.close()
