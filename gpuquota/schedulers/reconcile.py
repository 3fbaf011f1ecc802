"""The reconcile loop over every cluster's scheduler backend (plan, observe, apply).

The backend interface and its implementations (Slurm, Kubernetes) are built on this;
until a cluster has a backend configured, reconciling it does nothing.
"""


def clusters_reconcile(*, reason: str) -> dict:
    """Reconcile every cluster that has a scheduler backend; a summary per cluster."""
    return {"reason": reason, "clusters": {}}
