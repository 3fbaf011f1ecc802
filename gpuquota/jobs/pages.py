"""What the job pages show, computed from the selectors and the report (views only render)."""

from __future__ import annotations

from datetime import datetime, timedelta

from accounts.models import Team
from accounts.selectors import memberships_current
from gpuquota.core.timeutil import Period
from gpuquota.jobs import conf
from gpuquota.jobs.models import Job
from gpuquota.jobs.profiling import profile_figures
from gpuquota.jobs.report import job_report, utilization_chart_points
from gpuquota.jobs.selectors import (
    fleet_waste,
    jobs_efficiency,
    jobs_listed,
    jobs_visible,
    team_users_ranked,
)
from gpuquota.usage.charts import svg_bar_chart

WEEK = timedelta(days=7)
LIST_LIMIT = 100


def _gib(value: int | None) -> str:
    return "—" if value is None else f"{value / 1024 ** 3:.1f} GiB"


def job_page_context(*, job: Job, now: datetime) -> dict:
    """The report of one job, its figures per GPU with a utilization chart each."""
    report = job_report(job=job, now=now)
    a = report.analysis
    gpus = []
    for series, figures in zip(report.series, a.gpus, strict=True):
        gpus.append({
            "key": figures.key, "gpu_class": report.classes.get(figures.key, ""),
            "util_avg": figures.util_avg_pct, "util_max": figures.util_max_pct,
            "memory_max": _gib(figures.memory_max_bytes),
            "memory_total": _gib(figures.memory_total_bytes),
            "memory_pct": figures.memory_max_pct,
            "idle_pct": 100 * figures.idle_s / figures.sampled_s if figures.sampled_s else None,
            "energy_kwh": figures.energy_j / 3.6e6,
            "profiling": profile_figures(figures.profile),
            "chart": svg_bar_chart(
                points=utilization_chart_points(series, start=job.started_at, end=report.end),
                max_value=100, title=f"GPU utilization of {figures.key}"),
        })
    notes = [{"code": n.code, "severity": n.severity, "title": n.title, "advice": n.advice,
              "wasted_hours": f"{n.wasted_gpu_s / 3600:.2f}",
              "wasted_cost": report.wasted_cost(n.wasted_gpu_s)} for n in a.notes]
    return {"job": job, "report": report, "analysis": a, "gpus": gpus, "notes": notes,
            "held_hours": f"{a.held_gpu_s / 3600:.2f}",
            "wasted_hours": f"{a.wasted_gpu_s / 3600:.2f}",
            "wasted_cost": report.wasted_cost(a.wasted_gpu_s),
            "energy_kwh": a.energy_j / 3.6e6, "thresholds": conf.thresholds(),
            "profiling": profile_figures(a.profile),
            "running": job.ended_at is None}


def my_jobs_context(*, user, now: datetime) -> dict:
    """The user's own jobs of the last week, worst offenders first, and the week's figures."""
    since = now - WEEK
    jobs = jobs_listed(jobs=jobs_visible(user=user).filter(owner=user), since=since)
    teams = Team.objects.filter(pk__in=memberships_current(user=user).values("team_id"))
    return {"jobs": jobs[:LIST_LIMIT], "week": jobs_efficiency(jobs=jobs), "since": since,
            "teams": teams.order_by("name")}


def team_jobs_context(*, team, user, now: datetime) -> dict:
    """The team's jobs of the last week, worst first, and its users ranked."""
    since = now - WEEK
    jobs = jobs_listed(jobs=jobs_visible(user=user).filter(team=team), since=since)
    return {"team": team, "jobs": jobs[:LIST_LIMIT], "week": jobs_efficiency(jobs=jobs),
            "users": team_users_ranked(jobs=jobs), "since": since}


def fleet_jobs_context(*, period: Period) -> dict:
    """The month's waste by team and pitfall."""
    return {"period": period, **fleet_waste(since=period.start, until=period.end)}


def team_section_context(*, team, user, now: datetime) -> dict | None:
    """The team page's line on its jobs: the week's efficiency and the link to the list."""
    jobs = jobs_visible(user=user).filter(team=team, started_at__gte=now - WEEK)
    week = jobs_efficiency(jobs=jobs)
    return {"jobs_week": week, "jobs_team": team, "jobs_users": team_users_ranked(jobs=jobs)[:5]}
