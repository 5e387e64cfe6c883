"""The e-mail channel of the notify activity (stratagem.io.email_notify builds and sends).

Each recipient gets a message of their own, with a link of their own, and each delivery is
remembered in the output store (by the caller's `delivered` and `record`, per decision and
address) before the next: a retried attempt sends only what had not gone. Who may decide comes
from the run, never from the activity's input alone: the step's `approvers` are read from the
run's plan with a query (one per notification, only when addresses are configured by name), so
the workflow sends nothing more than it always has.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta

from temporalio import activity

from stratagem.domain import activity_io, handlers
from stratagem.domain.plan import Plan
from stratagem.io.email_notify import EmailConfig, RecipientRefusedError, compose, confirmation_link, send
from stratagem.io.notify import NotifyConfig

CHANNEL = "email"
QUERY_TIMEOUT = timedelta(seconds=10)
# Decisions about a step that the step's own `approvers` take (Step.approvers).
STEP_DECISIONS = ("step_approval", "human_answer", "tool_call_approval")


async def deciders(request: activity_io.NotifyInput, config: EmailConfig) -> list[str]:
    """The names (people and groups) the decision goes to: an escalation's group and its people,
    and a step's own approvers."""
    names = [request.escalated_to, *request.people] if request.escalated_to else []
    if request.step_id is not None and request.kind in STEP_DECISIONS and (config.groups or config.people):
        run = activity.client().get_workflow_handle(request.run_id)
        plan = await run.query(handlers.PLAN, result_type=Plan, rpc_timeout=QUERY_TIMEOUT)
        step = next((s for s in plan.steps if s.id == request.step_id), None) if plan is not None else None
        names += step.approvers if step is not None else []
    return names


async def send_emails(
    request: activity_io.NotifyInput,
    links: NotifyConfig,
    delivered: Callable[[str, str], bool],
    record: Callable[[str, str], None],
) -> bool:
    """Mail everyone the decision goes to who has not had it yet; whether any message went now.
    Without the console's address and secret the message has no link and says how to decide."""
    config = EmailConfig.from_env()
    if config is None:
        return False
    sent, refused = False, None
    for recipient in config.recipients(await deciders(request, config)):
        key = f"{request.key}\n{recipient.address.lower()}"
        if await asyncio.to_thread(delivered, CHANNEL, key):
            continue
        link, expires = None, None
        if links.console_url and links.secret:
            link, expires = confirmation_link(request, recipient, links.console_url, links.secret, config.link_seconds)
        message = compose(config, request, recipient, link, expires)
        try:
            await asyncio.to_thread(send, config.server, message)
        except RecipientRefusedError as exc:  # a wrong address in the configuration: the others still hear
            refused = refused or exc
            continue
        await asyncio.to_thread(record, CHANNEL, key)
        sent = True
    if refused is not None:
        raise refused
    return sent
