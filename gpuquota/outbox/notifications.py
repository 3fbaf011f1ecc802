"""The notification outbox: every message to a chat or webhook channel is a `Notification`
row written in the transaction of the change that causes it (`notification_queue`), then
delivered by the sweep (`notifications_send_due`, beat every minute), at least once.

- Idempotent queueing: one row per (`key`, `target`); queueing again is a no-op.
- A stable `message_id` per row: the `webhook-id` header of every attempt, so a receiver
  drops a copy (a delivery whose 2xx was lost is sent again: at least once).
- Generic webhooks are signed per Standard Webhooks (v1: HMAC-SHA256 over
  `id.timestamp.body` with the base64 key of the `whsec_` secret), `webhook-timestamp`
  being the attempt's own time, so a receiver's five-minute tolerance holds on retries.
- A sender leases the due rows (`FOR UPDATE SKIP LOCKED`, then `next_attempt_at` moved by
  the lease) so two sweeps never post one row at once; a failure (no answer, or not 2xx) is
  tried again after 30 s, 1, 2, 4... minutes (at most an hour), and given up after
  `max_attempts()`.
- The HTTP session is the caller's: the app that owns the channels mounts its network guard
  on it (which addresses a channel may reach), so this module trusts no URL itself.
"""

import base64
import hashlib
import hmac
import logging
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import requests
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from gpuquota.outbox.models import Notification
from gpuquota.outbox.render import Message, body_render
from gpuquota.outbox.sealing import seal, unseal

logger = logging.getLogger(__name__)
N = Notification.Status
TIMEOUT_S = 10
LEASE_S = 120


def max_attempts() -> int:
    """Attempts before a notification is given up (`OUTBOX_NOTIFY_MAX_ATTEMPTS`, 12: about
    five hours of backoff)."""
    return int(getattr(settings, "OUTBOX_NOTIFY_MAX_ATTEMPTS", 12))


def retry_delay_s(failures: int) -> int:
    """Seconds before the next attempt after `failures` failed ones (1 first)."""
    return min(30 * 2 ** (failures - 1), 3600)


def notification_queue(*, key: str, target: str, kind: str, url: str, message: Message,
                       secret: str = "", now: datetime | None = None) -> Notification | None:
    """Queue `message` for one channel endpoint in the caller's transaction; None when a
    row for (`key`, `target`) exists already (never twice)."""
    if kind not in Notification.Kind.values:
        raise ValueError(f"unknown channel kind {kind!r}")
    now = timezone.now() if now is None else now
    if Notification.objects.filter(key=key, target=target).exists():
        return None
    row = Notification(message_id=f"msg_{uuid.uuid4().hex}", key=key, target=target, kind=kind,
                       event=message.event, url_sealed=seal(url), secret_sealed=seal(secret),
                       body=body_render(kind, message, at=now), created_at=now.replace(
                           microsecond=0), next_attempt_at=now)
    # a concurrent queue of the same (key, target) loses quietly: one row
    Notification.objects.bulk_create([row], ignore_conflicts=True)
    return Notification.objects.filter(message_id=row.message_id).first()


def webhook_signature(*, secret: str, message_id: str, timestamp: int, body: str) -> str:
    """The Standard Webhooks `webhook-signature` value (`v1,<base64 HMAC-SHA256>`)."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{message_id}.{timestamp}.{body}".encode()
    return "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()


def request_headers(row: Notification, *, at: datetime) -> dict[str, str]:
    headers = {"Content-Type": "application/json", "User-Agent": "gpuquota-notify/1"}
    if row.kind == Notification.Kind.WEBHOOK:
        timestamp = int(at.timestamp())
        headers |= {"webhook-id": row.message_id, "webhook-timestamp": str(timestamp),
                    "webhook-signature": webhook_signature(
                        secret=unseal(row.secret_sealed), message_id=row.message_id,
                        timestamp=timestamp, body=row.body)}
    return headers


@dataclass
class SendOutcome:
    sent: list[int] = field(default_factory=list)
    failed: list[tuple[int, str]] = field(default_factory=list)
    given_up: list[int] = field(default_factory=list)


def _lease(*, now: datetime, limit: int, ids: list[int] | None) -> list[Notification]:
    due = Notification.objects.filter(status__in=[N.QUEUED, N.FAILED], next_attempt_at__lte=now)
    if ids is not None:
        due = due.filter(pk__in=ids)
    with transaction.atomic(durable=True):
        rows = list(due.select_for_update(skip_locked=True)
                    .order_by("next_attempt_at", "id")[:limit])
        Notification.objects.filter(pk__in=[r.pk for r in rows]).update(
            next_attempt_at=now + timedelta(seconds=LEASE_S))
    return rows


def _post(row: Notification, *, session: requests.Session, now: datetime
          ) -> tuple[int | None, str]:
    url = unseal(row.url_sealed)
    if not url:
        return None, "the channel's URL cannot be read (the outbox key changed)"
    try:
        response = session.post(url, data=row.body.encode(), timeout=TIMEOUT_S,
                                headers=request_headers(row, at=now), allow_redirects=False)
    except Exception as exc:  # refused by the guard, unreachable, timed out: retried
        return None, f"{type(exc).__name__}: {exc}"[:500]
    if 200 <= response.status_code < 300:
        return response.status_code, ""
    return response.status_code, f"HTTP {response.status_code}: {response.text[:200]}"


def notifications_send_due(*, session: requests.Session, now: datetime | None = None,
                           limit: int = 100, ids: list[int] | None = None) -> SendOutcome:
    """Post every due notification (or the due ones of `ids`) once; failures are
    scheduled again with backoff or given up. Runs outside any transaction."""
    now = timezone.now() if now is None else now
    outcome = SendOutcome()
    for row in _lease(now=now, limit=limit, ids=ids):
        code, error = _post(row, session=session, now=now)
        attempts = row.attempts + 1
        if not error:
            Notification.objects.filter(pk=row.pk).update(
                status=N.SENT, attempts=attempts, last_status_code=code, error="",
                sent_at=now.replace(microsecond=0), next_attempt_at=None)
            outcome.sent.append(row.pk)
        elif attempts >= max_attempts():
            Notification.objects.filter(pk=row.pk).update(
                status=N.GIVEN_UP, attempts=attempts, last_status_code=code, error=error,
                next_attempt_at=None)
            logger.error("notification %s given up after %s attempts: %s", row.pk, attempts,
                         error)
            outcome.given_up.append(row.pk)
        else:
            Notification.objects.filter(pk=row.pk).update(
                status=N.FAILED, attempts=attempts, last_status_code=code, error=error,
                next_attempt_at=now + timedelta(seconds=retry_delay_s(attempts)))
            outcome.failed.append((row.pk, error))
    return outcome
