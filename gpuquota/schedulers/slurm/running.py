"""Which GPUs running Slurm jobs hold, read while they run from slurmctld (`scontrol -d -o
show job`'s `GRES=gpu:<type>:N(IDX:..)` per node, or slurmrestd's `gres_detail`). Slurm's
accounting keeps only counts, so this is the only place the scheduler says which GPUs a job
had; each observation extends the job's SlurmJobGpu rows (first and last seen), and looks at
the lent GPUs (`gpuquota.schedulers.slurm.loans`)."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.utils import timezone

from gpuquota.inventory.models import Cluster, Gpu
from gpuquota.schedulers.backend import backend_for
from gpuquota.schedulers.models import BackendConfig, SlurmJobGpu
from gpuquota.schedulers.slurm.jobs import slurm_clusters_each
from gpuquota.schedulers.slurm.loans import slurm_loans_observe
from gpuquota.schedulers.slurm.objects import RunningGpu, running_gpus_parse


@transaction.atomic
def running_gpus_record(*, cluster: Cluster, gpus: list[RunningGpu], at: datetime,
                        node_name) -> int:
    """Record one observation: each (job, node, index) seen now gets `last_seen_at = at`
    (and `first_seen_at` when new), tied to the inventory's GPU at that node and index
    (`node_name` maps a host name to Slurm's node name). Returns the GPUs seen. A few
    queries per observation, whatever the number of running jobs (it runs every minute)."""
    seen = {(g.job_id, g.node, g.index): g for g in gpus}
    known = {(row.job_id, row.node, row.gpu_index): row for row in
             SlurmJobGpu.objects.select_for_update().filter(
                 cluster=cluster, job_id__in={g.job_id for g in gpus})}
    later = [row for key, row in known.items() if key in seen and row.last_seen_at < at]
    for row in later:
        row.last_seen_at = at
    SlurmJobGpu.objects.bulk_update(later, ["last_seen_at"])
    new = [g for key, g in seen.items() if key not in known]
    if new:
        inventory = {
            (node_name(hostname), index): pk
            for hostname, index, pk in Gpu.objects.filter(
                node__cluster=cluster, index__isnull=False).values_list(
                "node__hostname", "index", "pk")
        }
        SlurmJobGpu.objects.bulk_create([SlurmJobGpu(
            cluster=cluster, job_id=g.job_id, node=g.node, gpu_index=g.index,
            first_seen_at=at, last_seen_at=at, account=g.account, user=g.user,
            gpu_id=inventory.get((g.node, g.index))) for g in new],
            ignore_conflicts=True)  # a concurrent observation wrote it first: as good
    return len(gpus)


def running_gpus_import(*, cluster: Cluster, at: datetime | None = None,
                        loans: dict | None = None) -> int:
    """Ask slurmctld which GPUs the cluster's running jobs hold (through slurmrestd when
    the cluster has its URL, else `scontrol -d -o show job`), and record it; then look at
    the lent GPUs in the same answer (`slurm_loans_observe`, what it did put in `loans`)."""
    backend = backend_for(cluster, BackendConfig.objects.get(cluster=cluster))
    at = at or timezone.now()
    text = None
    if backend.rest is not None:
        gpus = backend.rest.running_job_gpus()
    else:
        text = backend.runner.run(["scontrol", "-d", "-o", "show", "job"]).stdout
        gpus = running_gpus_parse(text)
    seen = running_gpus_record(cluster=cluster, gpus=gpus, at=at,
                               node_name=backend.options.node_name)
    done = slurm_loans_observe(cluster=cluster, backend=backend, text=text,
                               at=at if text is not None else None)
    if loans is not None:
        loans.update(done.as_dict())
    return seen


def _observe(cluster: Cluster) -> dict:
    loans: dict = {}
    return {"gpus": running_gpus_import(cluster=cluster, loans=loans), "loans": loans}


def slurm_clusters_running_gpus_import() -> dict:
    """`running_gpus_import` for every Slurm cluster with a backend switched on; a failure
    becomes the cluster's problem, never an exception."""
    return slurm_clusters_each(_observe, what="running jobs' GPUs")
