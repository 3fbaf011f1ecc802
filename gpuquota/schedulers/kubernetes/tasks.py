"""The Kubernetes backend's periodic work: thin, named, idempotent."""

from celery import shared_task

from gpuquota.schedulers.conf import reconcile_interval_s
from gpuquota.schedulers.kubernetes.evictions import clusters_pods_killed_observe
from gpuquota.schedulers.kubernetes.returns import clusters_returns_observe


@shared_task(name="kubernetes.returns_observe", acks_late=True)
def returns_observe_task() -> dict:
    """Loans freed by Kueue's reclamation preemptions, recorded per cluster."""
    return clusters_returns_observe()


@shared_task(name="kubernetes.pods_killed_observe", acks_late=True)
def pods_killed_observe_task() -> dict:
    """Pods the clusters ended for a node's trouble, kept for the reliability figures."""
    return clusters_pods_killed_observe()


BEAT_SCHEDULE = {
    "kubernetes-pods-killed-observe": {
        "task": "kubernetes.pods_killed_observe",
        "schedule": float(reconcile_interval_s()),
    },
    "kubernetes-returns-observe": {
        "task": "kubernetes.returns_observe",
        "schedule": float(reconcile_interval_s()),
    },
}
