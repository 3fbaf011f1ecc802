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
from gpuquota.core.contributions import hooks_call
from gpuquota.core.timeutil import Period
from gpuquota.inventory.models import Cluster, Gpu
from gpuquota.reservations.models import Assignment, Loan, Quota, Reservation
from gpuquota.schedulers.backend import ForeignUse, backend_classes
from gpuquota.schedulers.models import (
    Drift,
    LoanReturn,
    Problem,
    ReconcileRun,
    ReservationBinding,
)
from gpuquota.schedulers.slurm.selectors import holds_jobs

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
    #: (hostname, index, reason, at_once) of each GPU drained alone (core's GPUS_DRAINED)
    drained_gpus: tuple[tuple[str, int, str, bool], ...] = ()


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
    inputs.drained_gpus = tuple(sorted(row for rows in hooks_call("GPUS_DRAINED",
                                                                  cluster_id=cluster.pk)
                                       for row in rows))
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


#: The held reservations' bindings and the foreign uses the cluster page lists (each list
#: counted whole): a cluster of 10,000 GPUs holds about 900 reservations.
LIST_ROWS = 100


def cluster_backend_detail(*, cluster, now: datetime, period: Period) -> dict:
    """What the cluster's admin page shows: problems, drift, runs, the first LIST_ROWS
    bindings of the reservations it holds now and of the foreign uses in `period` (newest
    first) with their counts, lent GPUs' returns."""
    foreign = foreign_use(cluster=cluster, period=period)
    bindings = ReservationBinding.objects.filter(
        reservation__status__in=HELD_STATUSES,
        reservation_id__in=Assignment.objects.filter(gpu__node__cluster=cluster)
        .values("reservation_id"))
    return {
        "foreign": foreign[:LIST_ROWS], "foreign_count": len(foreign),
        "problems": Problem.objects.filter(cluster=cluster).order_by("status", "-last_seen_at")[
            :PAGE_ROWS],
        "drifts": Drift.objects.filter(cluster=cluster)[:PAGE_ROWS],
        "runs": ReconcileRun.objects.filter(cluster=cluster)[:PAGE_ROWS],
        "returns": LoanReturn.objects.filter(loan__gpu__node__cluster=cluster).select_related(
            "loan__gpu__node", "loan__assignment__reservation__team")[:PAGE_ROWS],
        "return_times": loan_return_times(cluster=cluster, now=now),
        "bindings": bindings.select_related("reservation__team", "reservation__gpu_class")
        .order_by("reservation__start", "id")[:LIST_ROWS],
        "bindings_count": bindings.count(),
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
    jobs = holds_jobs([b.reservation for b in held])
    return [{"binding": b, "reservation": b.reservation, "jobs": jobs[b.reservation_id]}
            for b in held]


def foreign_use_period(now: datetime) -> Period:
    """The period every page shows foreign use for unless asked another: the statement
    period (the calendar month, UTC) that `now` is in."""
    return Period.month(now.year, now.month)


def foreign_use(*, period: Period, cluster=None, team=None) -> list[ForeignUse]:
    """Foreign use in `period` (docs/accounting.md#foreign-use), on `cluster` or on every
    cluster with a scheduler, on `team`'s reservations only if given, newest first: each
    cluster's backend reads its own evidence (`Backend.foreign_use`)."""
    clusters = [cluster] if cluster is not None else Cluster.objects.exclude(
        scheduler=Cluster.Scheduler.NONE).order_by("name")
    found = []
    for backend, theirs in backend_classes(clusters).items():
        found += backend.foreign_use(clusters=theirs, period=period, team=team)
    return sorted(found, key=lambda f: (f.first_seen, f.cluster_id, f.job), reverse=True)
