"""Reconcile tasks: thin, named, idempotent."""

from celery import shared_task

from gpuquota.schedulers.conf import reconcile_interval_s
from gpuquota.schedulers.reconcile import clusters_reconcile


@shared_task(name="schedulers.reconcile_all", acks_late=True)
def reconcile_all_task(*, reason: str = "beat") -> dict:
    """Reconcile every cluster that has a scheduler backend."""
    return clusters_reconcile(reason=reason)


BEAT_SCHEDULE = {
    "schedulers-reconcile-all": {
        "task": "schedulers.reconcile_all",
        "schedule": float(reconcile_interval_s()),
        "kwargs": {"reason": "beat"},
    },
}
