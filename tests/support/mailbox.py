"""A real SMTP server for the tests (aiosmtpd on a free loopback port) that keeps every message."""

from __future__ import annotations

import socket
from email import message_from_bytes, policy
from email.message import EmailMessage
from typing import Any

from aiosmtpd.controller import Controller


class Mailbox:
    """Messages as received, each with the recipients of its envelope; `refuse` names addresses
    answered with a permanent 550 at RCPT."""

    def __init__(self) -> None:
        self.received: list[tuple[list[str], EmailMessage]] = []
        self.refuse: set[str] = set()
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.controller = Controller(self, hostname="127.0.0.1", port=port)
        self.controller.start()
        self.url = f"smtp://127.0.0.1:{port}"

    async def handle_RCPT(self, server: Any, session: Any, envelope: Any, address: str, options: Any) -> str:  # noqa: N802
        if address in self.refuse:
            return "550 5.1.1 no such mailbox here"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802
        message = message_from_bytes(envelope.content, policy=policy.default)
        assert isinstance(message, EmailMessage)
        self.received.append((list(envelope.rcpt_tos), message))
        return "250 Message accepted"

    def to(self, address: str) -> list[EmailMessage]:
        return [message for rcpt, message in self.received if address in rcpt]

    def close(self) -> None:
        self.controller.stop()


def parts(message: EmailMessage) -> tuple[str, str]:
    """The plain text and the HTML of a message."""
    plain, html = message.get_body(("plain",)), message.get_body(("html",))
    assert plain is not None and html is not None, "a message has a plain and an HTML part"
    return plain.get_content(), html.get_content()
