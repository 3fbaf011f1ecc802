"""What the scheduler backends add to other pages (`gpuquota.core.contributions`): how the
scheduler holds each of a team's reservations and the jobs that ran in it, on the team
page; clusters with open problems, on the admin's home page."""

from datetime import datetime

from django.urls import reverse

from gpuquota.core.attention import Attention
from gpuquota.core.sections import Section
from gpuquota.schedulers.models import Problem
from gpuquota.schedulers.selectors import team_scheduler_holds


def team_holds_context(*, team, can_act, now: datetime):
    if not can_act:  # leads and admins
        return None
    holds = team_scheduler_holds(team=team, now=now)
    return {"holds": holds} if holds else None


def problems_attention(now: datetime) -> list[Attention]:
    open_problems = Problem.objects.filter(status=Problem.Status.OPEN)
    return [Attention(
        key="scheduler_problems", label="Scheduler problems", count=open_problems.count(),
        url=reverse("scheduler_clusters"),
        detail=", ".join(sorted(set(open_problems.values_list("cluster__name", flat=True)))),
        order=60,
    )]


PAGE_SECTIONS = [
    Section(page="team", slot="main", template="schedulers/_team_holds.html",
            context=team_holds_context, order=10),
]

ATTENTION = [problems_attention]
