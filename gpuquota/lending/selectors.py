"""Reads of lending: opt-outs in force, the GPUs the policy may lend, loans (per cluster for
the scheduler backends, per team for its page), the pool and the time-to-return."""

import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Exists, Max, OuterRef, Q, QuerySet
from django.utils import timezone

from accounts.models import Team
from gpuquota.inventory.models import Cluster, GpuHealthInterval
from gpuquota.lending.conf import lend_after_idle_s
from gpuquota.lending.idle import Candidate, borrower_team_ids_by_gpu
from gpuquota.lending.models import LendingOptOut
from gpuquota.reliability.held import drained_gpu_ids
from gpuquota.reservations.models import Assignment, Loan, Reservation
from gpuquota.schedulers.models import BackendConfig, Capabilities

QUANTILES = (50, 95, 99)


def optouts_live() -> QuerySet[LendingOptOut]:
    """Opt-outs in force now, newest first."""
    return LendingOptOut.objects.filter(ended_at__isnull=True).select_related(
        "team", "reservation__gpu_class", "gpu_class", "created_by")


def optouts_list(*, teams: QuerySet[Team] | None = None, live_only: bool = False
                 ) -> QuerySet[LendingOptOut]:
    """Opt-outs, of `teams` when given, live ones only when asked."""
    rows = LendingOptOut.objects.select_related("team", "reservation__gpu_class", "gpu_class",
                                                "created_by", "ended_by")
    if teams is not None:
        rows = rows.filter(team__in=teams)
    return rows.filter(ended_at__isnull=True) if live_only else rows


def lending_off_for(*, reservation: Reservation) -> LendingOptOut | None:
    """The live opt-out that keeps the reservation's GPUs from being lent, if any."""
    return optouts_live().filter(
        Q(scope=LendingOptOut.Scope.RESERVATION, reservation=reservation)
        | Q(scope=LendingOptOut.Scope.TEAM_CLASS, team_id=reservation.team_id,
            gpu_class_id=reservation.gpu_class_id)).first()


def lending_off_q(reservation_ref: str) -> Q:
    """Assignments (or reservations) under a live opt-out; `reservation_ref` reaches the
    reservation from the filtered model."""
    live = LendingOptOut.objects.filter(ended_at__isnull=True)
    return Q(Exists(live.filter(scope=LendingOptOut.Scope.RESERVATION,
                                reservation_id=OuterRef(f"{reservation_ref}id")))) | Q(Exists(
        live.filter(scope=LendingOptOut.Scope.TEAM_CLASS,
                    team_id=OuterRef(f"{reservation_ref}team_id"),
                    gpu_class_id=OuterRef(f"{reservation_ref}gpu_class_id"))))


def failed_gpu_ids(*, gpu_ids, at: datetime) -> set[int]:
    """The GPUs among `gpu_ids` that are failed at `at`, or kept out by a drain (a GPU
    waiting for the fix its failure needs: docs/reliability.md#what-a-drain-keeps-out)."""
    gpu_ids = list(gpu_ids)
    return set(GpuHealthInterval.objects.filter(
        Q(valid_until__isnull=True) | Q(valid_until__gt=at), gpu_id__in=gpu_ids,
        state=GpuHealthInterval.State.FAILED, valid_from__lte=at,
    ).values_list("gpu_id", flat=True)) | drained_gpu_ids(gpu_ids=gpu_ids, at=at)


def clusters_not_lending():
    """The clusters whose scheduler backend (switched on) says it cannot give a lent GPU
    back (Slurm without preempt/qos: the cluster page says why): never lent."""
    return Capabilities.objects.filter(
        facts__preemption=False, cluster__backend_config__isnull=False).exclude(
        cluster__backend_config__mode=BackendConfig.Mode.OFF).values("cluster_id")


def assignments_lendable(*, now: datetime) -> QuerySet[Assignment]:
    """Assignments in force now, of active reservations that allow lending, on whole GPUs
    with no open loan (failed GPUs are left to the caller: `failed_gpu_ids`)."""
    open_loans = Loan.objects.filter(returned_at__isnull=True)
    return (Assignment.objects
            .exclude(gpu__node__cluster_id__in=clusters_not_lending())
            .filter(assigned_from__lte=now, assigned_until__gt=now,
                    reservation__status=Reservation.Status.ACTIVE, gpu__parent__isnull=True)
            .exclude(gpu_id__in=open_loans.values("gpu_id"))
            .exclude(lending_off_q("reservation__"))
            .select_related("reservation__team", "reservation__gpu_class", "gpu__node"))


def lend_candidates(*, now: datetime) -> list[tuple[Assignment, Candidate]]:
    """The lendable assignments whose GPU can have been idle for LEND_AFTER_IDLE_S: the
    assignment began that long ago, and the GPU's last loan returned that long ago (an owner
    who took a GPU back gets the full window before it is lent again); not failed."""
    since = now - timedelta(seconds=lend_after_idle_s())
    # Plain columns, not six model instances per row (10,000 GPUs: ~9,000 rows a minute);
    # the assignment carries its keys only: `loan_lend` reads it again under its lock.
    rows = list(assignments_lendable(now=now).filter(assigned_from__lte=since).annotate(
        last_return=Max("gpu__loans__returned_at")).values_list(
        "id", "gpu_id", "reservation_id", "gpu__node__cluster_id", "reservation__team_id",
        "last_return"))
    failed = failed_gpu_ids(gpu_ids=[row[1] for row in rows], at=now)
    return [(Assignment(id=pk, gpu_id=gpu_id, reservation_id=reservation_id),
             Candidate(gpu_id=gpu_id, cluster_id=cluster_id, team_id=team_id, since=since))
            for pk, gpu_id, reservation_id, cluster_id, team_id, last_return in rows
            if gpu_id not in failed and (last_return is None or last_return <= since)]


def loans_list(*, teams: QuerySet[Team] | None = None, state: str | None = None
               ) -> QuerySet[Loan]:
    """Loans, newest first, of the reservations of `teams` when given; `state`: open
    (lent now), returning (returned, not yet seen free) or returned (seen free)."""
    rows = Loan.objects.select_related(
        "assignment__reservation__team", "assignment__reservation__gpu_class",
        "gpu__node__cluster", "lent_by", "returned_by")
    if teams is not None:
        rows = rows.filter(assignment__reservation__team__in=teams)
    if state == "open":
        rows = rows.filter(returned_at__isnull=True)
    elif state == "returning":
        rows = rows.filter(returned_at__isnull=False, freed_at__isnull=True)
    elif state == "returned":
        rows = rows.filter(freed_at__isnull=False)
    return rows


LOAN_STATES = ("open", "returning", "returned")


def loans_active_for_cluster(*, cluster: Cluster, at: datetime) -> list[Loan]:
    """The loans in force at `at` on the cluster's GPUs: what its scheduler backend opens
    to preemptible work. A backend preempts the borrowers of every other loan."""
    return list(loans_list().filter(
        Q(returned_at__isnull=True) | Q(returned_at__gt=at), gpu__node__cluster=cluster,
        lent_from__lte=at))


def loans_returning_for_cluster(*, cluster: Cluster) -> list[Loan]:
    """Returned loans of the cluster whose GPU nobody has yet seen free: the backend preempts
    their borrowers and reports `loan_return_observed`."""
    return list(loans_list(state="returning").filter(gpu__node__cluster=cluster))


def loans_returning() -> list[Loan]:
    """Returned loans whose GPU nobody has yet seen free, on clusters without a scheduler
    backend switched on: there the samples say when the borrowers left. Where a backend
    observes, only the scheduler's report says the GPU is free: a sample showing no
    process never overrides the scheduler showing a borrower's job holding the GPU."""
    observed = BackendConfig.objects.exclude(mode=BackendConfig.Mode.OFF).values("cluster_id")
    return list(loans_list(state="returning").exclude(gpu__node__cluster_id__in=observed))


def loan_candidate(loan: Loan, *, since: datetime) -> Candidate:
    """The loan's GPU as judged by `gpuquota.lending.idle` from `since`."""
    return Candidate(gpu_id=loan.gpu_id, cluster_id=loan.gpu.node.cluster_id,
                     team_id=loan.assignment.reservation.team_id, since=since)


@dataclass
class TeamLoans:
    lent: list = field(default_factory=list)  # open and returning loans of the team's GPUs
    borrowed: list = field(default_factory=list)  # open loans the team's work runs on


def team_loans(*, team: Team, now: datetime | None = None,
               lookback: timedelta = timedelta(hours=1)) -> TeamLoans:
    """The team's GPUs lent now (or returning), and the lent GPUs its processes ran on in
    the last `lookback`."""
    now = now or timezone.now()
    live = loans_list().filter(Q(returned_at__isnull=True) | Q(freed_at__isnull=True))
    result = TeamLoans(lent=list(live.filter(assignment__reservation__team=team)))
    # every other team's open loans, as the few columns a candidate needs: read whole,
    # with their joined rows, 1,400 took 0.2-0.3 s at 10,000 GPUs (issue 34)
    others = list(Loan.objects.filter(returned_at__isnull=True).exclude(
        assignment__reservation__team=team).values_list(
        "id", "gpu_id", "gpu__node__cluster_id", "assignment__reservation__team_id",
        "lent_from"))
    borrowers = borrower_team_ids_by_gpu(candidates=[
        Candidate(gpu_id=gpu_id, cluster_id=cluster_id, team_id=team_id,
                  since=max(lent_from, now - lookback))
        for _id, gpu_id, cluster_id, team_id, lent_from in others], until=now)
    result.borrowed = list(live.filter(id__in=[row[0] for row in others
                                               if team.pk in borrowers[row[1]]]))
    return result


def nearest_rank(values: list[int], percent: int) -> int | None:
    """The nearest-rank percentile of `values` (None when empty)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(math.ceil(percent / 100 * len(ordered)), 1) - 1]


@dataclass(frozen=True)
class ReturnFigures:
    returns: int
    p50_s: int | None
    p95_s: int | None
    p99_s: int | None


def returns_list(*, start: datetime, end: datetime) -> QuerySet[Loan]:
    """Loans returned in [start, end) and seen free, most recent first."""
    return loans_list().filter(returned_at__gte=start, returned_at__lt=end,
                               freed_at__isnull=False).order_by("-returned_at", "-id")


def time_to_return(*, start: datetime, end: datetime) -> ReturnFigures:
    """The number of returns asked in [start, end) and seen free, and the nearest-rank
    p50/p95/p99 of their time-to-return (freed_at - returned_at), in seconds."""
    values = [int((freed - returned).total_seconds()) for returned, freed in
              returns_list(start=start, end=end).values_list("returned_at", "freed_at")]
    p50, p95, p99 = (nearest_rank(values, q) for q in QUANTILES)
    return ReturnFigures(returns=len(values), p50_s=p50, p95_s=p95, p99_s=p99)
