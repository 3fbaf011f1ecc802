"""Celery tasks of lending: thin, named, idempotent, retried."""

from celery import shared_task
from django.utils.dateparse import parse_datetime

from gpuquota.core.retry import DB_RETRY
from gpuquota.lending.conf import digest_interval_s, scan_interval_s
from gpuquota.lending.notify import preemption_digest_send
from gpuquota.lending.scan import lending_scan

BEAT_SCHEDULE = {
    "lending-scan": {
        "task": "lending.scan",
        "schedule": scan_interval_s(),
        "options": {"expires": max(scan_interval_s(), 30)},
    },
    "lending-preemption-digest": {
        "task": "lending.preemption_digest",
        "schedule": digest_interval_s(),
        "options": {"expires": max(digest_interval_s(), 60)},
    },
}


@shared_task(name="lending.scan", **DB_RETRY)
def scan_task(now: str | None = None) -> dict:
    """End due loans, record returned GPUs seen free, lend idle GPUs (at `now`, ISO 8601,
    when given: a test's frozen clock or a replay)."""
    return lending_scan(now=parse_datetime(now) if now else None)


@shared_task(name="lending.preemption_digest", **DB_RETRY)
def preemption_digest_task(now: str | None = None) -> dict:
    """Tell the borrowers' leads, one digest each, which of their work was preempted."""
    return preemption_digest_send(now=parse_datetime(now) if now else None)
