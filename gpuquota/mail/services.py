"""The one module that sends email. Every message goes through `mail_send`: one message per
recipient, rendered from a template set, recorded per (key, recipient) in `MailDelivery`.

Crash windows. Each recipient is served in two transactions. The first claims the row
(`sending`, attempts + 1) under a row lock and commits. The second locks the row again,
holds the lock through the SMTP conversation and commits `sent` (or `failed`). So:

- A concurrent call for the same key waits on the lock and then finds `sent`: never
  mailed twice by two live workers.
- A worker killed before the server accepted the message leaves `sending`, unlocked: the
  next call sends it (nothing was delivered).
- A worker killed in the few milliseconds between the server's 250 and our commit also
  leaves `sending`: the next call sends again. We chose this (at least once) over never
  resending a `sending` row (at most once), which would silently lose every message whose
  worker died during the seconds-long SMTP conversation. The copy carries the same
  Message-ID (`render.message_id`), so mail systems that de-duplicate by Message-ID show it
  once, and the row's `attempts` says it happened.

Callers inside a transaction use `gpuquota.mail.outbox.mail_send_later`, which writes the
message into this table with the change that causes it and sends it after commit;
`mail_send` itself refuses to run nested in another transaction (durable blocks), so a
rolled-back caller can never have mailed about something that did not happen.
"""

import logging
import smtplib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from email import encoders
from email.mime.base import MIMEBase

from django.contrib.auth.base_user import AbstractBaseUser
from django.core.mail import EmailMultiAlternatives, get_connection
from django.db import transaction
from django.utils import timezone

from gpuquota.mail.conf import mail_enabled
from gpuquota.mail.models import MailDelivery
from gpuquota.mail.render import RenderedMail, mail_render, message_id

# A recipient is a user of the user model (settings.AUTH_USER_MODEL, accounts' User): its
# email, email_opt_out, is_active and timezone. Mail imports no app but core, so any app
# may send mail.
Recipient = AbstractBaseUser

logger = logging.getLogger(__name__)
D = MailDelivery.Status

# Errors that concern one message (the server refused this sender, recipient or content);
# anything else from the connection means the server is unreachable for every recipient.
PER_MESSAGE_ERRORS = (
    smtplib.SMTPRecipientsRefused, smtplib.SMTPSenderRefused, smtplib.SMTPDataError,
)


@dataclass(frozen=True)
class Attachment:
    filename: str
    content: bytes
    mimetype: str


@dataclass
class MailOutcome:
    """What one `mail_send` call did, recipient by recipient."""

    sent: list = field(default_factory=list)  # users mailed by this call
    already: list = field(default_factory=list)  # served under this key earlier: not mailed
    skipped: list = field(default_factory=list)  # opted out or no address, recorded so
    failed: list = field(default_factory=list)  # (user, error text): retry later
    disabled: bool = False  # the global off switch was off: nothing sent, nothing recorded

    @property
    def complete(self) -> bool:
        """Every recipient is sent, already served or skipped (False when mail is off)."""
        return not self.disabled and not self.failed

    def summary(self) -> dict:
        return {
            "sent": [u.pk for u in self.sent], "already": [u.pk for u in self.already],
            "skipped": [u.pk for u in self.skipped], "failed": [u.pk for u, _ in self.failed],
            "disabled": self.disabled,
        }


def mail_send(
    *,
    template: str,
    recipients: Iterable[Recipient],
    context: dict,
    key: str,
    attachments: Sequence[Attachment] = (),
    force: bool = False,
    cc: Sequence[str] = (),
) -> MailOutcome:
    """One message per recipient, rendered from templates/mail/<template>/{subject.txt,body.txt,
    body.html} (context plus `recipient`), recorded per (key, recipient): a recipient already
    served under `key` is never mailed again (unless `force`: an explicit resend), so retries
    after an SMTP outage or a killed worker mail only those not yet served. It commits per
    recipient, so it runs outside any transaction (inside one: `outbox.mail_send_later`)."""
    outcome = MailOutcome()
    if not mail_enabled():
        outcome.disabled = True
        return outcome
    sender = _Sender()
    unique = _unique(recipients)
    # `cc` (addresses, not users) rides on the message of the first recipient who can be
    # mailed, always the same one, so a retry of the others never copies it twice
    carrier = next((r for r in unique if not _skip_reason(r)), None)
    try:
        for recipient in unique:
            _serve(recipient=recipient, template=template, context=context, key=key,
                   attachments=attachments, force=force, sender=sender, outcome=outcome,
                   cc=cc if recipient is carrier else ())
    finally:
        sender.close()
    return outcome


def _unique(recipients: Iterable[Recipient]) -> list[Recipient]:
    seen: dict[int, Recipient] = {}
    for user in recipients:
        seen.setdefault(user.pk, user)
    return list(seen.values())


def _serve(*, recipient: Recipient, template: str, context: dict, key: str,
           attachments: Sequence[Attachment], force: bool, sender: "_Sender",
           outcome: MailOutcome, cc: Sequence[str] = ()) -> str:
    """Serve one recipient under `key`; returns the row's status afterwards."""
    rendered = mail_render(template=template, context=context, recipient=recipient)
    claim = _claim(recipient=recipient, template=template, key=key, force=force)
    if claim == D.SENT:
        outcome.already.append(recipient)
        return claim
    if claim == D.SKIPPED:
        outcome.skipped.append(recipient)
        return claim
    with transaction.atomic(durable=True):
        delivery = MailDelivery.objects.select_for_update().get(key=key, recipient=recipient)
        if delivery.status == D.SENT:  # another call served it after our claim
            outcome.already.append(recipient)
            return D.SENT
        mid = message_id(key=key, recipient_id=recipient.pk)
        error = sender.send(_message(rendered, recipient=recipient, message_id=mid,
                                     attachments=attachments, cc=cc))
        if error:
            delivery.status, delivery.error = D.FAILED, error
            outcome.failed.append((recipient, error))
        else:
            delivery.status, delivery.error, delivery.sent_at = D.SENT, "", timezone.now()
            outcome.sent.append(recipient)
        delivery.message_id = mid
        delivery.save(update_fields=["status", "error", "sent_at", "message_id", "updated_at"])
    return delivery.status


def _claim(*, recipient: Recipient, template: str, key: str, force: bool) -> str:
    """Record that `recipient` is being served under `key` (committed before any SMTP);
    `sent`/`skipped` when there is nothing to send."""
    with transaction.atomic(durable=True):
        MailDelivery.objects.get_or_create(
            key=key, recipient=recipient, defaults={"template": template}
        )
        delivery = MailDelivery.objects.select_for_update().get(key=key, recipient=recipient)
        if delivery.status in (D.SENT, D.SKIPPED) and not force:
            return delivery.status
        if delivery.status == D.SENDING and delivery.attempts:
            # Interrupted (worker killed), or another call between its claim and its send:
            # the send step's lock and status check tell the two apart.
            logger.info("mail %s to user %s: an earlier attempt did not finish; claiming it "
                        "again (same Message-ID)", key, recipient.pk)
        skip_reason = _skip_reason(recipient)
        delivery.template = template
        if skip_reason:
            delivery.status, delivery.error = D.SKIPPED, skip_reason
        else:
            delivery.status, delivery.error = D.SENDING, ""
            delivery.attempts += 1
        delivery.save(update_fields=["template", "status", "error", "attempts", "updated_at"])
        return delivery.status


def _skip_reason(recipient: Recipient) -> str:
    if recipient.email_opt_out:
        return "opted out of email on their profile"
    if not recipient.email:
        return "no email address"
    if not recipient.is_active:
        return "account inactive"
    return ""


def _message(rendered: RenderedMail, *, recipient: Recipient, message_id: str,
             attachments: Sequence[Attachment], cc: Sequence[str] = ()
             ) -> EmailMultiAlternatives:
    message = EmailMultiAlternatives(
        subject=rendered.subject, body=rendered.text, to=[recipient.email],
        cc=[address for address in dict.fromkeys(cc) if address and address != recipient.email],
        headers={"Message-ID": message_id},
    )
    message.attach_alternative(rendered.html, "text/html")
    for attachment in attachments:
        message.attach(_attachment_part(attachment))
    return message


def _attachment_part(attachment: Attachment) -> MIMEBase:
    """Base64 whatever the type, so a CSV's line endings and a PDF's bytes arrive exactly
    as given (Django would send text/* as text, which SMTP may re-encode)."""
    maintype, _, subtype = attachment.mimetype.partition("/")
    part = MIMEBase(maintype, subtype or "octet-stream")
    part.set_payload(attachment.content)
    encoders.encode_base64(part)
    part.add_header("Content-Disposition", "attachment", filename=attachment.filename)
    return part


class _Sender:
    """One SMTP connection for a whole call, reopened after a per-message error; once the
    server is unreachable, the remaining recipients fail with the same error untried."""

    def __init__(self) -> None:
        self.connection = None
        self.down: str = ""

    def send(self, message: EmailMultiAlternatives) -> str:
        """'' when the server accepted the message, else the error text."""
        if self.down:
            return f"not tried: {self.down}"
        try:
            if self.connection is None:
                self.connection = get_connection(fail_silently=False)
                self.connection.open()
            if self.connection.send_messages([message]) != 1:
                return "the mail backend did not accept the message"
            return ""
        except PER_MESSAGE_ERRORS as exc:
            self.close()
            return _error_text(exc)
        except (OSError, smtplib.SMTPException) as exc:
            self.close()
            self.down = _error_text(exc)
            return self.down

    def close(self) -> None:
        if self.connection is not None:
            try:
                self.connection.close()
            except (OSError, smtplib.SMTPException):
                pass
            self.connection = None


def _error_text(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}"[:1000]
