"""A cluster with four 80 GiB GPUs, a rate card, the role matrix, and the member's Slurm
jobs with their samples, all at fixed instants (tests/jobs/shapes.py's T0)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal

from django.utils import timezone

from accounts.models import ClusterIdentity
from gpuquota.ingest.models import Sample
from gpuquota.inventory.models import Gpu
from gpuquota.schedulers.models import SlurmJob, SlurmJobGpu
from tests.factories import (
    EPOCH,
    ClusterFactory,
    ClusterIdentityFactory,
    GpuClassFactory,
    NodeFactory,
    RateCardFactory,
    RoleMatrix,
    make_gpu,
)
from tests.jobs.shapes import T0

GIB = 1024 ** 3


@dataclass
class JobWorld(RoleMatrix):
    cluster: object = None
    gpus: list = None

    @classmethod
    def build(cls) -> JobWorld:
        roles = RoleMatrix.create()
        world = cls(**roles.__dict__)
        world.cluster = ClusterFactory(name="Della", slug="della")
        node = NodeFactory(cluster=world.cluster, hostname="h100-node-00")
        h100 = GpuClassFactory(name="H100")
        RateCardFactory(gpu_class=h100, on_demand_rate=Decimal("3.0000"))
        world.gpus = [make_gpu(node=node, gpu_class=h100, index=i) for i in range(4)]
        Gpu.objects.filter(pk__in=[g.pk for g in world.gpus]).update(
            memory_total_bytes=80 * GIB)
        ClusterIdentityFactory(cluster=world.cluster, kind=ClusterIdentity.Kind.SLURM_ACCOUNT,
                               key="vision", user=None, team=world.team, valid_from=EPOCH)
        ClusterIdentityFactory(cluster=world.cluster, kind=ClusterIdentity.Kind.UNIX_USER,
                               key="mem1", user=world.member, valid_from=EPOCH)
        return world

    def slurm_job(self, job_id: str, *, utils: list[list[float]], start=T0,
                  memory_gib: float = 20, account: str = "vision", user: str = "mem1",
                  partition: str = "gpu") -> SlurmJob:
        """A finished Slurm job on len(utils) GPUs, one sample a minute per GPU."""
        minutes = len(utils[0])
        end = start + timedelta(minutes=minutes)
        run = SlurmJob.objects.create(
            cluster=self.cluster, job_id=job_id, submitted_at=start - timedelta(minutes=1),
            started_at=start, ended_at=end, state="COMPLETED", account=account, user=user,
            partition=partition, gpus=len(utils), gpu_tres=f"gres/gpu:h100={len(utils)}",
            team=self.team if account == "vision" else None)
        rows = []
        for gpu, series in zip(self.gpus, utils, strict=False):
            SlurmJobGpu.objects.create(cluster=self.cluster, job_id=job_id, node=gpu.node.hostname,
                                       gpu_index=gpu.index, gpu=gpu, account=account, user=user,
                                       first_seen_at=start, last_seen_at=end)
            for i, util in enumerate(series):
                rows.append(Sample(
                    gpu=gpu, window_start=start + timedelta(minutes=i),
                    window_end=start + timedelta(minutes=i + 1), readings=6,
                    util_gpu_avg=Decimal(util), util_gpu_max=Decimal(util),
                    memory_used_bytes_max=int(memory_gib * GIB) if util else 0,
                    energy_j=300.0 * 60, received_at=timezone.now()))
        Sample.objects.bulk_create(rows, ignore_conflicts=True)
        return run


def samples_write(gpu: Gpu, utils: list[float], *, start, memory_gib: float = 20) -> None:
    """One sample a minute on `gpu` from `start`, at `utils` (memory held throughout: held
    memory at 0 % is not use)."""
    Sample.objects.bulk_create([Sample(
        gpu=gpu, window_start=start + timedelta(minutes=i),
        window_end=start + timedelta(minutes=i + 1), readings=6, util_gpu_avg=Decimal(u),
        util_gpu_max=Decimal(u), memory_used_bytes_max=int(memory_gib * GIB),
        energy_j=60.0 * 60, received_at=timezone.now()) for i, u in enumerate(utils)],
        ignore_conflicts=True)
