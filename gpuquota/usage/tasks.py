"""Celery tasks of the usage app: thin, named, idempotent, retried."""

import logging
import time

from celery import shared_task
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from gpuquota.core.retry import DB_RETRY
from gpuquota.outbox.conf import dirty_sweep_budget_s, dirty_sweep_interval_s
from gpuquota.usage.conf import dirty_sweep_batch
from gpuquota.usage.fleet_summary import INTERVAL_S, fleet_summary_write
from gpuquota.usage.services import gpu_hour_recompute
from gpuquota.usage.silence import node_silences_scan
from gpuquota.usage.sweep import dirty_hours_process

logger = logging.getLogger(__name__)

BEAT_SCHEDULE = {
    "usage-fleet-summary": {
        "task": "usage.fleet_summary",
        "schedule": float(INTERVAL_S),
        "options": {"expires": INTERVAL_S},
    },
    "usage-node-silences-scan": {
        "task": "usage.node_silences_scan",
        "schedule": 60.0,
        "options": {"expires": 120},
    },
    "usage-dirty-sweep": {
        "task": "usage.dirty_sweep",
        "schedule": dirty_sweep_interval_s(),
        "options": {"expires": max(dirty_sweep_interval_s() * 4, 60)},
    },
}


@shared_task(name="usage.dirty_sweep", **DB_RETRY)
def dirty_sweep() -> int:
    """Recompute the outbox's GPU-hours due now (a batch; the next sweep takes the rest).
    Due times leave room for this sweep's budget; one that overruns it is logged."""
    started = time.monotonic()
    done = dirty_hours_process(limit=dirty_sweep_batch(), due_by=timezone.now())
    if (took_s := time.monotonic() - started) > dirty_sweep_budget_s():
        logger.warning("outbox sweep of %d GPU-hours took %.1f s, over its budget of %g s "
                       "(USAGE_DIRTY_SWEEP_BUDGET_S): rollups may lag more than the freshness "
                       "interval", done, took_s, dirty_sweep_budget_s())
    return done


@shared_task(name="usage.gpu_hour_recompute", **DB_RETRY)
def gpu_hour_recompute_task(gpu_id: int, hour: str) -> int:
    """Recompute one GPU-hour now (`hour` ISO 8601)."""
    return gpu_hour_recompute(gpu_id=gpu_id, hour=parse_datetime(hour))


@shared_task(name="usage.node_silences_scan", **DB_RETRY)
def node_silences_scan_task() -> dict:
    """Tell the admins' channels of nodes newly silent and of silent nodes reporting again
    (once each: `gpuquota.usage.silence`)."""
    done = node_silences_scan(now=timezone.now().replace(microsecond=0))
    return {"silent": done.silent, "reporting": done.reporting}


@shared_task(name="usage.fleet_summary", **DB_RETRY)
def fleet_summary_task() -> dict:
    """Count the fleet page's summary cards now (idempotent: replaces the last count)."""
    snapshot = fleet_summary_write(now=timezone.now().replace(microsecond=0))
    return {"at": snapshot.at.isoformat(), "gpus": snapshot.gpus}
