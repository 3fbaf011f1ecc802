"""What every backend plans from (reservations, quotas, loans, teams' identities on one
cluster at one instant), and what the admin pages show."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Count, F, Q
from django.utils import timezone

from accounts.models import ClusterIdentity, Membership
from gpuquota.inventory.models import Cluster, Gpu
from gpuquota.reservations.models import Assignment, Loan, Quota, Reservation
from gpuquota.schedulers.backend import owned_name
from gpuquota.schedulers.models import (
    BindingLevel,
    Drift,
    LoanReturn,
    Problem,
    ReconcileRun,
    ReservationBinding,
    SlurmJob,
    SlurmJobGpu,
)
from gpuquota.schedulers.slurm.objects import hostlist_expand
from gpuquota.schedulers.slurm.options import LENDING_ACCOUNT, SCAVENGER_QOS

#: Reservations a scheduler must hold: approved and not over.
HELD_STATUSES = (Reservation.Status.SCHEDULED, Reservation.Status.ACTIVE)


@dataclass(frozen=True)
class GpuRef:
    gpu_id: int
    uuid: str
    node: str
    index: int | None


@dataclass(frozen=True)
class ReservationInput:
    id: int
    team_id: int
    team_slug: str
    gpu_class: str
    count: int
    start: datetime
    end: datetime
    gpus: tuple[GpuRef, ...]


@dataclass(frozen=True)
class LoanInput:
    id: int
    reservation_id: int
    team_id: int
    gpu: GpuRef
    lent_from: datetime


@dataclass(frozen=True)
class TeamInput:
    id: int
    slug: str
    accounts: tuple[str, ...]  # the team's Slurm accounts on the cluster
    namespaces: tuple[str, ...]  # its Kubernetes namespaces on the cluster
    users: tuple[str, ...]  # its members' unix user names on the cluster


@dataclass
class PlanInputs:
    at: datetime
    reservations: list[ReservationInput] = field(default_factory=list)
    loans: list[LoanInput] = field(default_factory=list)
    teams: dict[int, TeamInput] = field(default_factory=dict)
    # (team id, class) -> GPUs reserved now and GPUs of quota now
    reserved_now: dict[tuple[int, str], int] = field(default_factory=dict)
    quota_now: dict[tuple[int, str], int] = field(default_factory=dict)
    node_gpus: dict[str, int] = field(default_factory=dict)  # hostname -> GPUs in service
    classes: tuple[str, ...] = ()


def _gpu_ref(gpu) -> GpuRef:
    return GpuRef(gpu_id=gpu.pk, uuid=gpu.uuid, node=gpu.node.hostname, index=gpu.index)


def plan_inputs(*, cluster, at: datetime) -> PlanInputs:
    """Everything a backend needs to plan `cluster` at `at`: held reservations not yet over
    with the GPUs assigned to them from `at` on, open loans, and every team with a Slurm
    account or a Kubernetes namespace on the cluster (and its members' unix names)."""
    inputs = PlanInputs(at=at)
    in_service = Gpu.objects.filter(
        node__cluster=cluster, parent__isnull=True, commissioned_at__lte=at
    ).filter(Q(retired_at__isnull=True) | Q(retired_at__gt=at))
    inputs.node_gpus = dict(
        in_service.values_list("node__hostname").annotate(n=Count("id")).order_by()
    )
    inputs.classes = tuple(sorted(set(in_service.values_list("gpu_class__name", flat=True))))

    assignments = (
        Assignment.objects.filter(
            gpu__node__cluster=cluster, assigned_until__gt=at,
            reservation__status__in=HELD_STATUSES, reservation__end__gt=at,
        )
        .exclude(assigned_until=F("assigned_from"))
        .select_related("gpu__node", "reservation__team", "reservation__gpu_class")
        .order_by("reservation_id", "gpu__node__hostname", "gpu__index")
    )
    by_reservation: dict[int, list] = defaultdict(list)
    reservations = {}
    for a in assignments:
        by_reservation[a.reservation_id].append(_gpu_ref(a.gpu))
        reservations[a.reservation_id] = a.reservation
    for rid, r in sorted(reservations.items()):
        inputs.reservations.append(ReservationInput(
            id=rid, team_id=r.team_id, team_slug=r.team.slug, gpu_class=r.gpu_class.name,
            count=r.count, start=r.start, end=r.end, gpus=tuple(by_reservation[rid]),
        ))
        if r.start <= at < r.end:
            key = (r.team_id, r.gpu_class.name)
            inputs.reserved_now[key] = inputs.reserved_now.get(key, 0) + r.count

    for q in Quota.objects.filter(valid_from__lte=at).filter(
        Q(valid_until__isnull=True) | Q(valid_until__gt=at)
    ).select_related("gpu_class"):
        inputs.quota_now[(q.team_id, q.gpu_class.name)] = q.gpus

    loans = Loan.objects.filter(
        gpu__node__cluster=cluster, lent_from__lte=at, returned_at__isnull=True
    ).select_related("gpu__node", "assignment__reservation")
    for loan in loans.order_by("id"):
        inputs.loans.append(LoanInput(
            id=loan.pk, reservation_id=loan.assignment.reservation_id,
            team_id=loan.assignment.reservation.team_id, gpu=_gpu_ref(loan.gpu),
            lent_from=loan.lent_from,
        ))
    inputs.teams = _teams(cluster=cluster, at=at)
    return inputs


def _valid_at(at: datetime) -> Q:
    return Q(valid_from__lte=at) & (Q(valid_until__isnull=True) | Q(valid_until__gt=at))


def _teams(*, cluster, at: datetime) -> dict[int, TeamInput]:
    accounts: dict[int, list[str]] = defaultdict(list)
    namespaces: dict[int, list[str]] = defaultdict(list)
    team_slugs: dict[int, str] = {}
    for ident in ClusterIdentity.objects.filter(
        _valid_at(at), cluster=cluster,
        kind__in=[ClusterIdentity.Kind.SLURM_ACCOUNT, ClusterIdentity.Kind.K8S_NAMESPACE],
    ).select_related("team").order_by("key"):
        by_kind = accounts if ident.kind == ClusterIdentity.Kind.SLURM_ACCOUNT else namespaces
        by_kind[ident.team_id].append(ident.key)
        team_slugs[ident.team_id] = ident.team.slug
    unix_names: dict[int, str] = dict(
        ClusterIdentity.objects.filter(
            _valid_at(at), cluster=cluster, kind=ClusterIdentity.Kind.UNIX_USER
        ).values_list("user_id", "key")
    )
    users: dict[int, set[str]] = defaultdict(set)
    for m in Membership.objects.filter(_valid_at(at), team_id__in=team_slugs).values(
        "team_id", "user_id"
    ):
        if m["user_id"] in unix_names:
            users[m["team_id"]].add(unix_names[m["user_id"]])
    return {
        tid: TeamInput(id=tid, slug=team_slugs[tid], accounts=tuple(accounts[tid]),
                       namespaces=tuple(namespaces[tid]), users=tuple(sorted(users[tid])))
        for tid in sorted(team_slugs)
    }


# -- the pages -----------------------------------------------------------------------------

PAGE_ROWS = 20


def clusters_backends() -> list:
    """Every cluster with a scheduler, its backend configuration, capabilities and open
    problems (the admin's list)."""
    clusters = list(Cluster.objects.exclude(scheduler=Cluster.Scheduler.NONE).select_related(
        "backend_config", "scheduler_capabilities").order_by("name"))
    open_problems = dict(Problem.objects.filter(status=Problem.Status.OPEN).values_list(
        "cluster_id").annotate(n=Count("id")).order_by())
    for cluster in clusters:
        cluster.open_problems = open_problems.get(cluster.pk, 0)
    return clusters


FOREIGN_USE_DAYS = 30


def cluster_backend_detail(*, cluster, now: datetime) -> dict:
    """What the cluster's admin page shows: problems, drift, runs, bindings of the
    reservations it holds now, foreign use of the last 30 days, lent GPUs' returns."""
    return {
        "foreign": foreign_use(cluster=cluster, since=now - timedelta(days=FOREIGN_USE_DAYS)),
        "problems": Problem.objects.filter(cluster=cluster).order_by("status", "-last_seen_at")[
            :PAGE_ROWS],
        "drifts": Drift.objects.filter(cluster=cluster)[:PAGE_ROWS],
        "runs": ReconcileRun.objects.filter(cluster=cluster)[:PAGE_ROWS],
        "returns": LoanReturn.objects.filter(loan__gpu__node__cluster=cluster).select_related(
            "loan__gpu__node", "loan__assignment__reservation__team")[:PAGE_ROWS],
        "return_times": loan_return_times(cluster=cluster, now=now),
        "bindings": ReservationBinding.objects.filter(
            reservation__status__in=HELD_STATUSES,
            reservation__assignments__gpu__node__cluster=cluster,
        ).distinct().select_related("reservation__team", "reservation__gpu_class").order_by(
            "reservation__start"),
    }


#: The period of the time-to-return figures on the cluster page (as on /metrics).
RETURN_TIMES_DAYS = 7


def _nearest_rank(ordered: list[int], percent: int) -> int:
    return ordered[max(math.ceil(percent / 100 * len(ordered)), 1) - 1]


def loan_return_times(*, cluster, now: datetime | None = None) -> dict | None:
    """Time-to-return of the cluster's loans returned in the last RETURN_TIMES_DAYS and seen
    free: from the return (asked by the owner's job, a lead, the reservation's end..) to
    the first answer of slurmctld showing no borrower's job on the GPU (`freed_at`). Count,
    nearest-rank p50/p95/p99 and max (seconds), and the count by reason; None when none."""
    now = now or timezone.now()
    rows = Loan.objects.filter(gpu__node__cluster=cluster, freed_at__isnull=False,
                               returned_at__gte=now - timedelta(days=RETURN_TIMES_DAYS))
    pairs = list(rows.values_list("returned_at", "freed_at", "end_reason"))
    if not pairs:
        return None
    times = sorted(int((freed - returned).total_seconds()) for returned, freed, _ in pairs)
    reasons = defaultdict(int)
    for _, _, reason in pairs:
        reasons[Loan.EndReason(reason).label] += 1
    return {"count": len(times), "p50": _nearest_rank(times, 50),
            "p95": _nearest_rank(times, 95), "p99": _nearest_rank(times, 99), "max": times[-1],
            "days": RETURN_TIMES_DAYS, "reasons": sorted(reasons.items())}


def team_scheduler_holds(*, team, now: datetime) -> list[dict]:
    """The team's held reservations with how the scheduler holds each, and the Slurm jobs
    that ran in each (newest first)."""
    held = list(ReservationBinding.objects.filter(
        reservation__team=team, reservation__status__in=HELD_STATUSES,
        reservation__end__gt=now,
    ).select_related("reservation__gpu_class").order_by("reservation__start"))
    return [{"binding": b, "reservation": b.reservation, "jobs": _hold_jobs(b.reservation)}
            for b in held]


def _hold_jobs(reservation) -> list[SlurmJob]:
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


@dataclass(frozen=True)
class ForeignUse:
    """A job of another account on GPUs a reservation held, outside a loan: the evidence
    (the nodes; the GPUs, `node:index`, where slurmctld was seen saying which)."""

    reservation: object
    job: object
    nodes: tuple[str, ...]
    gpus: tuple[str, ...] = ()


def foreign_use(*, cluster=None, team=None, since: datetime) -> list[ForeignUse]:
    """Jobs that ran, since `since`, on GPUs a reservation held, while it held them, under
    an account that is not the team's and not a borrower's. Evidence is the GPUs slurmctld
    said the job held while it ran (SlurmJobGpu), whatever the binding level; a job never
    seen running (shorter than the observation interval) counts by its nodes, and only where
    the reservation held them whole."""
    bindings = ReservationBinding.objects.filter(reservation__end__gt=since).select_related(
        "reservation__team")
    if team is not None:
        bindings = bindings.filter(reservation__team=team)
    if cluster is not None:
        bindings = bindings.filter(reservation__assignments__gpu__node__cluster=cluster)
    found = []
    for binding in bindings.distinct():
        r = binding.reservation
        assignments = list(Assignment.objects.filter(reservation=r).select_related("gpu__node"))
        if assignments:
            found += _foreign_jobs(binding, assignments, since)
    return sorted(found, key=lambda f: f.job.started_at, reverse=True)


def _foreign_jobs(binding, assignments, since: datetime) -> list[ForeignUse]:
    r = binding.reservation
    node_cluster = assignments[0].gpu.node.cluster_id
    own = [*ClusterIdentity.objects.filter(
        cluster_id=node_cluster, team=r.team, kind=ClusterIdentity.Kind.SLURM_ACCOUNT,
    ).values_list("key", flat=True), LENDING_ACCOUNT]
    jobs = SlurmJob.objects.filter(
        cluster_id=node_cluster, started_at__lt=r.end, started_at__isnull=False,
    ).filter(Q(ended_at__isnull=True) | Q(ended_at__gt=max(r.start, since))).exclude(
        account__in=own).exclude(qos=SCAVENGER_QOS).exclude(gpus=0)
    seen = defaultdict(list)  # job id -> the reserved GPUs it was seen on
    for row in SlurmJobGpu.objects.filter(
        cluster_id=node_cluster, gpu_id__in=[a.gpu_id for a in assignments],
        first_seen_at__lt=r.end, last_seen_at__gte=max(r.start, since),
    ).exclude(account__in=own).order_by("node", "gpu_index"):
        seen[row.job_id].append(row)
    whole = binding.level in (BindingLevel.WHOLE_NODES, BindingLevel.EXACT_GPUS)
    observed = set(SlurmJobGpu.objects.filter(
        cluster_id=node_cluster, job_id__in=[j.job_id for j in jobs]).values_list(
        "job_id", flat=True)) if whole else set()
    nodes = {a.gpu.node.hostname.split(".")[0] for a in assignments}
    found = []
    for job in jobs.filter(job_id__in=list(seen)) if not whole else jobs:
        rows = seen.get(job.job_id, [])
        if rows:
            found.append(ForeignUse(reservation=r, job=job,
                                    nodes=tuple(sorted({row.node for row in rows})),
                                    gpus=tuple(f"{row.node}:{row.gpu_index}" for row in rows)))
        elif job.job_id not in observed and (shared := nodes & set(hostlist_expand(job.nodes))):
            found.append(ForeignUse(reservation=r, job=job, nodes=tuple(sorted(shared))))
    return found
