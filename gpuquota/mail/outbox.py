"""The mail outbox: mail caused by a change is written to the database in the transaction of
that change, so it is sent even when the broker is down at commit.

`mail_send_later` writes one `queued` `MailDelivery` per recipient, carrying the template's
context, in the caller's transaction (rolled back with it), and asks the `mail.send` task
to send them once that transaction commits. If the task cannot be queued (the broker is
unreachable) or its worker dies, the rows stay, and the `mail.send_due` sweep (beat, every
minute) sends every row whose `next_attempt_at` has come. On the embedded default (no
broker) the task runs in process right after the commit, as before.

Who sends a row. A sender first *leases* the due rows (`SELECT ... FOR UPDATE SKIP LOCKED`,
then `next_attempt_at = now + lease`), so the after-commit task and the sweep never take the
same rows, and rows whose sender was killed come due again when the lease ends. Each row is
then served by `services._serve`, with its claim-and-lock protocol (see that module for the
crash windows): a second live sender of one row waits on its lock and finds it `sent`.

Delivery is *at least once* in one window only: a worker killed between the server's 250
and our commit leaves `sending`, and the row is sent again (same Message-ID) when its lease
ends. We chose that over *at most once*, which would lose every message whose worker died
during the SMTP conversation. A failure is retried after 1, 2, 4... minutes (at most an
hour); after `max_attempts()` attempts the row is `given_up` and only an explicit
`mail_send` under its key would try it again.
"""

import logging
from collections.abc import Iterable
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import F
from django.utils import timezone
from kombu.utils.json import dumps, loads

from gpuquota.core.dispatch import task_enqueue_on_commit
from gpuquota.mail.conf import lease_s, mail_enabled, max_attempts, retry_countdown_s
from gpuquota.mail.models import MailDelivery
from gpuquota.mail.services import MailOutcome, Recipient, _Sender, _serve, _unique

logger = logging.getLogger(__name__)
D = MailDelivery.Status
OPEN = [D.QUEUED, D.SENDING, D.FAILED]  # an outbox row a sender may still take
SWEEP_BATCH = 200


def mail_send_later(*, template: str, recipients: Iterable[Recipient], context: dict,
                    key: str) -> int:
    """Queue one message per recipient under `key` in the current transaction and send it
    after commit (`mail.send`; the sweep if that never runs). The context must survive JSON
    (strings, numbers, datetimes, Decimals, lists, dicts): checked here, not in the worker.
    A recipient already queued or served under `key` is left alone. Returns rows queued."""
    try:
        payload = dumps(context)
    except TypeError as exc:
        raise ValueError(f"mail context for {template!r} is not JSON-serialisable: {exc}") from exc
    if not mail_enabled():  # the off switch: nothing sent, nothing recorded
        return 0
    users = _unique(recipients)
    known = set(MailDelivery.objects.filter(key=key, recipient__in=users)
                .values_list("recipient_id", flat=True))
    now = timezone.now()
    rows = [MailDelivery(key=key, recipient=user, template=template, status=D.QUEUED,
                         context_json=payload, next_attempt_at=now)
            for user in users if user.pk not in known]
    if not rows:
        return 0
    # A concurrent queue under the same key loses the race quietly: one row per recipient.
    MailDelivery.objects.bulk_create(rows, ignore_conflicts=True)
    task_enqueue_on_commit("mail.send", key=key)
    return len(rows)


def mail_send_queued(*, key: str | None = None, now: datetime | None = None,
                     limit: int = SWEEP_BATCH) -> MailOutcome:
    """Send the queued messages that are due (of `key`, or of every key: the sweep), at most
    `limit` rows; failures are scheduled again with backoff, or given up. Runs outside any
    transaction. Nothing is sent, and the rows wait, while mail is switched off."""
    if not mail_enabled():
        return MailOutcome(disabled=True)
    now = now or timezone.now()
    outcome = MailOutcome()
    sender = _Sender()
    try:
        for delivery in _lease(key=key, now=now, limit=limit):
            _deliver(delivery, now=now, sender=sender, outcome=outcome)
    finally:
        sender.close()
    return outcome


def _lease(*, key: str | None, now: datetime, limit: int) -> list[MailDelivery]:
    """Take the due rows for `lease_s()`: no other sender takes them meanwhile."""
    due = MailDelivery.objects.filter(status__in=OPEN, context_json__isnull=False,
                                      next_attempt_at__lte=now)
    if key is not None:
        due = due.filter(key=key)
    with transaction.atomic(durable=True):
        rows = list(due.select_for_update(skip_locked=True, of=("self",))
                    .select_related("recipient").order_by("next_attempt_at", "id")[:limit])
        MailDelivery.objects.filter(pk__in=[row.pk for row in rows]).update(
            next_attempt_at=now + timedelta(seconds=lease_s()))
    return rows


def _deliver(delivery: MailDelivery, *, now: datetime, sender: _Sender,
             outcome: MailOutcome) -> None:
    try:
        status = _serve(recipient=delivery.recipient, template=delivery.template,
                        context=loads(delivery.context_json), key=delivery.key,
                        attachments=(), force=False, sender=sender, outcome=outcome)
    except Exception as exc:  # a template or context that cannot render: counted, retried
        logger.exception("mail %s to user %s could not be rendered", delivery.key,
                         delivery.recipient_id)
        MailDelivery.objects.filter(pk=delivery.pk).update(
            status=D.FAILED, attempts=F("attempts") + 1, error=f"{type(exc).__name__}: {exc}")
        outcome.failed.append((delivery.recipient, str(exc)))
        status = D.FAILED
    if status == D.FAILED:
        _schedule_retry(delivery.pk, now=now)


def _schedule_retry(delivery_id: int, *, now: datetime) -> None:
    """After a failed attempt: due again after the backoff, or given up after the last."""
    row = MailDelivery.objects.filter(pk=delivery_id, status=D.FAILED)
    attempts = row.values_list("attempts", flat=True).first()
    if attempts is None:
        return
    if attempts >= max_attempts():
        row.update(status=D.GIVEN_UP)
        logger.error("mail %s given up after %s attempts", delivery_id, attempts)
        return
    row.update(next_attempt_at=now + timedelta(seconds=retry_countdown_s(max(attempts - 1, 0))))
