"""Reads of the mail module's delivery records, for callers that own their retries (a
statement's sending): who is being served now, who waits for a retry."""

from collections.abc import Iterable
from datetime import datetime, timedelta

from gpuquota.mail.conf import retry_countdown_s
from gpuquota.mail.models import MailDelivery

D = MailDelivery.Status


def mail_keys_waiting(*, keys: Iterable[str], now: datetime, stale_s: int) -> set[str]:
    """The keys among `keys` that a new attempt should leave alone at `now`: a recipient
    claimed less than `stale_s` ago and not yet served (its sender may still be at work),
    or a failure still inside its backoff (1, 2, 4... minutes after the attempt, at most an
    hour: `retry_countdown_s`). A claim older than that is an interrupted send."""
    rows = (MailDelivery.objects.filter(key__in=list(keys), status__in=[D.SENDING, D.FAILED])
            .values_list("key", "status", "attempts", "updated_at"))
    waiting = set()
    for key, status, attempts, updated_at in rows:
        wait_s = stale_s if status == D.SENDING else retry_countdown_s(max(attempts - 1, 0))
        if updated_at + timedelta(seconds=wait_s) > now:
            waiting.add(key)
    return waiting
