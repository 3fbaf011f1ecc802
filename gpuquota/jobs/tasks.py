"""Celery tasks of the job reports: thin, named, idempotent, retried."""

from celery import shared_task
from django.utils import timezone

from gpuquota.core.retry import DB_RETRY
from gpuquota.jobs.alerts import jobs_zero_use_scan
from gpuquota.jobs.conf import zero_use_scan_interval_s
from gpuquota.jobs.digest import jobs_digest_send
from gpuquota.jobs.services import jobs_refresh

BEAT_SCHEDULE = {
    "jobs-refresh": {
        "task": "jobs.refresh",
        "schedule": 300,
        "options": {"expires": 600},
    },
    # Hourly: the week's key makes the digest go out once, in the first run of the week.
    "jobs-digest": {"task": "jobs.digest", "schedule": 3600, "options": {"expires": 3600}},
    "jobs-zero-use": {
        "task": "jobs.zero_use_scan",
        "schedule": zero_use_scan_interval_s(),
        "options": {"expires": max(60, 2 * zero_use_scan_interval_s())},
    },
}


@shared_task(name="jobs.refresh", **DB_RETRY)
def refresh() -> dict:
    """Collect the jobs of every cluster, then report (and mail about) those settled."""
    return jobs_refresh(now=timezone.now().replace(microsecond=0))


@shared_task(name="jobs.zero_use_scan", **DB_RETRY)
def zero_use_scan() -> int:
    """Warn the running jobs whose GPUs have all been at zero past their threshold."""
    return jobs_zero_use_scan(now=timezone.now().replace(microsecond=0))


@shared_task(name="jobs.digest", **DB_RETRY)
def digest() -> dict:
    """Queue the last week's digests to users and leads (once a week, whatever the runs)."""
    return jobs_digest_send(now=timezone.now().replace(microsecond=0))
