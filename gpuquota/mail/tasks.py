"""Sending mail after commit: `mail.send` (idempotent: `mail_send` never mails a recipient
already served under the key, so a retry or a redelivered task mails only the rest)."""

from celery import shared_task

from accounts.models import User
from gpuquota.mail.conf import retry_countdown_s
from gpuquota.mail.services import mail_send


@shared_task(name="mail.send", bind=True, max_retries=6, acks_late=True)
def mail_send_task(self, *, template: str, recipient_ids: list[int], context: dict, key: str
                   ) -> dict:
    """Mail `recipient_ids` under `key`; retried with a growing delay (1 minute doubling, at
    most an hour, 6 times) while the SMTP server refuses or cannot be reached."""
    by_id = User.objects.in_bulk(recipient_ids)
    recipients = [by_id[pk] for pk in recipient_ids if pk in by_id]
    outcome = mail_send(template=template, recipients=recipients, context=context, key=key)
    if outcome.failed:
        raise self.retry(countdown=retry_countdown_s(self.request.retries))
    return outcome.summary()
