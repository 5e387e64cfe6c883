"""Slack messages as Block Kit (built with slack_sdk's models, which check Slack's limits): the
notification a run's pending decision sends, its Approve / Reject buttons, the reason dialog a
Reject opens, and the message a decision leaves in its place.

Everything a run wrote (its id, goal, questions, what a gated step will run) goes through
`untrusted`, as in the one-line text (stratagem.io.notify): no mention, no link but the console's.
A button's `value` (`Button`) says which decision it takes: the run, the wait's kind, step and
revision, the notification's key (which holds when the wait began, so a wait asked again is a new
one) and, for a gated step, `shown`: a digest of the lines the message showed. The console
(stratagem.console.slack) takes a click only for the decision still waiting with exactly those
lines, and sends the run's own preview digest with it, which the run checks once more.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from pydantic import BaseModel, Field, ValidationError
from slack_sdk.models.blocks import (
    ActionsBlock,
    Block,
    ButtonElement,
    ConfirmObject,
    ContextBlock,
    InputBlock,
    LinkButtonElement,
    MarkdownTextObject,
    PlainTextInputElement,
    SectionBlock,
)
from slack_sdk.models.views import View

from stratagem.io.notify import untrusted

APPROVE_ACTION = "stratagem_approve"
REJECT_ACTION = "stratagem_reject"
OPEN_ACTION = "stratagem_open"
REJECT_VIEW = "stratagem_reject"
REASON_BLOCK = REASON_ACTION = "reason"
# The waits a person can decide with a button: the rest need the console's forms (an in-doubt
# step's among them: the message links to its page, `notification`).
BUTTON_KINDS = frozenset({"plan_approval", "step_approval"})
SECTION_LIMIT = 3000  # Slack's, for a section's text
BLOCK_LIMIT = 50  # Slack's, for a message's blocks
VALUE_LIMIT = 2000  # Slack's, for a button's value
PRIVATE_LIMIT = 3000  # Slack's, for a view's private_metadata
REASON_LIMIT = 4000  # the console's, for a rejection's reason
_FENCE = re.compile(r"`{3,}")


class Button(BaseModel):
    """Which pending decision a button decides (its `value`, as compact JSON)."""

    run: str
    kind: str
    step: str | None = None
    rev: int
    key: str = Field(description="The notification's key: run/execution/pending key (since it began).")
    shown: str | None = Field(default=None, description="A gated step's: `shown_digest` of the lines shown.")

    def encode(self) -> str:
        return self.model_dump_json(exclude_none=True)

    @classmethod
    def decode(cls, value: str) -> Button | None:
        try:
            return cls.model_validate_json(value)
        except ValidationError:
            return None


def shown_digest(lines: list[str]) -> str:
    """What a message showed of a gated step, as a digest the console compares with the step's
    preview now (`StepPreview.lines`): equal only if an approver would have read the same."""
    return hashlib.sha256(json.dumps(lines, ensure_ascii=False).encode()).hexdigest()


def notification(
    *,
    text: str,
    run_id: str,
    goal: str,
    key: str,
    waiting: str,
    kind: str,
    step_id: str | None,
    revision: int,
    prompt: str,
    link: str | None,
    shows: list[str],
    escalated_to: str | None = None,
    people: list[str] | None = None,
) -> dict[str, Any]:
    """The Slack message for one pending decision; `text` is the one-line fallback
    (stratagem.io.notify.message) that notifications and clients without blocks show."""
    blocks: list[Block] = [
        _section(f"*Waiting for {untrusted(waiting, 300)}*\nRun {untrusted(run_id, 300)}: {untrusted(goal, 1000)}")
    ]
    if escalated_to:
        who = ", ".join(untrusted(person, 100) for person in people or [])
        blocks.append(_section(f"Escalated to {untrusted(escalated_to, 200)} ({who}), who may now decide."))
    if prompt.strip():
        blocks.append(_section(untrusted(prompt, SECTION_LIMIT - 10)))
    preview = _preview(shows) if shows else []
    # An approver decides on every value: what does not fit a message is decided in the console.
    fits = len(blocks) + len(preview) + 2 <= BLOCK_LIMIT
    if shows and fits:
        blocks += [_section("*It will run:*"), *preview]
    elif shows:
        blocks.append(_section("What it will run is longer than a Slack message holds: read it in the console."))
    if kind == "in_doubt":  # no button: the answer needs a look at the world first, and maybe an output
        blocks.append(
            _section(
                "Nothing is retried until a person says whether its effect happened: check where it acts, then say "
                "so in the console (it happened, with its output, or it did not and it runs again)."
            )
        )
    buttons: list[Any] = []
    button = Button(
        run=run_id, kind=kind, step=step_id, rev=revision, key=key, shown=shown_digest(shows) if shows else None
    )
    value = button.encode()
    if kind in BUTTON_KINDS and fits and len(value) <= VALUE_LIMIT and (kind != "step_approval" or shows):
        buttons += _decision_buttons(value, kind, step_id, revision)
    if link and len(link) <= 3000:
        buttons.append(LinkButtonElement(text="Open in the console", url=link, action_id=OPEN_ACTION))
    if buttons:
        blocks.append(ActionsBlock(elements=buttons))
    else:
        blocks.append(ContextBlock(elements=[MarkdownTextObject(text=f"stratagem status {untrusted(run_id, 300)}")]))
    return {"text": text, "blocks": [b.to_dict() for b in blocks], "unfurl_links": False, "unfurl_media": False}


def _decision_buttons(value: str, kind: str, step_id: str | None, revision: int) -> list[ButtonElement]:
    """Approve and Reject, each asking first: Slack's confirm dialog says what the click does."""
    if kind == "plan_approval":
        what, rejected = f"the plan (revision {revision})", "The run ends."
    else:
        what, rejected = f"step {untrusted(step_id or '', 100)}", "It is sent back for a replan or a repair."
    confirm = ConfirmObject(
        title="Approve?",
        text=MarkdownTextObject(text=f"Approve {what}, as shown? It is recorded as your decision."),
        confirm="Approve",
        deny="Cancel",
    )
    refuse = ConfirmObject(
        title="Reject?",
        text=MarkdownTextObject(text=f"Reject {what}? {rejected}"),
        confirm="Reject",
        deny="Cancel",
        style="danger",
    )
    return [
        ButtonElement(text="Approve", action_id=APPROVE_ACTION, value=value, style="primary", confirm=confirm),
        ButtonElement(text="Reject", action_id=REJECT_ACTION, value=value, style="danger", confirm=refuse),
    ]


def _preview(shows: list[str]) -> list[SectionBlock]:
    """What a gated step will run, as code blocks (their text is not formatted), every line, in as
    many sections as it takes. Each line is `untrusted` but keeps its indentation; a run of
    backticks, which would end the block, is shown as modifier graves (ˋˋˋ)."""
    lines = []
    for line in shows:
        indent = len(line) - len(line.lstrip(" "))
        lines.append(" " * indent + _FENCE.sub(lambda m: "ˋ" * len(m.group()), untrusted(line)))
    room = SECTION_LIMIT - len("```\n\n```")
    chunks: list[str] = []
    current = ""
    for line in lines:
        for piece in _pieces(line, room):
            if current and len(current) + 1 + len(piece) > room:
                chunks.append(current)
                current = ""
            current = f"{current}\n{piece}" if current else piece
    if current:
        chunks.append(current)
    return [_section(f"```\n{chunk}\n```") for chunk in chunks]


def _pieces(line: str, room: int) -> list[str]:
    """A line cut into pieces of at most `room` characters, never inside an escape (`&amp;`)."""
    pieces = []
    while len(line) > room:
        cut = room
        amp = line.rfind("&", cut - 6, cut)
        if amp != -1 and ";" not in line[amp:cut]:
            cut = amp
        pieces.append(line[:cut])
        line = line[cut:]
    return [*pieces, line]


def _section(text: str) -> SectionBlock:
    return SectionBlock(text=MarkdownTextObject(text=text))


def reason_dialog(button: Button, waiting: str, response_url: str) -> View | None:
    """The modal a Reject opens: the reason, sent back with the button and the message's
    response_url (its private_metadata: Slack returns it signed, with the submission). None when
    they do not fit."""
    private = json.dumps({"button": button.encode(), "response_url": response_url})
    if len(private) > PRIVATE_LIMIT:
        return None
    return View(
        type="modal",
        callback_id=REJECT_VIEW,
        title="Reject",
        submit="Reject",
        close="Cancel",
        private_metadata=private,
        blocks=[
            _section(f"Reject {untrusted(waiting, 300)} on run {untrusted(button.run, 300)}?"),
            InputBlock(
                block_id=REASON_BLOCK,
                label="Reason (the run is told)",
                element=PlainTextInputElement(action_id=REASON_ACTION, multiline=True, max_length=REASON_LIMIT),
            ),
        ],
    )


def decided(
    *, verdict: str, who: str, waiting: str, run_id: str, outcome: str, link: str | None, reason: str = ""
) -> dict[str, Any]:
    """What replaces a notification once someone decided from it: who, what, and the run's answer."""
    head = f"*{verdict}* by {untrusted(who, 100)}: {untrusted(waiting, 300)} on run {untrusted(run_id, 300)}"
    if reason:
        head += f"\nReason: {untrusted(reason, 2000)}"
    blocks: list[Block] = [_section(head)]
    if outcome:
        blocks.append(ContextBlock(elements=[MarkdownTextObject(text=untrusted(outcome, 2000))]))
    if link and len(link) <= 3000:
        blocks.append(ActionsBlock(elements=[LinkButtonElement(text="Open in the console", url=link)]))
    text = f"{verdict} by {untrusted(who, 100)}: {untrusted(waiting, 300)} on run {untrusted(run_id, 300)}"
    return {"replace_original": True, "text": text, "blocks": [b.to_dict() for b in blocks]}


def ephemeral(text: str) -> dict[str, Any]:
    """A reply only the person who clicked sees; the message stays as it was."""
    return {"response_type": "ephemeral", "replace_original": False, "text": text}


__all__ = [
    "APPROVE_ACTION",
    "REJECT_ACTION",
    "REJECT_VIEW",
    "Button",
    "decided",
    "ephemeral",
    "notification",
    "reason_dialog",
    "shown_digest",
]
