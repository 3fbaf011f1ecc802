"""What the rest of the product calls when scheduler state must follow a change."""

from gpuquota.core.dispatch import task_enqueue_on_commit


def schedulers_reconcile_request(*, reason: str) -> None:
    """Ask every cluster's scheduler backend to reconcile once the current transaction
    commits (a reservation, quota or loan changed). Idempotent: reconciling twice changes
    nothing the second time."""
    task_enqueue_on_commit("schedulers.reconcile_all", reason=reason)
