"""Sending queued mail (`gpuquota.mail.outbox`): `mail.send` after the commit that queued a
key, `mail.queue` for the apps below mail that ask for a message by name, and the
`mail.send_due` sweep for whatever that left (broker down at commit, a worker
killed, a failure waiting for its backoff). Each is idempotent: a row is leased by one
sender at a time and a recipient served under a key is never mailed again; retries are
scheduled on the rows themselves, so the tasks do not retry."""

from celery import shared_task
from django.db import transaction

from accounts.models import User
from gpuquota.mail.conf import sweep_interval_s
from gpuquota.mail.outbox import mail_send_later, mail_send_queued


@shared_task(name="mail.send", acks_late=True)
def mail_send_task(*, key: str) -> dict:
    """Send the due queued messages of `key`."""
    return mail_send_queued(key=key).summary()


@shared_task(name="mail.send_due", acks_late=True)
def mail_send_due_task() -> dict:
    """Send every queued message that is due (a batch per run)."""
    return mail_send_queued().summary()


@shared_task(name="mail.queue", acks_late=True)
def mail_queue_task(*, template: str, recipient_ids: list[int], context: dict, key: str) -> int:
    """Queue a message asked for by name by an app below mail (single sign-on's): one row
    per active recipient and `key`, sent after this commit."""
    with transaction.atomic():
        return mail_send_later(template=template, key=key, context=context,
                               recipients=User.objects.filter(pk__in=recipient_ids,
                                                              is_active=True))


BEAT_SCHEDULE = {
    "mail-send-due": {
        "task": "mail.send_due",
        "schedule": sweep_interval_s(),
        "options": {"expires": max(sweep_interval_s() - 5, 5)},
    },
}
