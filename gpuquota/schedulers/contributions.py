"""What the scheduler backends add to other apps (`gpuquota.core.contributions`): how the
scheduler holds each of a team's reservations, the jobs that ran in it and other accounts'
jobs on its GPUs, on the team page; clusters with open problems and foreign use, on the
admin's home page; a reconcile after every change of reservations, quotas or maintenance."""

from datetime import datetime, timedelta

from django.urls import reverse

from gpuquota.core.attention import Attention
from gpuquota.core.sections import Section
from gpuquota.schedulers.models import Problem
from gpuquota.schedulers.selectors import FOREIGN_USE_DAYS, foreign_use, team_scheduler_holds
from gpuquota.schedulers.services import schedulers_reconcile_request


def team_holds_context(*, team, can_act, now: datetime):
    if not can_act:  # leads and admins
        return None
    holds = team_scheduler_holds(team=team, now=now)
    foreign = foreign_use(team=team, since=now - timedelta(days=FOREIGN_USE_DAYS))
    return {"holds": holds, "foreign": foreign} if holds or foreign else None


def problems_attention(now: datetime) -> list[Attention]:
    open_problems = Problem.objects.filter(status=Problem.Status.OPEN)
    foreign = foreign_use(since=now - timedelta(days=FOREIGN_USE_DAYS))
    return [Attention(
        key="scheduler_problems", label="Scheduler problems", count=open_problems.count(),
        url=reverse("scheduler_clusters"),
        detail=", ".join(sorted(set(open_problems.values_list("cluster__name", flat=True)))),
        order=60,
    ), Attention(
        key="foreign_use", label=f"Jobs of other accounts on reserved GPUs ({FOREIGN_USE_DAYS} "
        "days)", count=len(foreign), url=reverse("scheduler_clusters"),
        detail=", ".join(sorted({f.reservation.team.name for f in foreign})), order=61,
    )]


PAGE_SECTIONS = [
    Section(page="team", slot="main", template="schedulers/_team_holds.html",
            context=team_holds_context, order=10),
]

ATTENTION = [problems_attention]
RESERVATIONS_CHANGED = [schedulers_reconcile_request]
