"""Telling people by e-mail that a run waits for them: one message per pending decision and
recipient, plain text with an HTML alternative, carrying what waits, what a gated step will run
(every value) and a signed, single-use, expiring link to a confirmation page in the console.

Where messages go is the worker's configuration, never a run's: a run names approvers and groups,
and only this configuration turns a name into an address, so a run cannot send its details to an
address of its choosing.

    STRATAGEM_NOTIFY_SMTP_URL          smtp://host:port, smtps://host:port (TLS), smtp://...?starttls=1;
                                       user:password@ before the host to sign in (never in clear text)
    STRATAGEM_NOTIFY_EMAIL_FROM        the sender
    STRATAGEM_NOTIFY_EMAIL_TO          who is told when nobody the decision names has an address
    STRATAGEM_NOTIFY_EMAIL_GROUPS      group=address,address;group=address (the run's approver groups)
    STRATAGEM_NOTIFY_EMAIL_PEOPLE      person=address;person=address (console people: their links name them)
    STRATAGEM_NOTIFY_EMAIL_LINK_DAYS   how long a link works (default 7)
"""

from __future__ import annotations

import html
import ipaddress
import os
import re
import smtplib
import ssl
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from email.message import EmailMessage
from email.utils import formatdate
from urllib.parse import unquote, urlsplit

from stratagem.common.errors import ConfigError
from stratagem.domain.activity_io import NotifyInput
from stratagem.domain.visible_text import visible
from stratagem.io.email_links import EmailLink, decision_key, link_id, sign_link
from stratagem.io.notify import SMTP_ENV

FROM_ENV = "STRATAGEM_NOTIFY_EMAIL_FROM"
TO_ENV = "STRATAGEM_NOTIFY_EMAIL_TO"
GROUPS_ENV = "STRATAGEM_NOTIFY_EMAIL_GROUPS"
PEOPLE_ENV = "STRATAGEM_NOTIFY_EMAIL_PEOPLE"
LINK_DAYS_ENV = "STRATAGEM_NOTIFY_EMAIL_LINK_DAYS"
DEFAULT_LINK_DAYS = 7.0
TIMEOUT_SECONDS = 10  # each SMTP exchange (connect, each command): a mail server that hangs does not hold a retry
DEFAULT_PORTS = {"smtp": 25, "smtps": 465}
# An address as written in this configuration: no display name, no spaces, commas or line breaks.
_ADDRESS = re.compile(r"[^@\s,;<>()\"']+@[^@\s,;<>()\"']+\.[^@\s,;<>()\"'.]+")


class RecipientRefusedError(ConfigError):
    """The mail server refused an address for good: the others still get theirs."""


@dataclass(frozen=True)
class SmtpServer:
    host: str
    port: int
    tls: str  # "none", "starttls" or "tls" (smtps://)
    user: str | None = None
    password: str | None = field(default=None, repr=False)

    @classmethod
    def parse(cls, url: str) -> SmtpServer:
        """The server a URL names; ConfigError (one line, the password never in it) for anything else."""
        shown = _shown(re.sub(r"//[^@/]*@", "//***@", url))
        try:
            parts = urlsplit(url.strip())
            port = parts.port
        except ValueError:
            raise ConfigError(f"{SMTP_ENV} is not a URL: '{shown}'") from None
        scheme = parts.scheme.lower()
        if scheme not in DEFAULT_PORTS or not parts.hostname or parts.path not in ("", "/"):
            raise ConfigError(
                f"{SMTP_ENV} must be smtp://host:port, smtps://host:port or smtp://host:port?starttls=1, not '{shown}'"
            )
        query = {name: value for name, _, value in (item.partition("=") for item in parts.query.split("&") if item)}
        if set(query) - {"starttls"} or query.get("starttls", "1") not in ("1", "0", "true", "false", "yes", "no"):
            raise ConfigError(f"{SMTP_ENV} takes only ?starttls=1 after the address, not '?{_shown(parts.query)}'")
        starttls = query.get("starttls", "0") in ("1", "true", "yes")
        if scheme == "smtps" and starttls:
            raise ConfigError(f"{SMTP_ENV}: smtps:// is TLS from the start; ?starttls=1 is for smtp://")
        tls = "tls" if scheme == "smtps" else "starttls" if starttls else "none"
        user = unquote(parts.username) if parts.username else None
        if user is not None and tls == "none" and not loopback_host(parts.hostname):
            raise ConfigError(
                f"{SMTP_ENV} signs in to {parts.hostname} without TLS, which would send the password in clear "
                "text; use smtps:// or ?starttls=1"
            )
        password = unquote(parts.password) if parts.password else None
        return cls(parts.hostname, port or DEFAULT_PORTS[scheme], tls, user, password)


@dataclass(frozen=True)
class Recipient:
    address: str
    person: str | None = None


@dataclass(frozen=True)
class EmailConfig:
    server: SmtpServer
    sender: str
    default_to: tuple[str, ...] = ()
    groups: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    people: Mapping[str, str] = field(default_factory=dict)
    link_seconds: int = int(DEFAULT_LINK_DAYS * 86400)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> EmailConfig | None:
        """The worker's e-mail configuration; None without STRATAGEM_NOTIFY_SMTP_URL, ConfigError
        (one line) for anything wrong in it."""
        env = os.environ if env is None else env
        url = env.get(SMTP_ENV, "").strip()
        if not url:
            return None
        server = SmtpServer.parse(url)
        sender = env.get(FROM_ENV, "").strip()
        if not _ADDRESS.fullmatch(sender):
            raise ConfigError(f"{SMTP_ENV} is set: {FROM_ENV} must be the sender's address, not '{_shown(sender)}'")
        groups = {name: tuple(addresses) for name, addresses in _mapping(env, GROUPS_ENV).items()}
        people = {}
        for name, addresses in _mapping(env, PEOPLE_ENV).items():
            if len(addresses) != 1:
                raise ConfigError(
                    f"{PEOPLE_ENV}: '{_shown(name)}' is one person with one address, not {len(addresses)}"
                )
            people[name] = addresses[0]
        days_text = env.get(LINK_DAYS_ENV, "").strip() or str(DEFAULT_LINK_DAYS)
        try:
            days = float(days_text)
        except ValueError:
            days = -1.0
        if not 0 < days <= 90:
            raise ConfigError(f"{LINK_DAYS_ENV} must be a number of days from above 0 to 90, not '{_shown(days_text)}'")
        return cls(
            server=server,
            sender=sender,
            default_to=tuple(_addresses(env.get(TO_ENV, ""), TO_ENV)),
            groups=groups,
            people=people,
            link_seconds=int(days * 86400),
        )

    def recipients(self, names: Iterable[str]) -> list[Recipient]:
        """Who is told of a decision that `names` (people and groups) may take: their addresses
        from this configuration, else the default recipients. An address that is one person's
        names them, so their link decides as them."""
        found: list[str] = []
        for name in names:
            for address in (*self.groups.get(name, ()), *([self.people[name]] if name in self.people else [])):
                if address.lower() not in (a.lower() for a in found):
                    found.append(address)
        return [Recipient(address, self.person_of(address)) for address in found or self.default_to]

    def person_of(self, address: str) -> str | None:
        """The one person whose address this is; None for a group's or a shared one."""
        owners = [name for name, mine in self.people.items() if mine.lower() == address.lower()]
        return owners[0] if len(owners) == 1 else None


def _shown(text: str) -> str:
    """A configured value in a one-line error: line breaks and other controls written out, cut."""
    return text.encode("unicode_escape").decode()[:120]


def loopback_host(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _mapping(env: Mapping[str, str], variable: str) -> dict[str, list[str]]:
    """`name=address,address;name=address` as a mapping; ConfigError naming what is wrong."""
    result: dict[str, list[str]] = {}
    for entry in filter(None, (part.strip() for part in env.get(variable, "").split(";"))):
        name, equals, addresses = entry.partition("=")
        if not equals or not name.strip():
            raise ConfigError(f"{variable}: '{_shown(entry)}' is not name=address,address")
        result[name.strip()] = _addresses(addresses, variable)
    return result


def _addresses(text: str, variable: str) -> list[str]:
    addresses = [part.strip() for part in text.split(",") if part.strip()]
    for address in addresses:
        if not _ADDRESS.fullmatch(address):
            raise ConfigError(f"{variable}: '{_shown(address)}' is not an e-mail address (name@example.com)")
    return addresses


# ------------------------------------------------------------------ the message


def confirmation_link(
    request: NotifyInput, recipient: Recipient, console_url: str, secret: bytes, seconds: int, now: float | None = None
) -> tuple[str, int]:
    """The recipient's own link to the confirmation page, and when it expires."""
    expires = int((time.time() if now is None else now) + seconds)
    link = EmailLink(
        run_id=request.run_id,
        decision=decision_key(request.key, request.run_id),
        person=recipient.person,
        link_id=link_id(request.key, recipient.address),
        expires=expires,
    )
    return f"{console_url}/email/{sign_link(secret, link)}", expires


def compose(
    config: EmailConfig,
    request: NotifyInput,
    recipient: Recipient,
    link: str | None,
    expires: int | None = None,
) -> EmailMessage:
    """The message: what waits, on which run, what a gated step will run (every value, never cut)
    and where to decide. What the run wrote (its id, goal, question, arguments) is inert text in
    both parts: invisible characters dropped, escaped in the HTML, and URLs and host names
    defanged (`https://evil.example` reads `https[:]//evil[.]example`), so the one link a mail
    client shows is the console's."""
    run, waiting = inert(request.run_id), inert(request.waiting)
    facts = [("Goal", inert(request.goal, 500)), ("Asks", inert(request.prompt, 2000))]
    if request.escalated_to:
        who = ", ".join(inert(person) for person in request.people)
        facts.append(("Escalated", f"to {inert(request.escalated_to)} ({who}), who may now decide"))
    shows = [inert_line(line) for line in request.shows]
    if link is None:
        where = [f"Decide in the review console, or from a terminal: stratagem status {run}"]
    else:
        where = [
            f"Decide: {link}",
            "The link opens a confirmation page; nothing is decided until you approve or reject there.",
            (f"It is for {inert(recipient.person)} only, " if recipient.person else "It ")
            + "works once"
            + (f" and expires on {formatdate(expires, usegmt=True)}." if expires else "."),
        ]
    text = [f"Run {run} waits for {waiting}.", ""]
    text += [f"{label}: {value}" for label, value in facts if value]
    if shows:
        text += ["", "It will run:", *(f"  {line}" for line in shows)]
    text += ["", *where]

    e = html.escape
    page = [f"<p>Run <code>{e(run)}</code> waits for <strong>{e(waiting)}</strong>.</p>"]
    page += [f"<p><b>{e(label)}:</b> {e(value)}</p>" for label, value in facts if value]
    if shows:
        page.append("<p><b>It will run:</b></p><pre>" + e("\n".join(shows)) + "</pre>")
    if link is not None:
        page.append(f'<p><a href="{e(link, quote=True)}">Open the confirmation page</a></p>')
        page += [f"<p><small>{e(line)}</small></p>" for line in where[1:]]
    else:
        page.append(f"<p>{e(where[0])}</p>")

    message = EmailMessage()
    message["Subject"] = inert(f"Run {request.run_id} waits for {request.waiting}: {request.goal}", 150)
    message["From"] = config.sender
    message["To"] = recipient.address
    message["Date"] = formatdate(usegmt=True)
    # The same for a retried send, so a mailbox that already has it can tell.
    message["Message-ID"] = f"<{link_id(request.key, recipient.address)}@stratagem>"
    message["Auto-Submitted"] = "auto-generated"
    message.set_content("\n".join(text) + "\n")
    message.add_alternative("<!doctype html><html><body>" + "\n".join(page) + "</body></html>\n", subtype="html")
    return message


# What a mail client turns into a link in text: a scheme, and a dot between the labels of a name.
_SCHEME = re.compile(r"://")
_NAME_DOT = re.compile(r"(?<=[A-Za-z0-9-])\.(?=[A-Za-z][A-Za-z0-9-])")


def inert(text: str, limit: int | None = None) -> str:
    """Text a run wrote, on one line, cut to `limit`, unable to link anywhere."""
    return inert_line(" ".join(visible(text).split()), limit)


def inert_line(text: str, limit: int | None = None) -> str:
    text = visible(text).replace("\r", " ").replace("\n", " ")
    if limit is not None and len(text) > limit:
        text = text[: limit - 1] + "…"
    return _NAME_DOT.sub("[.]", _SCHEME.sub("[:]//", text))


# ------------------------------------------------------------------ sending


def send(server: SmtpServer, message: EmailMessage, timeout: float = TIMEOUT_SECONDS) -> None:
    """Deliver `message` (blocking: the activity runs it in a thread). What another attempt cannot
    fix (a refused login, sender or recipient, a server without STARTTLS) is a ConfigError, which
    the activity does not retry; a connection that fails or times out is retried."""
    context = ssl.create_default_context()
    try:
        if server.tls == "tls":
            smtp: smtplib.SMTP = smtplib.SMTP_SSL(server.host, server.port, timeout=timeout, context=context)
        else:
            smtp = smtplib.SMTP(server.host, server.port, timeout=timeout)
        with smtp:
            if server.tls == "starttls":
                smtp.starttls(context=context)
            if server.user:
                smtp.login(server.user, server.password or "")
            smtp.send_message(message)
    except smtplib.SMTPAuthenticationError as exc:
        raise ConfigError(f"the mail server {server.host} refused the login of {server.user}: {_said(exc)}") from None
    except smtplib.SMTPNotSupportedError:
        raise ConfigError(f"the mail server {server.host} offers no STARTTLS; use smtps:// or another server") from None
    except smtplib.SMTPRecipientsRefused as exc:
        refused = ", ".join(f"{address} ({code})" for address, (code, _) in exc.recipients.items())
        raise RecipientRefusedError(f"the mail server {server.host} refused the recipient {refused}") from None
    except smtplib.SMTPResponseException as exc:
        if exc.smtp_code >= 500:  # permanent: the same message would be refused again
            raise ConfigError(f"the mail server {server.host} refused the message: {_said(exc)}") from None
        raise


def _said(exc: smtplib.SMTPResponseException) -> str:
    said = exc.smtp_error.decode(errors="replace") if isinstance(exc.smtp_error, bytes) else str(exc.smtp_error)
    return f"{exc.smtp_code} {' '.join(said.split())[:200]}"


__all__ = [
    "EmailConfig",
    "Recipient",
    "RecipientRefusedError",
    "SmtpServer",
    "compose",
    "confirmation_link",
    "inert",
    "send",
]
