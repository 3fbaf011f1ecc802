"""The weekly digest (docs/jobs.md, The weekly digest): each user whose reported jobs of the
last ISO week held `JOBS_DIGEST_MIN_GPU_S` or more at an efficiency under
`JOBS_DIGEST_MAX_EFFICIENCY_PCT` gets their worst jobs and the pitfalls behind them; each
team's leads get the team's users ranked, and the team's channels the team's figures and
pitfalls (`told.py`). Queued in the mail and notification outboxes under the week's key, so
a second run in the same week sends nothing again; never mail to a user who opted out."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction

from accounts.models import Team
from accounts.selectors import team_leads
from gpuquota.jobs import conf
from gpuquota.jobs.models import Job, JobMailOptOut
from gpuquota.jobs.selectors import WORST_FIRST, jobs_efficiency, team_users_ranked
from gpuquota.jobs.told import team_digest_tell
from gpuquota.mail.outbox import mail_send_later

TOP = 5


def week_of(now: datetime) -> tuple[datetime, datetime]:
    """The last whole ISO week (Monday 00:00 UTC to Monday) before `now`."""
    monday = (now - timedelta(days=now.weekday())).replace(hour=0, minute=0, second=0,
                                                           microsecond=0)
    return monday - timedelta(days=7), monday


def _job_rows(jobs) -> list[dict]:
    return [{"pk": j.pk, "job_id": j.job_id, "cluster": j.cluster.name, "gpus": j.gpus_held,
             "wasted_hours": f"{j.wasted_gpu_s / 3600:.1f}",
             "notes": ", ".join(n.code for n in j.notes.all() if n.severity == "waste")}
            for j in jobs]


def jobs_digest_send(*, now: datetime) -> dict:
    """Queue the last week's digests; returns how many users and leads were queued."""
    since, until = week_of(now)
    key = f"jobs.digest.{since:%Y-%m-%d}"
    week = Job.objects.filter(reported_at__isnull=False, started_at__gte=since,
                              started_at__lt=until).select_related("cluster")
    opted_out = set(JobMailOptOut.objects.values_list("user_id", flat=True))
    users = leads = 0
    with transaction.atomic():
        for owner_id in (week.exclude(owner__isnull=True).order_by()
                         .values_list("owner_id", flat=True).distinct()):
            mine = week.filter(owner_id=owner_id)
            figures = jobs_efficiency(jobs=mine)
            if (owner_id in opted_out or figures.held_gpu_s < conf.digest_min_gpu_s()
                    or (figures.efficiency_pct or 0) >= conf.digest_max_efficiency_pct()):
                continue
            owner = mine.first().owner
            worst = mine.prefetch_related("notes").order_by(*WORST_FIRST)[:TOP]
            users += mail_send_later(
                template="jobs_digest", recipients=[owner], key=key,
                context={"since": since, "until": until, "jobs": figures.jobs,
                         "held_hours": figures.held_hours, "wasted_hours": figures.wasted_hours,
                         "efficiency_pct": figures.efficiency_pct, "worst": _job_rows(worst)})
        for team in Team.objects.filter(pk__in=week.values("team_id")).order_by("name"):
            mine = week.filter(team=team)
            figures = jobs_efficiency(jobs=mine)
            recipients = [u for u in team_leads(team=team, at=until) if u.pk not in opted_out]
            team_digest_tell(team=team, key=f"{key}.team.{team.pk}", since=since, until=until,
                             figures=figures, jobs=mine)
            leads += mail_send_later(
                template="jobs_team_digest", recipients=recipients, key=f"{key}.team.{team.pk}",
                context={"since": since, "until": until, "team_name": team.name,
                         "team_slug": team.slug, "jobs": figures.jobs,
                         "held_hours": figures.held_hours, "wasted_hours": figures.wasted_hours,
                         "efficiency_pct": figures.efficiency_pct,
                         "users": team_users_ranked(jobs=mine)[:10]})
    return {"users": users, "leads": leads}
