"""Slurm's reads of what gpuquota recorded of it: the jobs of a reservation and foreign use
(docs/accounting.md#foreign-use), from Slurm's accounting (`SlurmJob`) and the GPUs
slurmctld said each running job held (`SlurmJobGpu`)."""

from __future__ import annotations

from collections import defaultdict

from django.db.models import Q

from accounts.models import ClusterIdentity
from gpuquota.reservations.models import Assignment, Reservation
from gpuquota.schedulers.backend import ForeignUse, owned_name
from gpuquota.schedulers.models import BindingLevel, ReservationBinding, SlurmJob, SlurmJobGpu
from gpuquota.schedulers.slurm.objects import hostlist_expand
from gpuquota.schedulers.slurm.options import LENDING_ACCOUNT, SCAVENGER_QOS

#: Reservations that never held GPUs (as on Kubernetes, docs/accounting.md#foreign-use).
NOT_HELD = (Reservation.Status.PENDING, Reservation.Status.CANCELLED, Reservation.Status.DENIED)
BY_GPUS = "the GPUs slurmctld said the job held (node:index)"
BY_NODES = "Slurm's accounting: the job ran on nodes the reservation held whole"


def hold_jobs(reservation) -> list[SlurmJob]:
    """The latest Slurm jobs in the reservation's Slurm reservation or seen running on its
    GPUs, each with `gpus_seen` (`node:index`, on its GPUs)."""
    seen = defaultdict(list)
    rows = SlurmJobGpu.objects.filter(
        gpu__assignments__reservation=reservation, first_seen_at__lt=reservation.end,
        last_seen_at__gte=reservation.start,
    ).distinct().order_by("node", "gpu_index")
    for row in rows:
        seen[(row.cluster_id, row.job_id)].append(f"{row.node}:{row.gpu_index}")
    on_gpus = Q(pk__in=[])
    for cluster_id, job_id in seen:
        on_gpus |= Q(cluster_id=cluster_id, job_id=job_id)
    jobs = list(SlurmJob.objects.filter(
        Q(reservation=owned_name("res", reservation.pk)) | on_gpus).order_by("-submitted_at")[:10])
    for job in jobs:
        job.gpus_seen = ", ".join(seen.get((job.cluster_id, job.job_id), []))
    return jobs


def slurm_foreign_use(*, clusters, period, team=None) -> list[ForeignUse]:
    """Jobs that ran in `period` on GPUs a reservation held, while it held them, under an
    account that is not the team's and not a borrower's. Evidence is the GPUs slurmctld
    said the job held while it ran (SlurmJobGpu), whatever the binding level; a job never
    seen running (shorter than the observation interval) counts by its nodes, and only where
    the reservation held them whole."""
    bindings = ReservationBinding.objects.filter(
        reservation__end__gt=period.start, reservation__start__lt=period.end,
        reservation__assignments__gpu__node__cluster__in=clusters,
    ).exclude(reservation__status__in=NOT_HELD).select_related("reservation__team")
    if team is not None:
        bindings = bindings.filter(reservation__team=team)
    bindings = list(bindings.distinct())
    if not bindings:
        return []
    teams = {(cluster_id, key): slug for cluster_id, key, slug in ClusterIdentity.objects.filter(
        cluster__in=clusters, kind=ClusterIdentity.Kind.SLURM_ACCOUNT, team__isnull=False,
    ).order_by("valid_from").values_list("cluster_id", "key", "team__slug")}
    found = []
    for binding in bindings:
        assignments = list(Assignment.objects.filter(
            reservation=binding.reservation, gpu__node__cluster__in=clusters).select_related(
            "gpu__node"))
        if assignments:
            found += _foreign_jobs(binding, assignments, period, teams)
    return found


def _foreign_jobs(binding, assignments, period, teams: dict) -> list[ForeignUse]:
    r = binding.reservation
    cluster_id = assignments[0].gpu.node.cluster_id
    lo, hi = max(r.start, period.start), min(r.end, period.end)
    own = [*ClusterIdentity.objects.filter(
        cluster_id=cluster_id, team=r.team, kind=ClusterIdentity.Kind.SLURM_ACCOUNT,
    ).values_list("key", flat=True), LENDING_ACCOUNT]
    jobs = SlurmJob.objects.filter(
        cluster_id=cluster_id, started_at__lt=hi, started_at__isnull=False,
    ).filter(Q(ended_at__isnull=True) | Q(ended_at__gt=lo)).exclude(
        account__in=own).exclude(qos=SCAVENGER_QOS).exclude(gpus=0)
    seen = defaultdict(list)  # job id -> the reserved GPUs it was seen on
    for row in SlurmJobGpu.objects.filter(
        cluster_id=cluster_id, gpu_id__in=[a.gpu_id for a in assignments],
        first_seen_at__lt=hi, last_seen_at__gte=lo,
    ).exclude(account__in=own).order_by("node", "gpu_index"):
        seen[row.job_id].append(row)
    whole = binding.level in (BindingLevel.WHOLE_NODES, BindingLevel.EXACT_GPUS)
    observed = set(SlurmJobGpu.objects.filter(
        cluster_id=cluster_id, job_id__in=[j.job_id for j in jobs]).values_list(
        "job_id", flat=True)) if whole else set()
    nodes = {a.gpu.node.hostname.split(".")[0] for a in assignments}
    found = []
    for job in jobs.filter(job_id__in=list(seen)) if not whole else jobs:
        use = dict(cluster_id=cluster_id, reservation=r, account=job.account, job=job.job_id,
                   using_team=teams.get((cluster_id, job.account), ""), user=job.user,
                   first_seen=job.started_at, last_seen=job.ended_at, detail=job)
        if rows := seen.get(job.job_id, []):
            found.append(ForeignUse(**use, evidence=BY_GPUS,
                                    nodes=tuple(sorted({row.node for row in rows})),
                                    gpus=tuple(f"{row.node}:{row.gpu_index}" for row in rows)))
        elif job.job_id not in observed and (shared := nodes & set(hostlist_expand(job.nodes))):
            found.append(ForeignUse(**use, evidence=BY_NODES, nodes=tuple(sorted(shared))))
    return found
