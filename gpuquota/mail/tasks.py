"""Sending queued mail (`gpuquota.mail.outbox`): `mail.send` after the commit that queued a
key, and the `mail.send_due` sweep for whatever that left (broker down at commit, a worker
killed, a failure waiting for its backoff). Both are idempotent: a row is leased by one
sender at a time and a recipient served under a key is never mailed again; retries are
scheduled on the rows themselves, so the tasks do not retry."""

from celery import shared_task

from gpuquota.mail.conf import sweep_interval_s
from gpuquota.mail.outbox import mail_send_queued


@shared_task(name="mail.send", acks_late=True)
def mail_send_task(*, key: str) -> dict:
    """Send the due queued messages of `key`."""
    return mail_send_queued(key=key).summary()


@shared_task(name="mail.send_due", acks_late=True)
def mail_send_due_task() -> dict:
    """Send every queued message that is due (a batch per run)."""
    return mail_send_queued().summary()


BEAT_SCHEDULE = {
    "mail-send-due": {
        "task": "mail.send_due",
        "schedule": sweep_interval_s(),
        "options": {"expires": max(sweep_interval_s() - 5, 5)},
    },
}
