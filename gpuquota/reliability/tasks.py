"""Celery tasks of reliability: thin, named, idempotent, retried."""

from datetime import timedelta

from celery import shared_task
from django.utils import timezone

from gpuquota.core.retry import DB_RETRY
from gpuquota.reliability.drains import drains_apply, drains_auto_release, drains_observe
from gpuquota.reliability.replace import drains_reservations_move
from gpuquota.reliability.rma import rmas_link_replacements
from gpuquota.reliability.snapshot import FIGURES_INTERVAL_S, reliability_figures_write

DRAIN_INTERVAL_S = 60
#: How far back a run looks for critical events received: missed runs are caught up.
DRAIN_LOOKBACK = timedelta(minutes=30)

BEAT_SCHEDULE = {
    "reliability-drains": {
        "task": "reliability.drains",
        "schedule": DRAIN_INTERVAL_S,
        "options": {"expires": DRAIN_INTERVAL_S},
    },
    "reliability-figures": {
        "task": "reliability.figures",
        "schedule": FIGURES_INTERVAL_S,
        "options": {"expires": FIGURES_INTERVAL_S},
    },
}


@shared_task(name="reliability.drains", **DB_RETRY)
def drains_task() -> dict:
    """Drain the nodes of failures just received, read how far the open drains are
    (draining, drained), return those fixed, move the drained GPUs' reservations where a
    GPU is free, link the GPUs sent back (RMA) to those that took their slots."""
    now = timezone.now().replace(microsecond=0)
    drained = drains_apply(since=now - DRAIN_LOOKBACK, now=now)
    observed = drains_observe(now=now)
    released = drains_auto_release(now=now)
    moved = drains_reservations_move(now=now)
    linked = rmas_link_replacements()
    return {"drained": len(drained), "progress_changed": len(observed),
            "released": len(released), **moved, "rma_replaced": len(linked)}


@shared_task(name="reliability.figures", **DB_RETRY)
def figures_task() -> dict:
    """Replay the fleet's history once and store the figures, drift and lemons the page,
    the API and /metrics read (idempotent: a run replaces the last snapshot)."""
    snapshot = reliability_figures_write(as_of=timezone.now().replace(microsecond=0))
    return {"as_of": snapshot.as_of.isoformat(), "took_s": snapshot.took_s,
            "classes": len(snapshot.classes), "gpu_lemons": len(snapshot.gpu_lemons),
            "node_lemons": len(snapshot.node_lemons), "drift": len(snapshot.drift)}
