"""Slurm's reads of what gpuquota recorded of it: the jobs of a reservation and foreign use
(docs/accounting.md#foreign-use), from Slurm's accounting (`SlurmJob`) and the GPUs
slurmctld said each running job held (`SlurmJobGpu`)."""

from __future__ import annotations

from collections import defaultdict
from copy import copy

from django.db.models import Exists, F, OuterRef, Q, Window
from django.db.models.functions import RowNumber

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


def holds_jobs(reservations) -> dict[int, list[SlurmJob]]:
    """By reservation id: its latest Slurm jobs (10), in its Slurm reservation or seen
    running on its GPUs, each with `gpus_seen` (`node:index`, on its GPUs). Four queries,
    whatever the reservations."""
    by_id = {r.pk: r for r in reservations}
    if not by_id:
        return {}
    holders = defaultdict(list)  # GPU id -> the reservations that held it
    assignments = Assignment.objects.filter(reservation__in=list(by_id))
    for reservation_id, gpu_id in assignments.values_list("reservation_id", "gpu_id").distinct():
        holders[gpu_id].append(by_id[reservation_id])
    seen = defaultdict(lambda: defaultdict(list))  # reservation id -> (cluster, job) -> GPUs
    for row in SlurmJobGpu.objects.filter(
        gpu_id__in=assignments.values("gpu_id"),
        first_seen_at__lt=max(r.end for r in by_id.values()),
        last_seen_at__gte=min(r.start for r in by_id.values()),
    ).order_by("node", "gpu_index"):
        for r in holders[row.gpu_id]:
            if row.first_seen_at < r.end and row.last_seen_at >= r.start:
                seen[r.pk][(row.cluster_id, row.job_id)].append(f"{row.node}:{row.gpu_index}")
    named = defaultdict(list)
    for job in SlurmJob.objects.filter(
        reservation__in=[owned_name("res", pk) for pk in by_id],
    ).annotate(rank=Window(RowNumber(), partition_by=F("reservation"),
                           order_by=[F("submitted_at").desc(), F("id").desc()])
               ).filter(rank__lte=10):
        named[job.reservation].append(job)
    on_gpus = defaultdict(list)
    keys = {key for jobs in seen.values() for key in jobs}
    which = Q(pk__in=[])
    for cluster_id in {c for c, _ in keys}:
        which |= Q(cluster_id=cluster_id, job_id__in=[j for c, j in keys if c == cluster_id])
    for job in SlurmJob.objects.filter(which):
        on_gpus[(job.cluster_id, job.job_id)].append(job)
    found = {}
    for pk in by_id:
        jobs = {job.pk: job for job in named[owned_name("res", pk)]}
        jobs |= {job.pk: job for key in seen[pk] for job in on_gpus[key]}
        latest = sorted(jobs.values(), key=lambda j: (j.submitted_at, j.pk), reverse=True)[:10]
        found[pk] = [copy(job) for job in latest]
        for job in found[pk]:
            job.gpus_seen = ", ".join(seen[pk].get((job.cluster_id, job.job_id), []))
    return found


def slurm_foreign_use(*, clusters, period, team=None) -> list[ForeignUse]:
    """Jobs that ran in `period` on GPUs a reservation held, while it held them, under an
    account that is not the team's and not a borrower's. Evidence is the GPUs slurmctld
    said the job held while it ran (SlurmJobGpu), whatever the binding level; a job never
    seen running (shorter than the observation interval) counts by its nodes, and only where
    the reservation held them whole. Six queries, whatever the reservations and jobs."""
    bindings = ReservationBinding.objects.filter(
        reservation__end__gt=period.start, reservation__start__lt=period.end,
        reservation__assignments__gpu__node__cluster__in=clusters,
    ).exclude(reservation__status__in=NOT_HELD).select_related("reservation__team")
    if team is not None:
        bindings = bindings.filter(reservation__team=team)
    bindings = list(bindings.distinct())
    held = _held(bindings, clusters)
    if not held:
        return []
    teams, own = {}, defaultdict(lambda: {LENDING_ACCOUNT})  # (cluster, team id): accounts
    for cluster_id, key, team_id, slug in ClusterIdentity.objects.filter(
        cluster__in=clusters, kind=ClusterIdentity.Kind.SLURM_ACCOUNT, team__isnull=False,
    ).order_by("valid_from").values_list("cluster_id", "key", "team_id", "team__slug"):
        teams[(cluster_id, key)] = slug
        own[(cluster_id, team_id)].add(key)
    windows = [(max(b.reservation.start, period.start), min(b.reservation.end, period.end))
               for b in bindings if b.reservation_id in held]
    lo, hi = min(w[0] for w in windows), max(w[1] for w in windows)
    rows = _rows_on(held, lo, hi)
    # the held reservations' clusters only: a job never seen running is matched by node,
    # on its reservation's cluster (issue 34: every Slurm cluster's, 30,000 jobs on a
    # team's page at 100,000 GPUs)
    whole = {(one["cluster_id"], node) for b in bindings if b.level in WHOLE
             and (one := held.get(b.reservation_id)) is not None for node in one["nodes"]}
    jobs = _jobs(rows, lo, hi, whole_nodes=whole)
    found = []
    for binding in bindings:
        if (one := held.get(binding.reservation_id)) is not None:
            found += _foreign_jobs(binding, one, period, teams, own, rows, jobs)
    return found


#: Binding levels where the reservation holds its nodes whole: evidence by nodes counts.
WHOLE = (BindingLevel.WHOLE_NODES, BindingLevel.EXACT_GPUS)


def _held(bindings, clusters) -> dict[int, dict]:
    """By reservation id, on `clusters`: its cluster (that of its first assignment), its
    GPUs' ids and its nodes' short names."""
    held: dict[int, dict] = {}
    for reservation_id, cluster_id, gpu_id, hostname in Assignment.objects.filter(
        reservation__in=[b.reservation_id for b in bindings], gpu__node__cluster__in=clusters,
    ).order_by("id").values_list("reservation_id", "gpu__node__cluster_id", "gpu_id",
                                 "gpu__node__hostname"):
        one = held.setdefault(reservation_id, {"cluster_id": cluster_id, "gpus": set(),
                                               "nodes": set()})
        one["gpus"].add(gpu_id)
        one["nodes"].add(hostname.split(".")[0])
    return held


def _rows_on(held: dict, lo, hi) -> dict[int, list[SlurmJobGpu]]:
    """The GPUs jobs were seen on in [lo, hi) that a reservation of `held` held, of an
    account not its team's (for one of them, at least), by GPU id, by node and index."""
    not_own = Assignment.objects.filter(
        gpu_id=OuterRef("gpu_id"), reservation_id__in=list(held),
    ).exclude(Exists(ClusterIdentity.objects.filter(
        cluster_id=OuterRef(OuterRef("cluster_id")), team_id=OuterRef("reservation__team_id"),
        kind=ClusterIdentity.Kind.SLURM_ACCOUNT, key=OuterRef(OuterRef("account")))))
    by_gpu = defaultdict(list)
    for row in SlurmJobGpu.objects.filter(
        Exists(not_own), first_seen_at__lt=hi, last_seen_at__gte=lo,
    ).exclude(account=LENDING_ACCOUNT).order_by("node", "gpu_index"):
        by_gpu[row.gpu_id].append(row)
    return by_gpu


def _jobs(rows: dict, lo, hi, whole_nodes: set[tuple[int, str]]) -> dict:
    """The jobs that may be foreign use in [lo, hi): those seen on `rows`, and those never
    seen running on a node a binding holds whole (`whole_nodes`: (cluster id, node)), by
    `(cluster id, job id)` and, for those never seen, by `(cluster id, node)`. The never-seen
    jobs of those clusters are first read as their nodes only (a cluster's period may hold
    tens of thousands), and whole only where one of their nodes is held."""
    seen = {(row.cluster_id, row.job_id) for gpu_rows in rows.values() for row in gpu_rows}
    running = SlurmJob.objects.filter(started_at__lt=hi, started_at__isnull=False).filter(
        Q(ended_at__isnull=True) | Q(ended_at__gt=lo)).exclude(
        account=LENDING_ACCOUNT).exclude(qos=SCAVENGER_QOS).exclude(gpus=0)
    which = Q(pk__in=[])
    for cluster_id in {c for c, _ in seen}:
        which |= Q(cluster_id=cluster_id, job_id__in=[j for c, j in seen if c == cluster_id])
    if whole_nodes:
        never_seen = running.filter(cluster_id__in={c for c, _ in whole_nodes}).exclude(
            Exists(SlurmJobGpu.objects.filter(cluster_id=OuterRef("cluster_id"),
                                              job_id=OuterRef("job_id"))))
        which |= Q(pk__in=[pk for pk, cluster_id, nodes in never_seen.values_list(
            "pk", "cluster_id", "nodes").iterator()
            if any((cluster_id, node) in whole_nodes for node in hostlist_expand(nodes))])
    jobs = {"by_id": defaultdict(list), "by_node": defaultdict(list)}
    for job in running.filter(which):
        jobs["by_id"][(job.cluster_id, job.job_id)].append(job)
        if (job.cluster_id, job.job_id) not in seen:
            for node in set(hostlist_expand(job.nodes)):
                jobs["by_node"][(job.cluster_id, node)].append(job)
    return jobs


def _foreign_jobs(binding, held: dict, period, teams: dict, own: dict, rows: dict,
                  jobs: dict) -> list[ForeignUse]:
    r, cluster_id = binding.reservation, held["cluster_id"]
    lo, hi = max(r.start, period.start), min(r.end, period.end)
    own = own[(cluster_id, r.team_id)]
    seen = defaultdict(list)  # job id -> the reserved GPUs it was seen on
    for gpu_id in held["gpus"]:
        for row in rows.get(gpu_id, ()):
            if row.cluster_id == cluster_id and row.first_seen_at < hi \
                    and row.last_seen_at >= lo and row.account not in own:
                seen[row.job_id].append(row)
    candidates = {job.pk: job for job_id in seen
                  for job in jobs["by_id"].get((cluster_id, job_id), ())}
    if binding.level in WHOLE:
        candidates |= {job.pk: job for node in held["nodes"]
                       for job in jobs["by_node"].get((cluster_id, node), ())}
    found = []
    for job in sorted(candidates.values(), key=lambda j: (j.submitted_at, j.pk), reverse=True):
        if not (job.started_at < hi and (job.ended_at is None or job.ended_at > lo)) \
                or job.account in own:
            continue
        use = dict(cluster_id=cluster_id, reservation=r, account=job.account, job=job.job_id,
                   using_team=teams.get((cluster_id, job.account), ""), user=job.user,
                   first_seen=job.started_at, last_seen=job.ended_at, detail=job)
        if job_rows := sorted(seen.get(job.job_id, []), key=lambda row: (row.node,
                                                                         row.gpu_index)):
            found.append(ForeignUse(**use, evidence=BY_GPUS,
                                    nodes=tuple(sorted({row.node for row in job_rows})),
                                    gpus=tuple(f"{row.node}:{row.gpu_index}"
                                               for row in job_rows)))
        elif shared := held["nodes"] & set(hostlist_expand(job.nodes)):
            found.append(ForeignUse(**use, evidence=BY_NODES, nodes=tuple(sorted(shared))))
    return found
