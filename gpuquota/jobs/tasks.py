"""Celery tasks of the job reports: thin, named, idempotent, retried."""

from celery import shared_task
from django.utils import timezone

from gpuquota.core.retry import DB_RETRY
from gpuquota.jobs.services import jobs_refresh

BEAT_SCHEDULE = {
    "jobs-refresh": {
        "task": "jobs.refresh",
        "schedule": 300,
        "options": {"expires": 600},
    },
}


@shared_task(name="jobs.refresh", **DB_RETRY)
def refresh() -> dict:
    """Collect the jobs of every cluster, then report (and mail about) those settled."""
    return jobs_refresh(now=timezone.now().replace(microsecond=0))
