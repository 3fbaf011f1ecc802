"""Reconcile tasks: thin, named, idempotent."""

from celery import shared_task

from gpuquota.schedulers.conf import reconcile_interval_s, running_gpus_interval_s
from gpuquota.schedulers.reconcile import clusters_reconcile
from gpuquota.schedulers.slurm.jobs import slurm_clusters_accounting_import
from gpuquota.schedulers.slurm.running import slurm_clusters_running_gpus_import


@shared_task(name="schedulers.reconcile_all", acks_late=True)
def reconcile_all_task(*, reason: str = "beat") -> dict:
    """Reconcile every cluster that has a scheduler backend; then look at the Slurm
    clusters' lent GPUs (a loan returned asks for this reconcile: its borrowers are removed
    and the GPU seen free here, not a minute later)."""
    done = clusters_reconcile(reason=reason)
    done["running"] = slurm_clusters_running_gpus_import()
    return done


@shared_task(name="schedulers.slurm_accounting_import", acks_late=True)
def slurm_accounting_import_task() -> dict:
    """Import Slurm's jobs (sacct, from each cluster's cursor) and record loan returns."""
    return slurm_clusters_accounting_import()


@shared_task(name="schedulers.slurm_running_gpus", acks_late=True)
def slurm_running_gpus_task() -> dict:
    """Record which GPUs each Slurm cluster's running jobs hold (only slurmctld knows)."""
    return slurm_clusters_running_gpus_import()


BEAT_SCHEDULE = {
    "schedulers-reconcile-all": {
        "task": "schedulers.reconcile_all",
        "schedule": float(reconcile_interval_s()),
        "kwargs": {"reason": "beat"},
    },
    "schedulers-slurm-accounting-import": {
        "task": "schedulers.slurm_accounting_import",
        "schedule": float(reconcile_interval_s()),
    },
    "schedulers-slurm-running-gpus": {
        "task": "schedulers.slurm_running_gpus",
        "schedule": float(running_gpus_interval_s()),
    },
}
