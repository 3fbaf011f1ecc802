"""Celery tasks of the telemetry importer: thin, named, idempotent (a pull imports from
the source's cursor, and a range stored again stores nothing twice)."""

from celery import shared_task
from django.utils import timezone

from gpuquota.core.retry import DB_RETRY
from gpuquota.telemetry import conf
from gpuquota.telemetry.models import TelemetrySource
from gpuquota.telemetry.services import source_pull, sources_claim_due

RETRY = {**DB_RETRY, "max_retries": 5}

BEAT_SCHEDULE = {
    "telemetry-sources-pull": {
        "task": "telemetry.sources_pull",
        "schedule": conf.BEAT_INTERVAL_S,
        "options": {"expires": max(conf.BEAT_INTERVAL_S * 3, 30)},
    },
}


@shared_task(name="telemetry.sources_pull", **RETRY)
def sources_pull() -> int:
    """Queue a pull of every source due one; returns how many."""
    due = sources_claim_due(now=timezone.now().replace(microsecond=0))
    for source_id in due:
        source_pull_one.delay(source_id=source_id)
    return len(due)


@shared_task(name="telemetry.source_pull", **RETRY)
def source_pull_one(*, source_id: int) -> int:
    """Import one source's closed windows; returns the samples stored."""
    source = TelemetrySource.objects.filter(pk=source_id, enabled=True).first()
    if source is None:
        return 0
    result = source_pull(source=source, now=timezone.now().replace(microsecond=0))
    return result.counts["samples"]["stored"] if result else 0
