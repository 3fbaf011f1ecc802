"""Reads of the job reports: who may see a job, a user's and a team's jobs worst offenders
first, their efficiency over a period, and the fleet's waste by team and pitfall."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.db.models import Count, F, Q, QuerySet, Sum

from accounts.permissions import can_view_team, is_admin
from accounts.selectors import teams_visible
from gpuquota.jobs.models import Job, JobGpu, JobNote

WORST_FIRST = [F("wasted_gpu_s").desc(nulls_last=True), "-started_at", "-pk"]


def job_can_view(user, job: Job) -> bool:
    """Admins, the job's owner, and whoever may read its team's data."""
    if not user.is_authenticated:
        return False
    if is_admin(user) or (job.owner_id is not None and job.owner_id == user.pk):
        return True
    return job.team is not None and can_view_team(user, job.team)


def jobs_visible(*, user) -> QuerySet[Job]:
    """The jobs `user` may read."""
    jobs = Job.objects.select_related("cluster", "team", "owner")
    if is_admin(user):
        return jobs
    return jobs.filter(Q(owner=user) | Q(team__in=teams_visible(user=user)))


def jobs_listed(*, jobs: QuerySet[Job], since: datetime | None = None,
                until: datetime | None = None) -> QuerySet[Job]:
    """`jobs` that ran in [since, until), worst offenders first (most GPU-seconds wasted),
    then newest; a job not reported yet (running, or settling) sorts last."""
    if since is not None:
        jobs = jobs.filter(Q(ended_at__isnull=True) | Q(ended_at__gt=since))
    if until is not None:
        jobs = jobs.filter(started_at__lt=until)
    return jobs.prefetch_related("notes").order_by(*WORST_FIRST)


@dataclass
class Efficiency:
    jobs: int
    reported: int
    held_gpu_s: int
    idle_gpu_s: int
    wasted_gpu_s: int
    wasted_cost: Decimal | None
    currency: str = ""  # the one currency of the amounts ("" when none or several)

    @property
    def held_hours(self) -> str:
        return f"{self.held_gpu_s / 3600:.1f}"

    @property
    def wasted_hours(self) -> str:
        return f"{self.wasted_gpu_s / 3600:.1f}"

    @property
    def efficiency_pct(self) -> int | None:
        """The share of the reported GPU-hours not wasted by a note."""
        if not self.held_gpu_s:
            return None
        return round(100 * (self.held_gpu_s - self.wasted_gpu_s) / self.held_gpu_s)


def jobs_efficiency(*, jobs: QuerySet[Job]) -> Efficiency:
    """The reported jobs' GPU-hours held, idle and wasted; money adds the rounded amounts
    of the jobs, as a statement adds its lines."""
    sums = jobs.order_by().aggregate(
        n=Count("pk"), reported=Count("pk", filter=Q(reported_at__isnull=False)),
        held=Sum("held_gpu_s"), idle=Sum("idle_gpu_s"), wasted=Sum("wasted_gpu_s"),
        cost=Sum("wasted_cost"))
    currencies = set(jobs.exclude(currency="").order_by().values_list("currency", flat=True)
                     .distinct())
    return Efficiency(jobs=sums["n"], reported=sums["reported"], held_gpu_s=sums["held"] or 0,
                      idle_gpu_s=sums["idle"] or 0, wasted_gpu_s=sums["wasted"] or 0,
                      wasted_cost=sums["cost"] if len(currencies) <= 1 else None,
                      currency=currencies.pop() if len(currencies) == 1 else "")


def team_users_ranked(*, jobs: QuerySet[Job]) -> list[dict]:
    """Per user of the jobs: GPU-hours held and wasted, most wasted first."""
    rows = (jobs.filter(reported_at__isnull=False).order_by()
            .values("owner__username", "user_name")
            .annotate(n=Count("pk"), held=Sum("held_gpu_s"), wasted=Sum("wasted_gpu_s"),
                      cost=Sum("wasted_cost"))
            .order_by("-wasted", "-held"))
    return [{"user": r["owner__username"] or r["user_name"] or "unknown", "jobs": r["n"],
             "held_hours": f"{(r['held'] or 0) / 3600:.1f}",
             "wasted_hours": f"{(r['wasted'] or 0) / 3600:.1f}", "wasted_cost": r["cost"],
             "efficiency_pct": round(100 * (r["held"] - r["wasted"]) / r["held"])
             if r["held"] else None} for r in rows]


def fleet_waste(*, since: datetime, until: datetime) -> dict:
    """The notes of the jobs that started in [since, until): GPU-hours and money wasted by
    team and pitfall, and by pitfall alone, most wasteful first (a row per currency)."""
    notes = JobNote.objects.filter(job__started_at__gte=since, job__started_at__lt=until,
                                   severity="waste")
    by_team = (notes.values("job__team__name", "code", "job__currency")
               .annotate(jobs=Count("job", distinct=True), wasted=Sum("wasted_gpu_s"),
                         cost=Sum("wasted_cost"))
               .order_by("-wasted", "job__team__name", "code"))
    by_code = (notes.values("code", "job__currency")
               .annotate(jobs=Count("job", distinct=True), wasted=Sum("wasted_gpu_s"),
                         cost=Sum("wasted_cost"))
               .order_by("-wasted", "code"))

    def hours(rows):
        return [{**r, "team": r.get("job__team__name") or "unattributed",
                 "wasted_hours": f"{(r['wasted'] or 0) / 3600:.1f}"} for r in rows]
    return {"by_team": hours(by_team), "by_code": hours(by_code),
            "total": jobs_efficiency(jobs=Job.objects.filter(started_at__gte=since,
                                                             started_at__lt=until))}


def pod_runs_held(*, since: datetime | None, as_of: datetime) -> list[tuple]:
    """(cluster_id, namespace, pod, started_at, ended_at or None, physical GPU id) of each
    Kubernetes pod run collected that started by `as_of` and ran after `since`, once per GPU
    it held (core's POD_RUNS: reliability's job-days; one query)."""
    held = JobGpu.objects.filter(job__source=Job.Source.KUBERNETES, job__started_at__lte=as_of)
    if since is not None:
        held = held.filter(Q(job__ended_at__isnull=True) | Q(job__ended_at__gte=since))
    return [(cluster_id, namespace, pod, started, ended, parent or gpu_id)
            for cluster_id, namespace, pod, started, ended, gpu_id, parent in held.values_list(
                "job__cluster_id", "job__account", "job__job_id", "job__started_at",
                "job__ended_at", "gpu_id", "gpu__parent_id")]
