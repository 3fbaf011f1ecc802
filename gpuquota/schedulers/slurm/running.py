"""Which GPUs running Slurm jobs hold, read while they run from slurmctld (`scontrol -d -o
show job`'s `GRES=gpu:<type>:N(IDX:..)` per node, or slurmrestd's `gres_detail`). Slurm's
accounting keeps only counts, so this is the only place the scheduler says which GPUs a job
had; each observation extends the job's SlurmJobGpu rows (first and last seen)."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.utils import timezone

from gpuquota.inventory.models import Cluster, Gpu
from gpuquota.schedulers.backend import BackendError, backend_for
from gpuquota.schedulers.models import BackendConfig, SlurmJobGpu
from gpuquota.schedulers.services import problem_record
from gpuquota.schedulers.slurm.objects import RunningGpu, running_gpus_parse


@transaction.atomic
def running_gpus_record(*, cluster: Cluster, gpus: list[RunningGpu], at: datetime,
                        node_name) -> int:
    """Record one observation: each (job, node, index) seen now gets `last_seen_at = at`
    (and `first_seen_at` when new), tied to the inventory's GPU at that node and index
    (`node_name` maps a host name to Slurm's node name). Returns the rows touched."""
    inventory = {
        (node_name(g.node.hostname), g.index): g.pk
        for g in Gpu.objects.filter(node__cluster=cluster, index__isnull=False)
        .select_related("node")
    }
    for seen in gpus:
        row, created = SlurmJobGpu.objects.select_for_update().get_or_create(
            cluster=cluster, job_id=seen.job_id, node=seen.node, gpu_index=seen.index,
            defaults={"first_seen_at": at, "last_seen_at": at, "account": seen.account,
                      "user": seen.user, "gpu_id": inventory.get((seen.node, seen.index))},
        )
        if not created and row.last_seen_at < at:
            row.last_seen_at = at
            row.save(update_fields=["last_seen_at"])
    return len(gpus)


def running_gpus_import(*, cluster: Cluster, at: datetime | None = None) -> int:
    """Ask slurmctld which GPUs the cluster's running jobs hold (through slurmrestd when
    the cluster has its URL, else `scontrol -d -o show job`), and record it."""
    backend = backend_for(cluster, BackendConfig.objects.get(cluster=cluster))
    if backend.rest is not None:
        gpus = backend.rest.running_job_gpus()
    else:
        gpus = running_gpus_parse(
            backend.runner.run(["scontrol", "-d", "-o", "show", "job"]).stdout)
    return running_gpus_record(cluster=cluster, gpus=gpus, at=at or timezone.now(),
                               node_name=backend.options.node_name)


def slurm_clusters_running_gpus_import() -> dict:
    """`running_gpus_import` for every Slurm cluster with a backend switched on; a failure
    becomes the cluster's problem, never an exception."""
    done = {}
    for config in BackendConfig.objects.exclude(mode=BackendConfig.Mode.OFF).filter(
        cluster__scheduler=Cluster.Scheduler.SLURM
    ).select_related("cluster"):
        try:
            done[config.cluster.slug] = {"gpus": running_gpus_import(cluster=config.cluster)}
        except BackendError as exc:
            problem_record(cluster=config.cluster, summary=f"running jobs' GPUs: {exc.message}",
                           detail=exc.detail)
            done[config.cluster.slug] = {"error": exc.message}
    return done
