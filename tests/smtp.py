"""A real SMTP server on loopback for the mail tests (aiosmtpd): see the `smtp_server`
fixture in tests/conftest.py."""

import asyncio
import email
import email.policy
import threading
from dataclasses import dataclass, field
from email.message import EmailMessage

from aiosmtpd.controller import Controller

from tests.helpers import free_port


@dataclass
class Received:
    """One message as the server accepted it: the envelope and the parsed message."""

    mail_from: str
    rcpt_tos: list[str]
    message: EmailMessage

    @property
    def to(self) -> str:
        return self.rcpt_tos[0]

    def text(self) -> str:
        return self.message.get_body(preferencelist=("plain",)).get_content()

    def html(self) -> str:
        return self.message.get_body(preferencelist=("html",)).get_content()

    def attachments(self) -> dict[str, tuple[str, bytes]]:
        """filename -> (content type, bytes as sent)."""
        return {part.get_filename(): (part.get_content_type(), part.get_payload(decode=True))
                for part in self.message.iter_attachments()}


@dataclass
class _Handler:
    server: "SmtpServer"

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        if address in self.server.refused:
            return "550 5.1.1 mailbox unavailable"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        if self.server.hang & set(envelope.rcpt_tos):
            self.server.hanging += 1
            while self.server.hang & set(envelope.rcpt_tos):  # the sender waits for our reply
                await asyncio.sleep(0.05)
            return "451 4.3.0 try again later"
        if self.server.holding:
            self.server.held += 1
            while self.server.holding:  # a slow server: the sender waits for our 250
                await asyncio.sleep(0.05)
        message = email.message_from_bytes(envelope.original_content or envelope.content,
                                           policy=email.policy.default)
        with self.server.lock:
            self.server.messages.append(
                Received(mail_from=envelope.mail_from, rcpt_tos=list(envelope.rcpt_tos),
                         message=message))
        return "250 Message accepted for delivery"


@dataclass
class SmtpServer:
    """A capturing SMTP server on 127.0.0.1:`port`. `stop()` closes the port (senders get
    connection refused, as with a server that is down) and `start()` opens it again;
    `refused` holds addresses the server answers 550 for; a message to an address in `hang`
    is held without an answer (`hanging` counts them) until the address leaves `hang`, then
    refused with 451, never captured. While `holding`, every message is held without an
    answer (`held` counts them) and accepted once `holding` is False again: a slow server."""

    port: int = 0
    messages: list[Received] = field(default_factory=list)
    refused: set[str] = field(default_factory=set)
    hang: set[str] = field(default_factory=set)
    hanging: int = 0
    holding: bool = False
    held: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    _controller: Controller | None = None

    def start(self) -> None:
        if self._controller is not None:
            return
        if not self.port:
            self.port = free_port()
        self._controller = Controller(_Handler(self), hostname="127.0.0.1", port=self.port)
        self._controller.start()

    def stop(self) -> None:
        self.hang.clear()
        self.holding = False
        if self._controller is not None:
            self._controller.stop()
            self._controller = None

    @property
    def running(self) -> bool:
        return self._controller is not None

    def to(self, address: str) -> list[Received]:
        """The messages delivered to `address`."""
        with self.lock:
            return [m for m in self.messages if address in m.rcpt_tos]

    def recipients(self) -> list[str]:
        """Every envelope recipient, once per message (duplicates show as repeats)."""
        with self.lock:
            return [rcpt for m in self.messages for rcpt in m.rcpt_tos]
